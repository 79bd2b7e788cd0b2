"""The worker's main loop: claim CLAIM_BATCH jobs, run the handler on each, ack or fail them.

The handler convention is in ``setqueue.demo``. Successes are acked together (at the end of a
claim, or once the oldest has waited ACK_DELAY_SECONDS); an idle worker blocks on the wake-up
list. On SIGTERM the worker stops claiming, finishes the jobs it holds within
SHUTDOWN_GRACE_SECONDS, then hands what is left back to todos and exits 0.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from setqueue.config import SettingError, WorkerSettings, load_handler
from setqueue.lease import LeaseKeeper
from setqueue.logs import flush_logs
from setqueue.metrics import WorkerMetrics, new_registry
from setqueue.queue import FailOutcome, Lease, PermanentJobError, Queue
from setqueue.service import Service, Stopping

ACK_DELAY_SECONDS = 0.05  # successes are acked together unless the oldest has waited this long

# BLPOP must return before redis-py's socket timeout (30 s) would fire on the idle connection.
MAX_BLOCK_SECONDS = 20.0


def refuse_async(function: Callable[..., Any], what: str) -> None:
    """A coroutine function would "succeed" at once without running: refuse it at start."""
    call = getattr(function, "__call__", None)  # noqa: B004 - a callable object's async __call__ counts
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call):
        raise SettingError(
            "JOB_HANDLER",
            f"{what} {getattr(function, '__qualname__', function)!r} is async (async def); this worker runs "
            "plain functions only: wrap the coroutine in asyncio.run() or make it a plain def",
        )


def _unawaited(result: Awaitable[Any]) -> PermanentJobError:
    """A handler returned an awaitable: it never ran, so the job must not be acked. Dead-letter it
    (no retry can fix the handler) with a reason that says why."""
    if inspect.iscoroutine(result):
        result.close()  # no "coroutine was never awaited" warning: we say it ourselves
    return PermanentJobError(
        f"the handler returned {type(result).__name__} instead of running the job; async handlers are not supported"
    )


class WorkerService(Service[WorkerSettings, WorkerMetrics]):
    role = "worker"

    def __init__(
        self,
        settings: WorkerSettings,
        queue: Queue | None = None,
        handler: Callable[[Lease], Any] | None = None,
    ) -> None:
        self._from_setting = handler is None
        self.handler = handler if handler is not None else load_handler(settings.job_handler)
        refuse_async(self.handler, "the job handler")
        self._configure = self._configure_hook(settings)
        super().__init__(settings, WorkerMetrics(new_registry()), queue)
        self._held: dict[tuple[str, str], Lease] = {}
        self._held_lock = threading.Lock()
        self._finished = threading.Event()
        self._abandoned = threading.Event()
        self.keeper = LeaseKeeper(self.queue, on_renewed=self._renewed, on_lost=self._lost)
        self._succeeded = self.metrics.jobs_completed.labels("success")

    @property
    def stall_seconds(self) -> float:
        return max(60.0, 3 * self.settings.idle_wait_seconds)

    def _renewed(self, count: int) -> None:
        self.metrics.lease_renewals.inc(count)

    def _lost(self, lease: Lease) -> None:
        self.metrics.leases_lost.inc()

    def _configure_hook(self, settings: WorkerSettings) -> Callable[[WorkerSettings], Any] | None:
        """``configure_worker`` of the module JOB_HANDLER names (the function may have been imported
        into it from elsewhere), if it has one."""
        name = settings.job_handler.partition(":")[0] if self._from_setting else self.handler.__module__
        hook = getattr(sys.modules.get(name or ""), "configure_worker", None)
        if not callable(hook):
            return None
        refuse_async(hook, f"{name}.configure_worker")
        return hook  # type: ignore[no-any-return]

    # -- held leases -------------------------------------------------------------------------

    def _hold(self, leases: list[Lease]) -> None:
        with self._held_lock:
            for lease in leases:
                self._held[(lease.id, lease.token)] = lease
            self.metrics.jobs_in_progress.set(len(self._held))
        self.keeper.hold(leases)

    def _drop(self, leases: list[Lease]) -> None:
        self.keeper.drop(leases)
        with self._held_lock:
            for lease in leases:
                self._held.pop((lease.id, lease.token), None)
            self.metrics.jobs_in_progress.set(len(self._held))

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        s = self.settings
        if self._configure is not None:
            self._configure(self.settings)
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
                self.metrics.jobs_claimed.inc(len(leases))
                self.metrics.queue_wait_seconds.observe_many(
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
                    result = self.handler(lease)
                    if result is not None and inspect.isawaitable(result):
                        error = _unawaited(result)
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
                    self.metrics.processing_seconds.observe_many(durations)
                    durations = []
                    self._ack(to_ack)
                    to_ack = []
        finally:
            self.metrics.processing_seconds.observe_many(durations)

    def _ack(self, leases: list[Lease]) -> None:
        self.keeper.drop(leases)  # first: a renewal racing the ack must not report the lease lost
        # The work is done: keep trying through an outage (the grace deadline still applies).
        results = self.retry(lambda: self.queue.ack_many(leases), "ack", until_stopped=False)
        acked = sum(1 for result in results if result.acked)
        self._succeeded.inc(acked)
        if acked < len(results):
            self.metrics.stale_acks.inc(len(results) - acked)
        self.metrics.end_to_end_seconds.observe_many(
            seconds for result in results if (seconds := result.end_to_end_seconds) is not None
        )
        self._drop(leases)

    def _fail(self, lease: Lease, error: Exception) -> None:
        permanent = isinstance(error, PermanentJobError)
        reason = repr(error)[:2000]
        self.keeper.drop([lease])
        outcome = self.retry(lambda: self.queue.fail(lease, reason, retry=not permanent), "fail", until_stopped=False)
        if outcome is FailOutcome.STALE:
            self.metrics.stale_acks.inc()
        else:
            self.metrics.jobs_completed.labels("failure").inc()
            if outcome is FailOutcome.RETRIED:
                self.metrics.jobs_retried.inc()
            elif outcome is FailOutcome.DEAD:
                self.metrics.jobs_dead_lettered.inc()
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
