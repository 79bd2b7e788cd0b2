"""The main loops of the creator, worker and cleaner services (the packages only call ``main_*``).

creator: enqueues ``<prefix>-<n>`` ids (or ids read from stdin) at CREATE_RATE per second in
    batches of at most CREATE_BATCH, on a monotonic schedule; stops after CREATE_TOTAL (0 = never)
    or at the end of stdin. A batch that hit a Redis error is sent again (enqueue is idempotent).
worker: claims CLAIM_BATCH jobs, runs the handler on each (see ``setqueue.demo`` for the handler
    convention), acks successes and fails failures; an idle worker blocks on the wake-up list. On
    SIGTERM it stops claiming, finishes the jobs it holds within SHUTDOWN_GRACE_SECONDS, then hands
    what is left back to todos and exits 0.
cleaner: every SWEEP_INTERVAL requeues the jobs whose lease expired (their worker died), applies
    the retention of done, and publishes the queue depth gauges.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from setqueue.config import CleanerSettings, CreatorSettings, WorkerSettings, load_handler
from setqueue.lease import LeaseKeeper
from setqueue.metrics import QUEUE_STATES, CleanerMetrics, CreatorMetrics, WorkerMetrics
from setqueue.queue import FailOutcome, Lease, Queue
from setqueue.service import Service, Stopping, flush_logs, main, new_registry


class PermanentJobError(Exception):
    """Raise from a job handler to dead-letter the job at once, without retries."""


def _queue(settings: Any) -> Queue:
    return Queue.from_url(settings.redis_url, **settings.queue_options())


# -- creator ---------------------------------------------------------------------------------------


class CreatorService(Service[CreatorSettings]):
    role = "creator"

    def __init__(self, settings: CreatorSettings, queue: Queue | None = None, stdin: TextIO | None = None) -> None:
        self.m = CreatorMetrics(new_registry())
        super().__init__(settings, queue or _queue(settings), self.m)
        self.stdin = stdin
        self.prefix = settings.create_id_prefix or f"run-{secrets.token_hex(4)}"
        self.sent = 0
        self.created = 0
        self.duplicates = 0

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
        # Small rates send small batches often rather than one big batch now and then: aim at no
        # more than about 20 calls per second, and never more than CREATE_BATCH ids per call.
        chunk = s.create_batch if rate == 0 else min(s.create_batch, max(1, math.ceil(rate / 20)))
        ids = self._ids()
        source = "ids from stdin" if s.create_from_stdin else f"ids {self.prefix}-<n>"
        self.log.info(
            "creating %s at %s, %s in batches of up to %d",
            source,
            f"{rate:g}/s" if rate else "full speed",
            f"{s.create_total} in total" if s.create_total and not s.create_from_stdin else "without end",
            s.create_batch,
        )
        started = time.monotonic()
        origin = started  # the schedule: id number k is due at origin + k / rate
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
                        # Far behind (a Redis outage): do not burst to catch up on more than ~1 s.
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
            self.log.warning("stopped during a Redis outage: %d ids read were not enqueued", len(batch))
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
        added = self.retry(lambda: self.queue.enqueue(batch), "enqueue")
        self.sent += len(batch)
        self.created += added
        self.duplicates += len(batch) - added
        self.m.jobs_created.inc(added)
        if added < len(batch):
            self.m.jobs_duplicate.inc(len(batch) - added)


# -- worker ----------------------------------------------------------------------------------------

ACK_DELAY_SECONDS = 0.05  # successes are acked together unless the oldest has waited this long

# BLPOP must return before redis-py's socket timeout (30 s) would fire on the idle connection.
MAX_BLOCK_SECONDS = 20.0


class WorkerService(Service[WorkerSettings]):
    role = "worker"

    def __init__(
        self,
        settings: WorkerSettings,
        queue: Queue | None = None,
        handler: Callable[[Lease], Any] | None = None,
    ) -> None:
        self.m = WorkerMetrics(new_registry())
        super().__init__(settings, queue or _queue(settings), self.m)
        self._from_setting = handler is None
        self.handler = handler if handler is not None else load_handler(settings.job_handler)
        self._held: dict[tuple[str, str], Lease] = {}
        self._held_lock = threading.Lock()
        self._finished = threading.Event()
        self._abandoned = threading.Event()
        self.keeper = LeaseKeeper(self.queue, on_renewed=self._renewed, on_lost=self._lost)
        self._succeeded = self.m.jobs_completed.labels("success")

    @property
    def stall_seconds(self) -> float:
        return max(60.0, 3 * self.settings.idle_wait_seconds)

    def _renewed(self, count: int) -> None:
        self.m.lease_renewals.inc(count)

    def _lost(self, lease: Lease) -> None:
        self.m.leases_lost.inc()

    def _configure_handler(self) -> None:
        # The module JOB_HANDLER names (the function may have been imported into it from elsewhere).
        name = self.settings.job_handler.partition(":")[0] if self._from_setting else self.handler.__module__
        module = sys.modules.get(name or "")
        hook = getattr(module, "configure_worker", None)
        if callable(hook):
            hook(self.settings)

    # -- held leases -------------------------------------------------------------------------

    def _hold(self, leases: list[Lease]) -> None:
        with self._held_lock:
            for lease in leases:
                self._held[(lease.id, lease.token)] = lease
            self.m.jobs_in_progress.set(len(self._held))
        self.keeper.hold(leases)

    def _drop(self, leases: list[Lease]) -> None:
        self.keeper.drop(leases)
        with self._held_lock:
            for lease in leases:
                self._held.pop((lease.id, lease.token), None)
            self.m.jobs_in_progress.set(len(self._held))

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        self._configure_handler()
        self.log.info(
            "working with handler %s, claim batch %d, lease %gs", s.job_handler, s.claim_batch, s.lease_seconds
        )
        block = min(s.idle_wait_seconds, MAX_BLOCK_SECONDS)
        self.keeper.start()
        try:
            while not self.stop_event.is_set():
                self.beat()
                leases = self.retry(lambda: self.queue.claim(s.claim_batch), "claim")
                if not leases:
                    self.retry(lambda: self.idle_wait(lambda: self.queue.wait_for_work(block)), "wait")
                    continue
                self._hold(leases)
                self.m.jobs_claimed.inc(len(leases))
                self.m.queue_wait_seconds.observe_many(
                    wait for lease in leases if (wait := lease.queue_wait_seconds) is not None
                )
                self._process(leases)
        except Stopping:
            pass
        finally:
            self._finished.set()
            self.keeper.stop()
        with self._held_lock:
            left = list(self._held.values())
        if left and not self._abandoned.is_set():  # only after an unexpected exit from _process
            self._release(left)
        return 0

    def _process(self, leases: list[Lease]) -> None:
        to_ack: list[Lease] = []
        durations: list[float] = []  # observed together, once per ack: metrics stay off the per-job path
        oldest = 0.0
        try:
            for lease in leases:
                if self._abandoned.is_set():
                    return
                self.busy(True)
                started = time.monotonic()
                error: Exception | None = None
                try:
                    self.handler(lease)
                except Exception as exc:  # the handler is user code: any exception fails the attempt
                    error = exc
                finally:
                    self.busy(False)
                finished = time.monotonic()
                durations.append(finished - started)
                if error is None:
                    if not to_ack:
                        oldest = finished
                    to_ack.append(lease)
                else:
                    self._fail(lease, error)
                last = lease is leases[-1]
                if to_ack and (last or self.stop_event.is_set() or finished - oldest >= ACK_DELAY_SECONDS):
                    self.m.processing_seconds.observe_many(durations)
                    durations = []
                    self._ack(to_ack)
                    to_ack = []
        finally:
            self.m.processing_seconds.observe_many(durations)

    def _ack(self, leases: list[Lease]) -> None:
        self.keeper.drop(leases)  # first: a renewal racing the ack must not report the lease lost
        # The work is done: keep trying through an outage (the grace deadline still applies).
        results = self.retry(lambda: self.queue.ack_many(leases), "ack", until_stopped=False)
        acked = sum(1 for result in results if result.acked)
        self._succeeded.inc(acked)
        if acked < len(results):
            self.m.stale_acks.inc(len(results) - acked)
        self.m.end_to_end_seconds.observe_many(
            seconds for result in results if (seconds := result.end_to_end_seconds) is not None
        )
        self._drop(leases)

    def _fail(self, lease: Lease, error: Exception) -> None:
        permanent = isinstance(error, PermanentJobError)
        reason = repr(error)[:2000]
        self.keeper.drop([lease])
        outcome = self.retry(lambda: self.queue.fail(lease, reason, retry=not permanent), "fail", until_stopped=False)
        if outcome is FailOutcome.STALE:
            self.m.stale_acks.inc()
        else:
            self.m.jobs_completed.labels("failure").inc()
            if outcome is FailOutcome.RETRIED:
                self.m.jobs_retried.inc()
            elif outcome is FailOutcome.DEAD:
                self.m.jobs_dead_lettered.inc()
                self.log.warning("job %s dead-lettered after attempt %d: %s", lease.id, lease.attempt, reason)
        self.log.debug("job %s attempt %d failed (%s): %s", lease.id, lease.attempt, outcome, reason)
        self._drop([lease])

    # -- graceful shutdown -------------------------------------------------------------------

    def on_stop_requested(self) -> None:
        threading.Thread(target=self._shutdown_watchdog, name="shutdown-grace", daemon=True).start()

    def _shutdown_watchdog(self) -> None:
        grace = self.settings.shutdown_grace_seconds
        if self._finished.wait(grace):
            return
        self._abandoned.set()
        with self._held_lock:
            left = list(self._held.values())
        running = self._busy_since is not None
        self.log.warning(
            "shutdown grace of %gs is over with %d jobs held%s: handing them back",
            grace,
            len(left),
            " (one still running)" if running else "",
        )
        self._release(left)
        flush_logs()
        os._exit(0)

    def _release(self, leases: list[Lease]) -> None:
        if not leases:
            return
        try:
            outcomes = self.queue.release(leases)
        except Exception as exc:  # Redis down: the leases expire and the cleaner requeues the jobs
            self.log.warning(
                "could not hand back %d jobs (%s); the cleaner requeues them when their lease expires",
                len(leases),
                exc,
            )
            return
        released = sum(1 for o in outcomes if o is FailOutcome.RELEASED)
        self.log.info("handed %d jobs back to todos", released)


# -- cleaner ---------------------------------------------------------------------------------------

MAX_SWEEP_ROUNDS = 100  # sweeps back to back while each one hits SWEEP_BATCH


class CleanerService(Service[CleanerSettings]):
    role = "cleaner"

    def __init__(self, settings: CleanerSettings, queue: Queue | None = None) -> None:
        self.m = CleanerMetrics(new_registry())
        super().__init__(settings, queue or _queue(settings), self.m)

    @property
    def stall_seconds(self) -> float:
        return max(60.0, 3 * self.settings.sweep_interval)

    def run(self) -> int:
        s = self.settings
        self.log.info("sweeping every %gs, up to %d ids per sweep", s.sweep_interval, s.sweep_batch)
        next_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                self.beat()
                self.sweep_once()
                self.update_depth()
                next_at += s.sweep_interval
                now = time.monotonic()
                next_at = max(next_at, now)  # after a slow sweep or an outage: do not try to catch up
                self.stop_event.wait(next_at - now)
        except Stopping:
            pass
        return 0

    def sweep_once(self) -> None:
        s = self.settings
        started = time.monotonic()
        requeued = dead = trimmed = 0
        for _ in range(MAX_SWEEP_ROUNDS):
            result = self.retry(lambda: self.queue.sweep(s.sweep_batch), "sweep")
            requeued += len(result.requeued)
            dead += len(result.dead_lettered)
            trimmed += result.done_trimmed
            if result.total < s.sweep_batch:
                break
        self.m.sweep_seconds.observe(time.monotonic() - started)
        self.m.last_sweep_timestamp.set(time.time())
        self.m.requeued.inc(requeued)
        self.m.jobs_dead_lettered.inc(dead)
        self.m.done_trimmed.inc(trimmed)
        if requeued or dead:
            self.log.info(
                "sweep: requeued %d jobs whose lease expired, dead-lettered %d, dropped %d old ids from done",
                requeued,
                dead,
                trimmed,
            )
        elif trimmed:
            self.log.debug("sweep: dropped %d old ids from done", trimmed)

    def update_depth(self) -> None:
        stats = self.retry(self.queue.stats, "stats")
        for state in QUEUE_STATES:
            self.m.queue_depth.labels(state).set(stats[state])
        self.m.oldest_pending_age.set(stats["oldest_pending_age_seconds"])


# -- entry points of the three packages ------------------------------------------------------------


def main_creator() -> int:
    return main(CreatorSettings, CreatorService, "setqueue-creator")


def main_worker() -> int:
    return main(WorkerSettings, WorkerService, "setqueue-worker")


def main_cleaner() -> int:
    return main(CleanerSettings, CleanerService, "setqueue-cleaner")


logging.getLogger("setqueue").addHandler(logging.NullHandler())
