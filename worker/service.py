"""The worker: claim jobs for free slots, run them CONCURRENCY at a time, ack or fail them.

Three kinds of thread (``worker.engine`` has the slots):

- the **claimer** claims when slots are free (at most CLAIM_BATCH per call, and while jobs keep
  starting up to CLAIM_BATCH more as a prefetch buffer), and blocks on the wake-up list when the
  queue is empty;
- the **slots** (CONCURRENCY threads, or one event loop for an ``async def`` handler) run jobs;
- the **supervisor**, the main thread, every TICK_SECONDS: acks finished jobs in batches, fails
  failed ones, times out jobs past JOB_TIMEOUT_SECONDS, hands back buffered jobs that waited
  HANDBACK (a third of the lease) without a slot, counts zombie slots, and runs the shutdown.

Shutdown (first SIGTERM/SIGINT): stop claiming; ack what finished, then hand back the unstarted
jobs at once; let running jobs finish within SHUTDOWN_GRACE_SECONDS, acking as they do; when the
grace ends, ack what finished and only then hand back the jobs still running (no attempt used),
and exit 0. A second signal exits at once. A finished job is never run again because of a
shutdown. When more than half of the slots are zombies the worker shuts down the same way and
exits with EXIT_ZOMBIES so that its supervisor (compose ``restart``) starts a fresh process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from prometheus_client import Counter as PromCounter

from setqueue.factory import open_queue
from setqueue.interface import JobQueue
from setqueue.jobs import (
    FailOutcome,
    JobCancelled,
    JobTimeout,
    Lease,
    MoveTo,
    PermanentJobError,
    RetryLater,
    encode_result,
)
from setqueue.lease import LeaseKeeper
from setqueue.runtime.audit import AuditRecorder
from setqueue.runtime.logs import flush_logs, plural
from setqueue.runtime.metrics import WorkerMetrics, new_registry
from setqueue.runtime.service import Service, Stopping
from setqueue.runtime.settings import WorkerSettings, load_handler
from setqueue.scripts import new_request_id
from worker.cancels import CancelListener
from worker.engine import Engine, Running
from worker.failures import FailureLog, failure_reason
from worker.heartbeat import Heartbeat
from worker.standin import StandIn
from worker.tracing import worker_tracing

TICK_SECONDS = 0.05  # the supervisor's period: ack batching window, timeout and hand-back precision
ACK_DELAY_SECONDS = 0.05  # successes are acked together unless the oldest has waited this long
ZOMBIE_AFTER_SECONDS = 1.0  # a job still running this long after its timeout makes its slot a zombie
BACKSTOP_SECONDS = 10.0  # past the grace: exit even if Redis never answered the last acks
EXIT_ZOMBIES = 4

# BLPOP must return before redis-py's socket timeout (30 s) would fire on the idle connection.
MAX_BLOCK_SECONDS = 20.0


T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class WorkerService(Service[WorkerSettings, WorkerMetrics]):
    role = "worker"

    def __init__(
        self,
        settings: WorkerSettings,
        queue: JobQueue | None = None,
        handler: Callable[[Lease], Any] | None = None,
    ) -> None:
        self._from_setting = handler is None
        self.handler = handler if handler is not None else load_handler(settings.job_handler)
        self._configure = self._configure_hook(settings)
        super().__init__(settings, WorkerMetrics(new_registry(), settings.queue_names), queue)
        # Traces (setqueue.otel) when OpenTelemetry is installed: spans around claims, jobs and acks.
        self.tracing = worker_tracing()
        handler, self._claim, self._ack_many = self.handler, self.queue.claim, self.queue.ack_many
        if self.tracing is not None:
            handler = self.tracing.wrap(self.handler)
            self._claim = self.tracing.claiming(self.queue.claim, self.queue.name)
            self._ack_many = self.tracing.acking(self.queue.ack_many, self.queue.name)
        self.engine = Engine(
            handler, settings.concurrency, settings.job_timeout_seconds, self._job_ended, settings.claim_batch
        )
        self.keeper = LeaseKeeper(
            self.queue, on_renewed=self._renewed, on_lost=self._lost, on_cancelled=self._lease_cancelled
        )
        channels = [shard.keys.cancel_channel for shard in self.queue.shards]
        self.cancels = CancelListener(self.queue.redis, channels, self._cancelled, self.log, self.refuse)
        self.heartbeat = None  # the registry of live workers, which the console shows
        if settings.worker_heartbeat_seconds > 0:
            names = [q.name for q in self.queue.queues]
            self.heartbeat = Heartbeat(
                self.queue.redis,
                names,
                settings.worker_heartbeat_seconds,
                slots=settings.concurrency,
                snapshot=self._snapshot,
                handler=settings.job_handler,
            )
        # The audit covers one unsharded queue (the cleaner refuses AUDIT with more).
        shards = self.queue.shards
        self.audit = AuditRecorder(shards[0].redis, shards[0].keys) if settings.audit and len(shards) == 1 else None
        self._move_targets: dict[str, JobQueue] = {}  # the queues handlers moved jobs to
        self._ended_lock = threading.Lock()
        self._acks: list[Lease] = []  # finished jobs not acked yet
        self._returned: list[Any] = []  # what their handlers returned, in the same order
        self._fails: list[tuple[Lease, BaseException]] = []
        self._durations: list[tuple[str, float]] = []  # (queue, seconds) of jobs that ended
        self.failures = FailureLog(self.log)
        self.standin = StandIn(self.queue, settings.standin_sweep_seconds, self.metrics, self.log)
        self._oldest_ack = 0.0
        self._handback_seconds = settings.lease_seconds / 3
        self._shutting_down = False
        self._stopped = threading.Event()  # run() has returned: the backstop stands down
        self._exit_code = 0
        self.metrics.worker_slots.set(settings.concurrency)
        # What flow control held back, counted under the queue's name (a shard reports its own).
        self._queue_of_shard = {shard.name: q.name for q in self.queue.queues for shard in q.shards}
        for shard in self.queue.shards:
            shard.on_held = self._held

    @property
    def stall_seconds(self) -> float:
        return max(60.0, 3 * self.settings.idle_wait_seconds)

    def _snapshot(self) -> tuple[int, list[list[str]]]:
        """(slots busy, [queue, id] of the jobs held) for the heartbeat."""
        return self.engine.counts()[1], [[lease.queue, lease.id] for lease in self.keeper.held()]

    def _renewed(self, count: int) -> None:
        self.metrics.lease_renewals.inc(count)

    def _held(self, shard: str, reason: str) -> None:
        self.metrics.claims_held.labels(self._queue_of_shard.get(shard, shard), reason).inc()

    def _lost(self, lease: Lease) -> None:
        self.metrics.leases_lost.labels(lease.queue).inc()

    def _configure_hook(self, settings: WorkerSettings) -> Callable[[WorkerSettings], Any] | None:
        """``configure_worker`` of the module JOB_HANDLER names (the function may have been imported
        into it from elsewhere), if it has one. It may be ``async def``."""
        name = settings.job_handler.partition(":")[0] if self._from_setting else self.handler.__module__
        hook = getattr(sys.modules.get(name or ""), "configure_worker", None)
        return hook if callable(hook) else None

    # -- the supervisor (main thread) ---------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        configure = self._configure
        self.engine.start(None if configure is None else lambda: configure(s))
        self.log.info(
            "working with handler %s (%s), concurrency %d, claim batch %d, lease %gs, job timeout %s",
            s.job_handler,
            "async, one event loop" if self.engine.asynchronous else "threads",
            s.concurrency,
            s.claim_batch,
            s.lease_seconds,
            f"{s.job_timeout_seconds:g}s" if s.job_timeout_seconds else "none",
        )
        self.keeper.start()
        self.cancels.start()
        if self.heartbeat is not None:
            self.heartbeat.start()
        claimer = threading.Thread(target=self._claim_loop, name="claimer", daemon=True)
        claimer.start()
        grace_ends = float("inf")
        try:
            while True:
                now = time.monotonic()
                self.beat()
                if self.stop_event.is_set() and not self._shutting_down:
                    grace_ends = now + s.shutdown_grace_seconds
                    self._begin_shutdown()
                self._supervise(now)
                if self._shutting_down and (not self.engine.running_leases() or now >= grace_ends):
                    break
                time.sleep(TICK_SECONDS)
            self._end_shutdown(grace_over=time.monotonic() >= grace_ends)
        finally:
            self._stopped.set()
            self.cancels.stop()
            self.keeper.stop()
            if self.heartbeat is not None:
                self.heartbeat.stop()
            self.engine.stop_loop()
        return self._exit_code

    def _supervise(self, now: float) -> None:
        for record in self.engine.overdue(now):
            self._time_out(record)
        zombies = self.engine.new_zombies(now, ZOMBIE_AFTER_SECONDS)
        self.metrics.zombie_threads.set(zombies)
        if zombies * 2 > self.settings.concurrency and not self._shutting_down:
            self.log.error(
                "%d of %d slots are zombies (jobs that ignored their timeout): stopping, to be restarted",
                zombies,
                self.settings.concurrency,
            )
            self._exit_code = EXIT_ZOMBIES
            self.request_stop()
            return
        stale = self.engine.take_stale(now - self._handback_seconds)
        if stale:
            self._flush(now, force=True)  # nothing is released before what finished is acked
            self.log.info(
                "handing back %s that waited %.1fs without a free slot",
                plural(len(stale), "job"),
                self._handback_seconds,
            )
            self._release(stale)
        self._flush(now, force=self._shutting_down)
        self.failures.flush()
        if not self._shutting_down:
            self.standin.tick(now)
        _, running, _ = self.engine.counts()
        self.metrics.jobs_running.set(running)
        self.metrics.jobs_in_progress.set(len(self.keeper))

    def _time_out(self, record: Running) -> None:
        lease, timeout = record.lease, record.deadline - record.started
        if record.cancelled:  # cancelled and still running at its deadline: stop it again, report nothing
            self.engine.interrupt(record, JobCancelled)
            return
        self.engine.interrupt(record)
        self.metrics.job_timeouts.labels(lease.queue).inc()
        self.log.warning("job %s (attempt %d) timed out after %gs", lease.id, lease.attempt, timeout)
        limit = "its own timeout" if lease.timeout is not None else "JOB_TIMEOUT_SECONDS"
        self._fail(lease, f"timeout: the job ran longer than {limit} ({timeout:g}s)")

    # -- jobs that ended (called from the slots) ---------------------------------------------------

    def _job_ended(self, record: Running, error: BaseException | None, value: Any) -> None:
        duration = time.monotonic() - record.started
        with self._ended_lock:
            self._durations.append((record.lease.queue, duration))
            if error is None:
                if not self._acks:
                    self._oldest_ack = time.monotonic()
                self._acks.append(record.lease)
                self._returned.append(value)
            else:
                self._fails.append((record.lease, error))

    def _flush(self, now: float, *, force: bool) -> None:
        with self._ended_lock:
            if not (self._fails or (self._acks and (force or now - self._oldest_ack >= ACK_DELAY_SECONDS))):
                return
            acks, self._acks = self._acks, []
            returned, self._returned = self._returned, []
            fails, self._fails = self._fails, []
            durations, self._durations = self._durations, []
        for queue, seconds in _grouped(durations).items():
            self.metrics.processing_seconds.observe_many(seconds, queue)
        if acks:
            self._ack(acks, returned)
        for lease, error in fails:
            if isinstance(error, MoveTo):
                self._move(lease, error)
                continue
            delay = error.seconds if isinstance(error, RetryLater) else None
            retry = not isinstance(error, PermanentJobError)
            outcome = self._fail(lease, failure_reason(error), retry=retry, delay=delay)
            if outcome is not FailOutcome.STALE and not isinstance(error, RetryLater | JobTimeout):
                self.failures.failed(lease, error, str(outcome))

    def _ack(self, leases: list[Lease], returned: list[Any] | None = None) -> None:
        results_of: list[Any] | None = None
        if returned is not None and self.settings.result_ttl_seconds > 0 and any(v is not None for v in returned):
            leases, results_of = self._keepable(leases, returned)
        self.keeper.drop(leases)  # first: a renewal racing the ack must not report the lease lost
        # The work is done: keep trying through an outage (the shutdown backstop still applies).
        results = self._resendable(
            lambda rid: self._ack_many(leases, results=results_of, request_id=rid), "ack", until_stopped=False
        )
        # One pass, per queue: acked, stale, and the end-to-end times (usually a single queue).
        per_queue: dict[str, tuple[list[int], list[float]]] = {}  # queue -> ([acked, stale], seconds)
        for lease, result in zip(leases, results, strict=True):
            counts, seconds = per_queue.get(lease.queue) or per_queue.setdefault(lease.queue, ([0, 0], []))
            if result.acked:
                counts[0] += 1
                if result.end_to_end_seconds is not None:
                    seconds.append(result.end_to_end_seconds)
            else:
                counts[1] += 1
        m = self.metrics
        for queue, ((acked, stale), seconds) in per_queue.items():
            m.jobs_completed.labels(queue, "success").inc(acked)
            if stale:
                m.stale_acks.labels(queue).inc(stale)
            m.end_to_end_seconds.observe_many(seconds, queue)

    def _keepable(self, leases: list[Lease], returned: list[Any]) -> tuple[list[Lease], list[Any]]:
        """The leases to ack and what their handlers returned, to keep. A value that cannot be
        kept (neither bytes nor JSON-serialisable, or over RESULT_MAX_BYTES) fails its job, not
        retried: the reason says why, and nothing of it is half-written."""
        acked: list[Lease] = []
        values: list[Any] = []
        for lease, value in zip(leases, returned, strict=True):
            try:
                encode_result(value, self.settings.result_max_bytes)
            except (TypeError, ValueError) as exc:
                self.keeper.drop([lease])
                self._fail(lease, f"result: {exc}", retry=False)
                continue
            acked.append(lease)
            values.append(value)
        return acked, values

    # -- cancelled jobs (from the cancel listener and the lease keeper's threads) --------------------

    def _lease_cancelled(self, lease: Lease) -> None:
        self._cancelled(lease.id)

    def _cancelled(self, job_id: str) -> None:
        """Stop job ``job_id`` if this worker runs it or holds it unstarted: it was cancelled (in
        Redis it already is; whatever the run does now is not reported)."""
        running, waiting = self.engine.cancel(job_id)
        if not running and not waiting:
            return
        self.keeper.drop(running + waiting)
        for lease in running:
            self.metrics.jobs_cancelled.labels(lease.queue, "running").inc()
        for lease in waiting:
            self.metrics.jobs_cancelled.labels(lease.queue, "unstarted").inc()
        self.log.info("job %s cancelled: %s", job_id, "stopping it" if running else "dropped before it started")

    def _move(self, lease: Lease, move: MoveTo) -> None:
        """The handler moved the job: into the other queue first, then acked here (at least once)."""
        target = self._move_targets.get(move.queue)
        if target is None:  # opened once, on this worker's client
            s = self.settings
            target = open_queue(
                s.redis_url, move.queue, shards=s.queue_shards, client=self.queue.redis, **self.queue_options
            )
            self._move_targets[move.queue] = target
        job = {lease.id: lease.payload} if lease.payload is not None else [lease.id]
        self.retry(lambda: target.enqueue(job, priority=move.priority), "move", until_stopped=False)
        self.log.info("job %s moved from queue %s to %s", lease.id, lease.queue, move.queue)
        self._ack([lease])

    def _fail(self, lease: Lease, reason: str, *, retry: bool = True, delay: float | None = None) -> FailOutcome:
        self.keeper.drop([lease])
        outcome = self._resendable(
            lambda rid: self.queue.fail(lease, reason, retry=retry, delay=delay, request_id=rid),
            "fail",
            until_stopped=False,
        )
        m, queue = self.metrics, lease.queue
        if outcome is FailOutcome.STALE:
            m.stale_acks.labels(queue).inc()
        else:
            m.jobs_completed.labels(queue, "failure").inc()
            m.history_records.labels(queue, "timed out" if reason.startswith("timeout") else "failed").inc()
            if outcome is FailOutcome.RETRIED:
                m.jobs_retried.labels(queue).inc()
                if (delay if delay is not None else self.queue.retry_backoff_seconds) > 0:
                    m.jobs_scheduled.labels(queue).inc()
            elif outcome is FailOutcome.DEAD:
                m.jobs_dead_lettered.labels(queue).inc()
                first_line = reason.partition("\n")[0]
                self.log.warning("job %s dead-lettered after attempt %d: %s", lease.id, lease.attempt, first_line)
        return outcome

    # -- the claimer thread -----------------------------------------------------------------------

    def _claim_loop(self) -> None:
        s = self.settings
        block = min(s.idle_wait_seconds, MAX_BLOCK_SECONDS)
        try:
            while not self.stop_event.is_set():
                # No prefetch under a rate or group limits: a job claimed ahead would count against
                # them (a start, a group's slot) before it starts.
                limited = any(shard.flow_limited for shard in self.queue.shards)
                count = self.engine.wanted(self.stop_event, prefetch=not limited)
                if count == 0:
                    continue
                leases = self._resendable(lambda rid, n=count: self._claim(n, request_id=rid), "claim")  # type: ignore[misc]
                if not leases:
                    self.retry(lambda: self.queue.wait_for_work(block), "wait")
                    continue
                self.keeper.hold(leases)
                _count(self.metrics.jobs_claimed, leases)
                self._observe_queue_wait(leases)
                try:
                    self.engine.put(leases)
                except RuntimeError:  # the engine closed while we claimed: straight back
                    self._release(leases)
        except Stopping:
            pass
        except Exception:  # never die silently: the supervisor would wait for jobs that never come
            self.log.exception("the claimer failed; stopping")
            self._exit_code = 1
            self.request_stop()

    # -- shutdown ---------------------------------------------------------------------------------

    def on_stop_requested(self) -> None:
        threading.Thread(target=self._backstop, name="shutdown-backstop", daemon=True).start()

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        unstarted = self.engine.close()
        self._flush(time.monotonic(), force=True)
        if unstarted:
            self.log.info("stopping: handing back %s not started yet", plural(len(unstarted), "job"))
            self._release(unstarted)

    def _end_shutdown(self, *, grace_over: bool) -> None:
        # In this order: what is still running is given up on (a job ending from now on is not
        # acked), every job that finished is acked, and only then do the given-up ones go back.
        running = self.engine.abandon_running()
        self._flush(time.monotonic(), force=True)
        if running:
            self.log.warning(
                "shutdown grace of %gs is over with %s still running: handing them back",
                self.settings.shutdown_grace_seconds,
                plural(len(running), "job"),
            )
            if self.audit is not None:
                # Before the hand-back: a run that may still end here, and the run elsewhere, are
                # then both explained (a record for a run that never happens is harmless).
                with contextlib.suppress(Exception):  # best effort, like _release: Redis may be down
                    self.audit.lease_lost([lease.id for lease in running])
            self._release(running)
        if running or self.engine.counts()[2]:
            # Threads still in a handler: do not wait for them (they are daemons; exit now).
            self.keeper.stop()
            if self.heartbeat is not None:
                self.heartbeat.stop()
            flush_logs()
            os._exit(self._exit_code)

    def _backstop(self) -> None:
        """If the supervisor is stuck (Redis gone while it acks), exit anyway after the grace."""
        if self._stopped.wait(self.settings.shutdown_grace_seconds + BACKSTOP_SECONDS):
            return
        self.log.warning("shutdown took longer than the grace plus %gs: exiting", BACKSTOP_SECONDS)
        flush_logs()
        os._exit(self._exit_code or 1)

    def _resendable(self, call: Callable[[str], T], what: str, *, until_stopped: bool = True) -> T:
        """``self.retry`` of ``call(request_id)`` with one request id across the retries: a call
        that applied but whose reply an outage lost reports what it did when retried (an ack:
        acked, not stale; a claim: its leases, not a second claim while they wait for their lease to
        run out). Only while Redis still keeps that call's result: after half of that, a fresh id."""
        request_id, since = new_request_id(), time.monotonic()

        def attempt() -> T:
            nonlocal request_id, since
            if time.monotonic() - since > self.queue.request_ttl_seconds / 2:
                request_id, since = new_request_id(), time.monotonic()
            return call(request_id)

        return self.retry(attempt, what, until_stopped=until_stopped)

    def _observe_queue_wait(self, leases: list[Lease]) -> None:
        """Queue wait per queue and priority: one histogram batch for each (usually one a claim)."""
        waits = _grouped(
            ((lease.queue, lease.priority), wait) for lease in leases if (wait := lease.queue_wait_seconds) is not None
        )
        for (queue, priority), values in waits.items():
            self.metrics.queue_wait_seconds.observe_many(values, queue, str(priority))

    def _release(self, leases: list[Lease]) -> None:
        if not leases:
            return
        self.keeper.drop(leases)
        try:
            outcomes = self.queue.release(leases)
        except Exception as exc:  # Redis down: the leases expire and the cleaner requeues the jobs
            self.log.warning(
                "could not hand back %s (%s); the cleaner requeues them when their lease expires",
                plural(len(leases), "job"),
                exc,
            )
            return
        released = [lease for lease, o in zip(leases, outcomes, strict=True) if o is FailOutcome.RELEASED]
        _count(self.metrics.jobs_released, released)
        for queue, n in Counter(lease.queue for lease in released).items():
            self.metrics.history_records.labels(queue, "handed back").inc(n)
        self.log.info("handed %s back to todos", plural(len(released), "job"))


def _count(counter: PromCounter, leases: list[Lease]) -> None:
    """``counter`` (labelled by queue) up by the leases of each queue."""
    for queue, n in Counter(lease.queue for lease in leases).items():
        counter.labels(queue).inc(n)


def _grouped(pairs: Iterable[tuple[K, float]]) -> dict[K, list[float]]:
    """The values of ``(key, value)`` pairs, by key (for one histogram batch per label set)."""
    grouped: dict[K, list[float]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return grouped
