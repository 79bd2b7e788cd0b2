"""The worker's record in the registry of live workers (``setqueue.registry``), written by a thread
of its own every WORKER_HEARTBEAT_SECONDS with a TTL of three beats. A Redis error is logged once
per outage; a clean stop removes the record, a killed worker's expires.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence

import redis

from setqueue.registry import MOST_HELD_LISTED, MOST_TASKS_LISTED, WorkerRecord, beat, leave
from setqueue.version import __version__

BEATS_TO_LIVE = 3

log = logging.getLogger("setqueue.worker.heartbeat")

Snapshot = Callable[[], tuple[int, list[list[str]]]]  # () -> (slots busy, [queue, id] of the jobs held)


def new_worker_id() -> str:
    host = "".join(c if c.isalnum() or c in ".-" else "-" for c in socket.gethostname())[:100] or "host"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class Heartbeat:
    def __init__(
        self,
        client: redis.Redis,
        queue_names: Sequence[str],
        interval: float,
        *,
        slots: int,
        snapshot: Snapshot,
        handler: str = "",
        tasks: Sequence[str] = (),
    ) -> None:
        self.client = client
        self.queue_names = list(queue_names)
        self.interval = interval
        self.slots = slots
        self.snapshot = snapshot
        self.handler = handler
        self.tasks = sorted(tasks)  # the task registry's names (none: a plain handler)
        self.id = new_worker_id()
        self.host = socket.gethostname()
        self.started_at = time.time()
        self._ttl_ms = max(1, round(interval * BEATS_TO_LIVE * 1000))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            leave(self.client, self.queue_names, self.id)
        except redis.RedisError as exc:
            log.info("could not leave the registry of workers (%s); the record expires by itself", exc)

    def record(self) -> WorkerRecord:
        busy, held = self.snapshot()
        return WorkerRecord(
            id=self.id,
            host=self.host,
            pid=os.getpid(),
            queues=self.queue_names,
            slots=self.slots,
            busy=busy,
            held=held[:MOST_HELD_LISTED],
            held_count=len(held),
            started_at=self.started_at,
            seen_at=time.time(),
            handler=self.handler,
            version=__version__,
            heartbeat_seconds=self.interval,
            tasks=self.tasks[:MOST_TASKS_LISTED],
            task_count=len(self.tasks),
        )

    def beat_now(self) -> None:
        try:
            beat(self.client, self.queue_names, self.record(), self._ttl_ms)
        except Exception as exc:  # never let the thread die
            if not self._failing:
                log.warning("heartbeat failed (%s); the next one tries again", exc)
            self._failing = True
            return
        self._failing = False

    def _run(self) -> None:
        self.beat_now()
        while not self._stop.wait(self.interval):
            self.beat_now()
