"""The creator: enqueue ``<prefix>-<n>`` ids (or stdin's) at CREATE_RATE, in batches of at most
CREATE_BATCH, until CREATE_TOTAL (0: never) or stdin's end. A batch that hit a Redis error is sent
again (enqueue is idempotent). With AUDIT, it records how far the generated ids got.
"""

from __future__ import annotations

import itertools
import math
import secrets
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from setqueue.interface import JobQueue
from setqueue.runtime.audit import AuditRecorder
from setqueue.runtime.logs import plural
from setqueue.runtime.metrics import CreatorMetrics, new_registry
from setqueue.runtime.service import Service, Stopping
from setqueue.runtime.settings import CreatorSettings, SettingError


class CreatorService(Service[CreatorSettings, CreatorMetrics]):
    role = "creator"
    serves_several = False  # it fills QUEUE_NAME's first queue

    def __init__(self, settings: CreatorSettings, queue: JobQueue | None = None, stdin: TextIO | None = None) -> None:
        super().__init__(settings, CreatorMetrics(new_registry(), settings.queue_names[0]), queue)
        self.target = self.queue
        self.stdin = stdin
        self.prefix = settings.create_id_prefix or f"run-{secrets.token_hex(4)}"
        self.sent = 0
        self.created = 0
        self.duplicates = 0
        self._batches = 0
        audited = settings.audit and not settings.create_from_stdin
        shards = self.queue.shards
        if audited and len(shards) != 1:
            self.close()
            raise SettingError("AUDIT", "needs QUEUE_NAME's first queue unsharded (QUEUE_SHARDS=1), for now")
        self.audit = AuditRecorder(shards[0].redis, shards[0].keys) if audited else None

    def _ids(self) -> Iterator[str]:
        if self.settings.create_from_stdin:
            stream = self.stdin if self.stdin is not None else sys.stdin
            for line in stream:
                job_id = line.strip()
                if job_id:
                    yield job_id
            return
        numbers = itertools.count(1)
        if self.settings.create_total:
            numbers = iter(range(1, self.settings.create_total + 1))  # type: ignore[assignment]
        for n in numbers:
            yield f"{self.prefix}-{n}"

    def run(self) -> int:
        s = self.settings
        rate = s.create_rate
        # Small rates: small batches often, about 20 calls a second at most.
        chunk = s.create_batch if rate == 0 else min(s.create_batch, max(1, math.ceil(rate / 20)))
        ids = self._ids()
        source = "ids from stdin" if s.create_from_stdin else f"ids {self.prefix}-<n>"
        if s.audit and s.create_from_stdin:
            self.log.warning("AUDIT is on, but ids read from stdin are not recorded: the audit does not see them")
        self.log.info(
            "creating %s at %s, %s in batches of up to %d",
            source,
            f"{rate:g}/s" if rate else "full speed",
            f"{s.create_total} in total" if s.create_total and not s.create_from_stdin else "without end",
            s.create_batch,
        )
        started = time.monotonic()
        origin = started  # id number k is due at origin + k / rate
        exhausted = False
        batch: list[str] = []
        try:
            while not self.stop_event.is_set() and not exhausted:
                self.beat()
                want = s.create_batch
                if rate > 0:
                    now = time.monotonic()
                    due = math.floor((now - origin) * rate) - self.sent
                    if due > rate + s.create_batch:
                        # Far behind (an outage): catch up on ~1 s at most.
                        origin = now - (self.sent + min(rate, s.create_batch)) / rate
                        due = math.floor((now - origin) * rate) - self.sent
                    if due < chunk:
                        wake_at = origin + (self.sent + chunk) / rate
                        self.stop_event.wait(max(0.0, min(wake_at - now, 1.0)))
                        continue
                    want = min(s.create_batch, due)
                batch = list(itertools.islice(ids, want))
                if len(batch) < want:
                    exhausted = True
                if batch:
                    self._send(batch)
        except Stopping:
            self.log.warning("stopped during a Redis outage: %s read were not enqueued", plural(len(batch), "id"))
        elapsed = time.monotonic() - started
        self.log.info(
            "created %d new jobs (%d duplicates) from %d ids in %.1fs",
            self.created,
            self.duplicates,
            self.sent,
            elapsed,
        )
        return 0

    def _send(self, batch: list[str]) -> None:
        groups = self.settings.create_groups
        # Batches go to the groups in turn (a resend keeps its group).
        group = f"group-{self._batches % groups + 1}" if groups else None
        self._batches += 1
        # One request id across resends: an enqueue whose reply was lost counts its jobs as created once.
        added = self.resendable(lambda rid: self.target.enqueue(batch, group=group, request_id=rid), "enqueue")
        self.sent += len(batch)
        self.created += added
        self.duplicates += len(batch) - added
        self.metrics.jobs_created.inc(added)
        if added < len(batch):
            self.metrics.jobs_duplicate.inc(len(batch) - added)
        if self.audit is not None:
            # Ids are numbered from 1 in the order sent. Recorded after the enqueue: dying in between
            # leaves ids unaudited, never falsely lost.
            audit = self.audit
            try:
                self.retry(lambda: audit.created(self.prefix, self.sent), "audit")
            except Stopping:  # the batch is in the queue; only its record is missing
                self.log.warning(
                    "stopped during a Redis outage: ids up to %s-%d not recorded for the audit", self.prefix, self.sent
                )
