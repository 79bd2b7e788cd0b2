"""The worker: a claimer thread, the slots (``worker.engine``) and the supervisor (main thread), which
acks, fails, times out, hands back and shuts down (docs/guide.md, "How a worker runs jobs"). What
finished is always acked before anything is handed back, so a shutdown never runs a finished job again.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from typing import Any, NoReturn, TypeVar

from prometheus_client import Counter as PromCounter

from setqueue.factory import open_queue
from setqueue.interface import JobQueue
from setqueue.jobs import (
    FailOutcome,
    JobCancelled,
    JobTimeout,
    Lease,
    MoveTo,
    RetryLater,
    encode_result,
)
from setqueue.lease import LeaseKeeper
from setqueue.operations import PartlyAcked
from setqueue.records import retry_delay
from setqueue.runtime.audit import AuditRecorder
from setqueue.runtime.logs import flush_logs, plural
from setqueue.runtime.metrics import OTHER_TASK, WorkerMetrics, new_registry, watch_links
from setqueue.runtime.service import Service, Stopping
from setqueue.runtime.settings import WorkerSettings, load_handler
from setqueue.tasks import Tasks
from worker.cancels import CancelListener
from worker.engine import Engine, Running
from worker.failures import FailureLog, failure_reason, permanent
from worker.heartbeat import Heartbeat
from worker.standin import StandIn
from worker.tracing import worker_tracing

TICK_SECONDS = 0.05
# Successes are acked together unless the oldest has waited this long, or the job that ended was the
# last one the worker had (nothing to batch it with: acked at the next turn of the main loop, at once).
ACK_DELAY_SECONDS = 0.05
ZOMBIE_AFTER_SECONDS = 1.0  # still running this long after its timeout: a zombie slot
BACKSTOP_SECONDS = 10.0  # past the grace: exit even if Redis never answered the last acks
EXIT_ZOMBIES = 4
MAX_BLOCK_SECONDS = 20.0  # under redis-py's 30 s socket timeout
UNREACHED_SAID_EVERY_SECONDS = 10.0  # a shard cut off is logged at most this often (acks try it every flush)


T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class WorkerService(Service[WorkerSettings, WorkerMetrics]):
    role = "worker"

    def __init__(
        self, settings: WorkerSettings, queue: JobQueue | None = None, handler: Callable[[Lease], Any] | None = None
    ) -> None:
        s = settings
        self._from_setting = handler is None
        self.handler = handler if handler is not None else load_handler(s.job_handler)
        self._configure = self._configure_hook(s)
        # A task registry notes which task each run is of ((token, id) -> name), popped once its outcome
        # is counted: the metrics by task. None for a plain handler, whose jobs cost nothing more.
        self._task_runs: dict[tuple[str, str], str] | None = None
        task_names: list[str] | None = None
        if isinstance(self.handler, Tasks):
            self._task_runs, task_names = self.handler.note_runs(), self.handler.names
        super().__init__(settings, WorkerMetrics(new_registry(), s.queue_names, task_names), queue)
        self.tracing = worker_tracing()
        handler, self._claim, self._ack_many = self.handler, self.queue.claim, self.queue.ack_many
        if self.tracing is not None:
            handler = self.tracing.wrap(self.handler)
            self._claim = self.tracing.claiming(self.queue.claim, self.queue.name)
            self._ack_many = self.tracing.acking(self.queue.ack_many, self.queue.name)
        ended = self._job_ended if self._task_runs is None else self._task_job_ended
        self.engine = Engine(handler, s.concurrency, s.job_timeout_seconds, ended, s.claim_batch)
        self.keeper = LeaseKeeper(
            self.queue,
            on_renewed=self.metrics.lease_renewals.inc,
            on_lost=lambda lease: self.metrics.leases_lost.labels(lease.queue).inc(),
            on_cancelled=lambda lease: self._cancelled(lease.id),
        )
        channels = [shard.keys.cancel_channel for shard in self.queue.shards]
        self.cancels = CancelListener(self.queue.redis, channels, self._cancelled, self.log, self.refuse)
        self.heartbeat = None
        if (every := s.worker_heartbeat_seconds) > 0:
            names = [q.name for q in self.queue.queues]
            self.heartbeat = Heartbeat(
                self.queue.redis,
                names,
                every,
                slots=s.concurrency,
                snapshot=self._snapshot,
                handler=s.job_handler,
                tasks=task_names or (),
            )
        shards = self.queue.shards
        self.audit = AuditRecorder(shards[0].redis, shards[0].keys) if s.audit and len(shards) == 1 else None
        self._move_targets: dict[str, JobQueue] = {}
        self._ended_lock = threading.Lock()
        self._acks: list[Lease] = []  # finished jobs not acked yet
        self._returned: list[Any] = []  # their handlers' values, in the same order
        self._fails: list[tuple[Lease, BaseException]] = []
        # Run times: (queue, seconds) of a plain handler's jobs; ((queue, task), seconds) of a registry's,
        # whose sums by queue are the same runs' (each run noted once, in one of the two).
        self._durations: list[tuple[str, float]] = []
        self._task_durations: list[tuple[tuple[str, str], float]] = []
        self.failures = FailureLog(self.log)
        self.standin = StandIn(self.queue, s.standin_sweep_seconds, self.metrics, self.log)
        self._oldest_ack = 0.0
        self._ack_now = threading.Event()  # the last job the worker had ended: ack (or fail) it without waiting
        self._unreached_said = -UNREACHED_SAID_EVERY_SECONDS  # when an ack last said a shard was cut off
        self._handback_seconds = s.lease_seconds / 3
        self._shutting_down = False
        self._stopped = threading.Event()  # run() returned: the backstop stands down
        self._exit_code = 0
        # How it exits with threads still in a handler: ``python -m worker`` restarts itself on EXIT_ZOMBIES.
        self.exit_now: Callable[[int], NoReturn] = os._exit
        self.metrics.worker_slots.set(s.concurrency)
        # Limits' holds are counted under the queue's name, not the shard's.
        self._queue_of_shard = {shard.name: q.name for q in self.queue.queues for shard in q.shards}
        for shard in self.queue.shards:
            shard.on_held = self._held
        # Releases and dependency failures its acks, fails and stand-in sweeps made (queues served as one
        # count under their joined name: one set of dependency steps serves them all).
        watch_links(self.metrics.links, self.queue)

    @property
    def stall_seconds(self) -> float:
        return max(60.0, 3 * self.settings.idle_wait_seconds)

    def _snapshot(self) -> tuple[int, list[list[str]]]:
        return self.engine.counts()[1], [[lease.queue, lease.id] for lease in self.keeper.held()]

    def _held(self, shard: str, reason: str) -> None:
        self.metrics.claims_held.labels(self._queue_of_shard.get(shard, shard), reason).inc()

    def _configure_hook(self, settings: WorkerSettings) -> Callable[[WorkerSettings], Any] | None:
        name = settings.job_handler.partition(":")[0] if self._from_setting else self.handler.__module__
        hook = getattr(sys.modules.get(name or ""), "configure_worker", None)
        return hook if callable(hook) else None

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
        threading.Thread(target=self._claim_loop, name="claimer", daemon=True).start()
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
                self._ack_now.wait(TICK_SECONDS)
            self._end_shutdown()
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
            self._flush(now, force=True)  # ack what finished before releasing anything
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
        reason = f"timeout: the job ran longer than {limit} ({timeout:g}s)"
        # Its own retry_timeouts, else the worker's: off, a timeout dead-letters the job at once.
        retry = self.settings.retry_timeouts if lease.retry_timeouts is None else lease.retry_timeouts
        if not retry:
            policy = "its own retry_timeouts" if lease.retry_timeouts is not None else "RETRY_TIMEOUTS"
            reason += f"; not retried ({policy} is off)"
        self._fail(lease, reason, retry=retry)

    def _job_ended(self, record: Running, error: BaseException | None, value: Any) -> None:
        self._end(record, error, value, None)

    def _task_job_ended(self, record: Running, error: BaseException | None, value: Any) -> None:
        """``_job_ended`` of a worker serving a task registry: the run time by task too."""
        lease, runs = record.lease, self._task_runs or {}
        self._end(record, error, value, runs.get((lease.token, lease.id), OTHER_TASK))  # popped once counted

    def _end(self, record: Running, error: BaseException | None, value: Any, task: str | None) -> None:
        """Note a job's end for the next flush: its run time (by task too, for a registry), its ack or fail."""
        duration = time.monotonic() - record.started
        queue = record.lease.queue
        with self._ended_lock:
            if task is None:
                self._durations.append((queue, duration))
            else:
                self._task_durations.append(((queue, task), duration))
            if error is None:
                if not self._acks:
                    self._oldest_ack = time.monotonic()
                self._acks.append(record.lease)
                self._returned.append(value)
            else:
                self._fails.append((record.lease, error))
        if record.last:
            self._ack_now.set()

    def _flush(self, now: float, *, force: bool) -> None:
        at_once = self._ack_now.is_set()
        self._ack_now.clear()  # before the acks are taken: one set from now on is for acks left for later
        with self._ended_lock:
            waited = now - self._oldest_ack >= ACK_DELAY_SECONDS
            if not (self._fails or (self._acks and (force or at_once or waited))):
                return
            acks, self._acks = self._acks, []
            returned, self._returned = self._returned, []
            fails, self._fails = self._fails, []
            durations, self._durations = self._durations, []
            task_durations, self._task_durations = self._task_durations, []
        by_queue = _grouped(durations)
        for (queue, task), seconds in _grouped(task_durations).items():
            self.metrics.task_run_seconds.observe_many(seconds, queue, task)
            by_queue.setdefault(queue, []).extend(seconds)
        for queue, seconds in by_queue.items():
            self.metrics.processing_seconds.observe_many(seconds, queue)
        if acks:
            self._ack(acks, returned)
        for lease, error in fails:
            if isinstance(error, MoveTo):
                self._move(lease, error)
                continue
            delay = error.seconds if isinstance(error, RetryLater) else self._task_retry_delay(lease)
            retry = not permanent(lease, error)
            reason = failure_reason(error)
            outcome = self._fail(lease, reason, retry=retry, delay=delay, quiet=True)
            if outcome is FailOutcome.STALE:
                continue
            # One record a failure: its traceback, or (a repeat, or no traceback to tell) the dead letter.
            told = not isinstance(error, RetryLater | JobTimeout) and self.failures.failed(lease, error, str(outcome))
            if outcome is FailOutcome.DEAD and not told:
                self._say_dead(lease, reason)

    def _ack(self, leases: list[Lease], returned: list[Any] | None = None) -> None:
        results_of: list[Any] | None = None
        if returned is not None and self.settings.result_ttl_seconds > 0 and any(v is not None for v in returned):
            leases, results_of = self._keepable(leases, returned)
        self.keeper.drop(leases)  # first: a renewal racing the ack must not report the lease lost
        # Done work: retry through an outage (the shutdown backstop still applies).
        reached = self.resendable(lambda rid: self._ack_reachable(leases, results_of, rid), "ack", until_stopped=False)
        leases, results = self._keep_unreached(leases, results_of, reached)
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
        if self._task_runs is not None:
            self._count_task_successes(leases, [result.acked for result in results])

    def _ack_reachable(self, leases: list[Lease], results: list[Any] | None, request_id: str) -> list[Any]:
        """``ack_many``; when one shard is cut off but others answered, their results (None for the
        cut shard's leases) rather than a wait for the cut shard that would hold the others' acks up."""
        try:
            return self._ack_many(leases, results=results, request_id=request_id)
        except PartlyAcked as exc:
            if self._shutting_down:  # no later flush: wait for the cut shard (the backstop still applies)
                raise
            if (now := time.monotonic()) - self._unreached_said >= UNREACHED_SAID_EVERY_SECONDS:
                self._unreached_said = now
                self.log.warning("ack: %s; the other shards' jobs are acked, its own again at the next flush", exc)
            return exc.results

    def _keep_unreached(
        self, leases: list[Lease], returned: list[Any] | None, reached: list[Any]
    ) -> tuple[list[Lease], list[Any]]:
        """The leases acked and their results; those whose shard was not reached go back to be acked
        at the next flush (held again meanwhile: renewed, if their shard comes back in time)."""
        if all(result is not None for result in reached):
            return leases, reached
        values = returned if returned is not None else [None] * len(leases)
        again = [(lease, value) for lease, value, result in zip(leases, values, reached, strict=True) if result is None]
        self.keeper.hold(lease for lease, _ in again)
        with self._ended_lock:
            if not self._acks:
                self._oldest_ack = time.monotonic()
            self._acks += [lease for lease, _ in again]
            self._returned += [value for _, value in again]
        kept = [(lease, result) for lease, result in zip(leases, reached, strict=True) if result is not None]
        return [lease for lease, _ in kept], [result for _, result in kept]

    def _count_task_successes(self, leases: list[Lease], acked: list[bool]) -> None:
        runs, succeeded = self._task_runs or {}, Counter[tuple[str, str]]()
        for lease, ok in zip(leases, acked, strict=True):
            task = runs.pop((lease.token, lease.id), OTHER_TASK)
            if ok:
                succeeded[lease.queue, task] += 1
        for (queue, task), n in succeeded.items():
            self.metrics.task_jobs.labels(queue, task, "success").inc(n)

    def _keepable(self, leases: list[Lease], returned: list[Any]) -> tuple[list[Lease], list[Any]]:
        """The leases to ack, with their values. One that cannot be kept (not bytes nor JSON, or over
        RESULT_MAX_BYTES) fails its job for good, before anything of it is written."""
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

    def _cancelled(self, job_id: str) -> None:
        """Already so in Redis: stop it here, running or buffered; its run is not reported."""
        running, waiting = self.engine.cancel(job_id)
        if not running and not waiting:
            return
        self.keeper.drop(running + waiting)
        self._forget_task_runs(running)
        for lease in running:
            self.metrics.jobs_cancelled.labels(lease.queue, "running").inc()
        for lease in waiting:
            self.metrics.jobs_cancelled.labels(lease.queue, "unstarted").inc()
        self.log.info("job %s cancelled: %s", job_id, "stopping it" if running else "dropped before it started")

    def _forget_task_runs(self, leases: list[Lease]) -> None:
        """Runs whose outcome is never counted (cancelled, handed back)."""
        if self._task_runs is not None:
            for lease in leases:
                self._task_runs.pop((lease.token, lease.id), None)

    def _move(self, lease: Lease, move: MoveTo) -> None:
        """Into the other queue first, then acked here (at least once)."""
        target = self._move_targets.get(move.queue)
        if target is None:
            s = self.settings
            target = open_queue(
                s.redis_url, move.queue, shards=s.queue_shards, client=self.queue.redis, **self.queue_options
            )
            self._move_targets[move.queue] = target
        job = {lease.id: lease.payload} if lease.payload is not None else [lease.id]
        self.retry(lambda: target.enqueue(job, priority=move.priority), "move", until_stopped=False)
        self.log.info("job %s moved from queue %s to %s", lease.id, lease.queue, move.queue)
        self._ack([lease])

    def _task_retry_delay(self, lease: Lease) -> float | None:
        """The retry delay of a task that has retry delays of its own (``@tasks.task(retry_backoff_seconds=...)``),
        the worker's settings filling in what it leaves out; None: the queue's backoff, as for any job."""
        runs = self._task_runs
        if runs is None or not isinstance(self.handler, Tasks):
            return None
        backoff = self.handler.backoff_of(runs.get((lease.token, lease.id), OTHER_TASK))
        if backoff is None:
            return None
        base, most = backoff
        s = self.settings
        return retry_delay(
            lease.attempt,
            s.retry_backoff_seconds if base is None else base,
            s.retry_backoff_max_seconds if most is None else most,
        )

    def _fail(
        self, lease: Lease, reason: str, *, retry: bool = True, delay: float | None = None, quiet: bool = False
    ) -> FailOutcome:
        """Fail the attempt; a dead letter is logged unless ``quiet`` (the caller logs the failure)."""
        self.keeper.drop([lease])
        outcome = self.resendable(
            lambda rid: self.queue.fail(lease, reason, retry=retry, delay=delay, request_id=rid),
            "fail",
            until_stopped=False,
        )
        m, queue = self.metrics, lease.queue
        runs = self._task_runs
        task = None if runs is None else runs.pop((lease.token, lease.id), OTHER_TASK)
        if outcome is FailOutcome.STALE:
            m.stale_acks.labels(queue).inc()
        else:
            m.jobs_completed.labels(queue, "failure").inc()
            if task is not None:
                m.task_jobs.labels(queue, task, "failure").inc()
            m.history_records.labels(queue, "timed out" if reason.startswith("timeout") else "failed").inc()
            if outcome is FailOutcome.RETRIED:
                m.jobs_retried.labels(queue).inc()
                if (delay if delay is not None else self.queue.retry_backoff_seconds) > 0:
                    m.jobs_scheduled.labels(queue).inc()
            elif outcome is FailOutcome.DEAD:
                m.jobs_dead_lettered.labels(queue).inc()
                if not quiet:
                    self._say_dead(lease, reason)
        return outcome

    def _say_dead(self, lease: Lease, reason: str) -> None:
        first_line = reason.partition("\n")[0]
        self.log.warning("job %s dead-lettered after attempt %d: %s", lease.id, lease.attempt, first_line)

    def _claim_loop(self) -> None:
        s = self.settings
        block = min(s.idle_wait_seconds, MAX_BLOCK_SECONDS)
        try:
            while not self.stop_event.is_set():
                # No prefetch under limits limits: a job claimed ahead counts against them before it starts.
                limited = any(shard.limited for shard in self.queue.shards)
                count = self.engine.wanted(self.stop_event, prefetch=not limited)
                if count == 0:
                    continue
                leases = self.resendable(lambda rid, n=count: self._claim(n, request_id=rid), "claim")  # type: ignore[misc]
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
        except Exception:  # else the supervisor would wait for jobs that never come
            self.log.exception("the claimer failed; stopping")
            self._exit_code = 1
            self.request_stop()

    def on_stop_requested(self) -> None:
        threading.Thread(target=self._backstop, name="shutdown-backstop", daemon=True).start()

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        unstarted = self.engine.close()
        self._flush(time.monotonic(), force=True)
        if unstarted:
            self.log.info("stopping: handing back %s not started yet", plural(len(unstarted), "job"))
            self._release(unstarted)

    def _end_shutdown(self) -> None:
        # In this order: give up on the running jobs (no ack from now on), ack every finished one,
        # and only then hand the given-up ones back.
        running = self.engine.abandon_running()
        self._flush(time.monotonic(), force=True)
        if running:
            self.log.warning(
                "shutdown grace of %gs is over with %s still running: handing them back",
                self.settings.shutdown_grace_seconds,
                plural(len(running), "job"),
            )
            if self.audit is not None:
                # Before the hand-back, so that both this run and the next are explained (a spare record is harmless).
                with contextlib.suppress(Exception):  # best effort: Redis may be down
                    self.audit.lease_lost([lease.id for lease in running])
            self._release(running)
        if running or self.engine.counts()[2]:
            # Threads still in a handler (daemons): exit without them.
            self.keeper.stop()
            if self.heartbeat is not None:
                self.heartbeat.stop()
            flush_logs()
            self.exit_now(self._exit_code)

    def _backstop(self) -> None:
        """Exit after the grace even if the supervisor is stuck (Redis gone while it acks)."""
        if self._stopped.wait(self.settings.shutdown_grace_seconds + BACKSTOP_SECONDS):
            return
        self.log.warning("shutdown took longer than the grace plus %gs: exiting", BACKSTOP_SECONDS)
        flush_logs()
        self.exit_now(self._exit_code or 1)

    def _observe_queue_wait(self, leases: list[Lease]) -> None:
        waits = _grouped(
            ((lease.queue, lease.priority), wait) for lease in leases if (wait := lease.queue_wait_seconds) is not None
        )
        for (queue, priority), values in waits.items():
            self.metrics.queue_wait_seconds.observe_many(values, queue, str(priority))

    def _release(self, leases: list[Lease]) -> None:
        if not leases:
            return
        self.keeper.drop(leases)
        self._forget_task_runs(leases)
        try:
            outcomes = self.queue.release(leases)
        except Exception as exc:  # Redis down: the leases expire and the cleaner requeues
            self.log.warning(
                "could not hand back %s (%s); the cleaner requeues them when their lease expires",
                plural(len(leases), "job"),
                exc,
            )
            return
        released = [lease for lease, o in zip(leases, outcomes, strict=True) if o is FailOutcome.RELEASED]
        _count(self.metrics.jobs_released, released)
        _count(self.metrics.history_records, released, "handed back")
        self.log.info("handed %s back to todos", plural(len(released), "job"))


def _count(counter: PromCounter, leases: list[Lease], *labels: str) -> None:
    for queue, n in Counter(lease.queue for lease in leases).items():
        counter.labels(queue, *labels).inc(n)


def _grouped(pairs: Iterable[tuple[K, float]]) -> dict[K, list[float]]:
    grouped: dict[K, list[float]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return grouped
