"""Where the worker's jobs run: CONCURRENCY slots fed from a small buffer of claimed jobs
(docs/guide.md#how-a-worker-runs-jobs).

A plain function handler runs on CONCURRENCY threads; an ``async def`` handler runs on one asyncio event
loop (its own thread) with up to CONCURRENCY jobs in flight. Either way:

- claimed jobs wait in a FIFO buffer (``put``) and a free slot takes the oldest; ``wanted`` is the claim
  policy: how many jobs the worker should claim now for its free slots and the buffer;
- every running job is a ``Running`` record with its deadline, so the supervisor (the worker's main
  thread) can time it out whatever the handler does: ``interrupt`` raises ``JobTimeout`` in the job's
  thread (best effort, as Dramatiq's TimeLimit: a thread blocked in C code, such as ``time.sleep``, only
  sees it when it comes back to Python) or cancels the job's task;
- a job whose slot has not come back a while after its timeout is a zombie: its slot stays taken.

The engine knows nothing of Redis: it calls ``finish(record, error, value)`` when a job returns or
raises, and the worker decides what that means (ack, fail, or nothing when the job was timed out already).
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from setqueue.jobs import JobCancelled, JobTimeout, Lease

# finish(record, error, value): a job returned ``value`` (error None) or raised ``error``.
Finish = Callable[["Running", BaseException | None, Any], None]

PREFETCH_WINDOW_SECONDS = 1.0  # claim beyond the free slots only while a job started this recently


def is_async(function: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    call = getattr(function, "__call__", None)  # noqa: B004 - a callable object's async __call__ counts
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def raise_in_thread(thread_id: int, exception: type[BaseException]) -> bool:
    """Ask CPython to raise ``exception`` in that thread at its next Python instruction. True when exactly
    that one thread was asked (False: no such thread, or more than one touched and undone)."""
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exception))
    if done > 1:  # more than one thread state touched: undo, as the C API asks
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)
        return False
    return bool(done == 1)


@dataclass(eq=False)
class Running:
    """One job in a slot."""

    lease: Lease
    started: float = 0.0  # monotonic
    deadline: float = float("inf")  # monotonic; inf = no timeout
    thread_id: int | None = None  # a thread slot's (None: a task on the loop)
    task: asyncio.Task[Any] | None = None  # an async job's
    timed_out: float | None = None  # monotonic time the supervisor gave up on it
    zombie: bool = False
    abandoned: bool = False  # handed back at the end of a shutdown: its outcome no longer counts
    cancelled: bool = False  # cancelled while it ran: its outcome no longer counts
    # Set as it ends: no other job was running or buffered then (the worker has nothing to batch its
    # ack with, so it acks at once: a waiting dependent, or whoever reads the result, need not wait).
    last: bool = False


@dataclass
class Buffered:
    """A claimed job waiting in the buffer for a slot."""

    lease: Lease
    claimed: float  # monotonic time it was put in the buffer: ``take_stale`` hands it back when old


@dataclass
class Slots:
    """The buffer and the running jobs, under one lock; counts the worker reads to decide a claim."""

    concurrency: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    buffer: collections.deque[Buffered] = field(default_factory=collections.deque)
    running: dict[int, Running] = field(default_factory=dict)  # id(record) -> record
    zombies: int = 0
    closed: bool = False  # no job starts any more (shutdown)
    last_start: float = 0.0  # monotonic time the latest job started

    def __post_init__(self) -> None:
        self.work = threading.Condition(self.lock)  # a job was buffered (or the engine closed)
        self.room = threading.Condition(self.lock)  # a slot or buffer room came free

    @property
    def free(self) -> int:
        """Slots neither running a job nor lost to a zombie: a zombie's job is still in ``running``, so it
        keeps its slot taken until it returns. Call with the lock held."""
        return self.concurrency - len(self.running)


class Engine:
    """Runs claimed jobs in CONCURRENCY slots: threads for a plain handler, an event loop for an async
    one. ``put`` buffers jobs; ``finish`` is called from the job's thread (or the loop)."""

    def __init__(
        self,
        handler: Callable[[Lease], Any],
        concurrency: int,
        timeout: float,
        finish: Finish,
        claim_batch: int | None = None,
    ) -> None:
        self.handler = handler
        self.timeout = timeout  # seconds; 0 = none
        self.finish = finish
        self.slots = Slots(concurrency)
        self.claim_batch = claim_batch if claim_batch is not None else concurrency
        # A job's end wakes the claimer only when the buffer is this low: where ``wanted`` would claim again
        # (half a batch; see there). Waking it on every job cost 11% of an I/O-bound worker's CPU in a
        # profile, for claims it then skipped.
        self.low_water = max(1, self.claim_batch // 2)
        self.asynchronous = is_async(handler)
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- start and stop ------------------------------------------------------------------------

    def start(self, configure: Callable[[], Any] | None = None) -> None:
        """Start the slots; ``configure`` (the handler module's configure_worker, bound to the settings)
        runs first, on the event loop when it is a coroutine function."""
        if self.asynchronous:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="job-loop", daemon=True).start()
        if configure is not None:
            result = configure()
            if inspect.isawaitable(result):
                self.run_coroutine(result)
        if not self.asynchronous:
            for n in range(self.slots.concurrency):
                threading.Thread(target=self._slot, name=f"job-slot-{n + 1}", daemon=True).start()

    def run_coroutine(self, awaitable: Awaitable[Any]) -> Any:
        """Run it to its end and return its value: on the job loop, or on a loop of its own when there is
        none (a plain handler that returned a coroutine)."""
        if self._loop is None:
            return asyncio.run(_awaited(awaitable))
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop).result()

    def close(self) -> list[Lease]:
        """No job starts any more; returns the buffered (unstarted) leases, now out of the buffer."""
        with self.slots.lock:
            self.slots.closed = True
            left = [b.lease for b in self.slots.buffer]
            self.slots.buffer.clear()
            self.slots.work.notify_all()
            self.slots.room.notify_all()
        return left

    def stop_loop(self) -> None:
        """Stop the async handler's event loop, if there is one."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    # -- the buffer ----------------------------------------------------------------------------

    def wanted(self, stop: threading.Event, *, prefetch: bool = True) -> int:
        """How many jobs to claim now (docs/guide.md#how-a-worker-runs-jobs, "Slots"): the free slots, plus
        up to ``claim_batch`` buffered while jobs keep starting (one started within
        PREFETCH_WINDOW_SECONDS; never without ``prefetch``), at most ``claim_batch`` per call, and not for
        a handful (under half a batch) while the buffer still covers the free slots. Waits up to a second
        for room; 0 then (ask again), or once closed or ``stop`` is set."""
        batch, slots = self.claim_batch, self.slots
        with slots.lock:
            for _ in range(10):  # ten waits of 0.1 s: back to the caller about once a second
                if slots.closed or stop.is_set():
                    return 0
                buffered = len(slots.buffer)
                free = slots.free
                # Prefetch (claim a batch beyond the free slots) only while jobs keep starting: then a slot
                # comes free soon and finds its next job here, without waiting for a claim's round trip.
                # When every slot is stuck on a long job, a buffered job would only wait behind it (until
                # it is handed back after LEASE_SECONDS/3) while an idle worker could run it. Without
                # ``prefetch`` (the queue has a rate or group limits) a job claimed ahead would spend the
                # rate or its group's slot before it starts, so claim for the free slots alone.
                turning = prefetch and time.monotonic() - slots.last_start < PREFETCH_WINDOW_SECONDS
                # Room for the free slots (and a batch of buffer while prefetching), less what is already
                # buffered for them; at most one batch, the most one claim call takes.
                want = min(batch, free + (batch if turning else 0) - buffered)
                # Claim at once while a free slot has nothing buffered for it (buffered < free): it would sit
                # idle. Otherwise the buffer covers every free slot and a claim only tops up the prefetch:
                # wait until that is worth half a batch. A claim is a round trip and a script call whose fixed
                # cost outweighs its work on one job (lua/claim.lua), so topping up one job at a time would
                # pay that cost per job (the ``low_water`` wake-up in ``_end`` comes at the same point).
                if want > 0 and (buffered < free or want * 2 >= batch):
                    return want
                slots.room.wait(0.1)
        return 0

    def put(self, leases: list[Lease]) -> None:
        """Buffer claimed leases for the slots (the oldest starts first). RuntimeError once the engine is
        closed: the caller hands them straight back."""
        now = time.monotonic()
        with self.slots.lock:
            if self.slots.closed:
                raise RuntimeError("engine closed")
            self.slots.buffer.extend(Buffered(lease, now) for lease in leases)
            self.slots.work.notify(len(leases))
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._pump)

    def take_stale(self, older_than: float) -> list[Lease]:
        """Buffered leases claimed before ``older_than`` (monotonic), out of the buffer: they have waited
        for a slot too long and go back to the queue."""
        stale: list[Lease] = []
        with self.slots.lock:
            buffer = self.slots.buffer
            while buffer and buffer[0].claimed < older_than:
                stale.append(buffer.popleft().lease)
            if stale:
                self.slots.room.notify_all()
        return stale

    # -- a thread slot -------------------------------------------------------------------------

    def _slot(self) -> None:
        """A thread slot's loop: serve buffered jobs until the engine closes."""
        while True:
            try:
                if not self._serve_one():
                    return
            except (JobTimeout, JobCancelled):
                continue  # an interruption that landed between two jobs: the job it was meant for is over

    def _serve_one(self) -> bool:
        """Take the oldest buffered job and run it; False once the engine is closed."""
        slots = self.slots
        with slots.lock:
            while not slots.buffer and not slots.closed:
                slots.work.wait()
            if slots.closed:
                return False
            record = self._start(slots.buffer.popleft(), threading.get_ident())
        error: BaseException | None = None
        value: Any = None
        try:
            value = self.handler(record.lease)
            if inspect.isawaitable(value):  # a plain function that hands back a coroutine: await it
                value = self.run_coroutine(value)
        except (JobTimeout, JobCancelled, Exception) as exc:  # the handler is user code: any exception fails it
            error = exc
        try:
            self._end(record, error, value)
        except (JobTimeout, JobCancelled) as exc:  # raised just as its job returned: the job is over
            self._end(record, exc, None)
        if record.zombie:  # came back after all: this thread may serve again, its slot is free
            with slots.lock:
                slots.zombies -= 1
        return True

    def _start(self, buffered: Buffered, thread_id: int | None) -> Running:
        """The job leaves the buffer for a slot, with its deadline. Call with the lock held."""
        now = time.monotonic()
        lease = buffered.lease
        timeout = self.timeout if lease.timeout is None else lease.timeout  # the job's own wins
        deadline = now + timeout if timeout > 0 else float("inf")  # a timeout of 0: none
        record = Running(lease, now, deadline, thread_id)
        self.slots.running[id(record)] = record
        self.slots.last_start = now
        return record

    def _end(self, record: Running, error: BaseException | None, value: Any = None) -> None:
        """The job left its slot: free the slot, and report the outcome unless it no longer counts."""
        with self.slots.lock:
            self.slots.running.pop(id(record), None)
            if len(self.slots.buffer) <= self.low_water:  # the claimer would claim again now (``wanted``)
                self.slots.room.notify()
            record.last = not self.slots.buffer and not self.slots.running
            # The supervisor already failed a timed-out job and handed back an abandoned one.
            counts = record.timed_out is None and not record.abandoned and not record.cancelled
        if counts:
            self.finish(record, error, value)

    # -- the async slots -----------------------------------------------------------------------

    def _pump(self) -> None:
        """On the loop: start buffered jobs while slots are free."""
        assert self._loop is not None
        slots = self.slots
        with slots.lock:
            while slots.buffer and not slots.closed and slots.free > 0:
                record = self._start(slots.buffer.popleft(), None)
                record.task = self._loop.create_task(self._run_async(record))

    async def _run_async(self, record: Running) -> None:
        """Run one async job; its task cancelled means cancelled (JobCancelled) or timed out (JobTimeout)."""
        error: BaseException | None = None
        value: Any = None
        try:
            value = await self.handler(record.lease)
        except asyncio.CancelledError:
            error = JobCancelled("job cancelled") if record.cancelled else JobTimeout("job timed out (cancelled)")
        except Exception as exc:
            error = exc
        self._end(record, error, value)
        self._pump()

    # -- the supervisor's view -----------------------------------------------------------------

    def overdue(self, now: float) -> list[Running]:
        """Running jobs past their deadline that were not timed out yet, now marked timed out."""
        late: list[Running] = []
        with self.slots.lock:
            for record in self.slots.running.values():
                if record.timed_out is None and record.deadline <= now:
                    record.timed_out = now
                    late.append(record)
        return late

    def interrupt(self, record: Running, exception: type[BaseException] = JobTimeout) -> None:
        """Stop a job: ``exception`` raised in its thread (best effort), or its task cancelled."""
        if record.task is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(record.task.cancel)
        elif record.thread_id is not None:
            raise_in_thread(record.thread_id, exception)

    def cancel(self, job_id: str) -> tuple[list[Lease], list[Lease]]:
        """Stop the job ``job_id`` wherever it is in this engine (its run no longer counts). Returns the
        leases it had running (JobCancelled raised in its thread, or its task cancelled) and the ones it had
        waiting in the buffer, now out of it."""
        with self.slots.lock:
            running = [
                r for r in self.slots.running.values() if r.lease.id == job_id and not (r.cancelled or r.abandoned)
            ]
            for record in running:
                record.cancelled = True
            waiting = [b for b in self.slots.buffer if b.lease.id == job_id]
            for buffered in waiting:
                self.slots.buffer.remove(buffered)
        for record in running:
            self.interrupt(record, JobCancelled)
        return [r.lease for r in running], [b.lease for b in waiting]

    def new_zombies(self, now: float, after: float) -> int:
        """Mark timed-out jobs still running ``after`` seconds later as zombies; returns how many zombies
        there are now."""
        with self.slots.lock:
            for record in self.slots.running.values():
                if record.timed_out is not None and not record.zombie and now - record.timed_out >= after:
                    record.zombie = True
                    self.slots.zombies += 1
            return self.slots.zombies

    def abandon_running(self) -> list[Lease]:
        """Close the engine and give up on every running job: whatever they do from now on is not reported
        (the caller hands them back). Returns their leases."""
        with self.slots.lock:
            self.slots.closed = True
            self.slots.buffer.clear()
            left = []
            for record in self.slots.running.values():
                if record.timed_out is None and not record.abandoned:
                    record.abandoned = True
                    left.append(record.lease)
            return left

    def running_leases(self) -> list[Lease]:
        """Leases of running jobs whose outcome still counts: not timed out, not cancelled."""
        with self.slots.lock:
            return [r.lease for r in self.slots.running.values() if r.timed_out is None and not r.cancelled]

    def counts(self) -> tuple[int, int, int]:
        """(buffered jobs, running jobs, zombies): a zombie's job counts as running too."""
        with self.slots.lock:
            return len(self.slots.buffer), len(self.slots.running), self.slots.zombies


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    """A coroutine of any awaitable, for the asyncio calls that want one."""
    return await awaitable
