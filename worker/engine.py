"""Where the worker's jobs run: CONCURRENCY slots (threads, or one asyncio loop for an ``async def``
handler) fed from a FIFO buffer of claimed jobs; ``wanted`` is the claim policy. Each running job has
a deadline so that the supervisor can interrupt it whatever the handler does. No Redis here:
``finish`` reports each end and the worker decides what it means.
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

Finish = Callable[["Running", BaseException | None, Any], None]

PREFETCH_WINDOW_SECONDS = 1.0  # claim beyond the free slots only while a job started this recently


def is_async(function: Callable[..., Any]) -> bool:
    call = getattr(function, "__call__", None)  # noqa: B004 - a callable object's async __call__ counts
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def raise_in_thread(thread_id: int, exception: type[BaseException]) -> bool:
    done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exception))
    if done > 1:  # more than one thread state touched: undo, as the C API asks
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)
        return False
    return bool(done == 1)


@dataclass(eq=False)
class Running:
    lease: Lease
    started: float = 0.0  # monotonic
    deadline: float = float("inf")
    thread_id: int | None = None
    task: asyncio.Task[Any] | None = None
    timed_out: float | None = None  # when the supervisor gave up on it
    zombie: bool = False
    abandoned: bool = False  # handed back at the end of a shutdown: its outcome no longer counts
    cancelled: bool = False  # cancelled while it ran: its outcome no longer counts


@dataclass
class Buffered:
    lease: Lease
    claimed: float


@dataclass
class Slots:
    """The buffer and the running jobs, under one lock."""

    concurrency: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    buffer: collections.deque[Buffered] = field(default_factory=collections.deque)
    running: dict[int, Running] = field(default_factory=dict)  # id(record) -> record
    zombies: int = 0
    closed: bool = False  # no job starts any more
    last_start: float = 0.0

    def __post_init__(self) -> None:
        self.work = threading.Condition(self.lock)  # a job was buffered (or the engine closed)
        self.room = threading.Condition(self.lock)  # a slot or buffer room came free

    @property
    def free(self) -> int:
        """Call with the lock held (a zombie's job is still in ``running``)."""
        return self.concurrency - len(self.running)


class Engine:
    """``finish`` is called from the job's thread (or the loop)."""

    def __init__(
        self,
        handler: Callable[[Lease], Any],
        concurrency: int,
        timeout: float,
        finish: Finish,
        claim_batch: int | None = None,
    ) -> None:
        self.handler = handler
        self.timeout = timeout  # 0: none
        self.finish = finish
        self.slots = Slots(concurrency)
        self.claim_batch = claim_batch if claim_batch is not None else concurrency
        # A job's end wakes the claimer only when the buffer is this low (where ``wanted`` claims again):
        # waking it on every job costs CPU for nothing.
        self.low_water = max(1, self.claim_batch // 2)
        self.asynchronous = is_async(handler)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, configure: Callable[[], Any] | None = None) -> None:
        """``configure`` runs first, on the event loop when it is a coroutine function."""
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
        """On the job loop, or on a loop of its own when there is none."""
        if self._loop is None:
            return asyncio.run(_awaited(awaitable))
        return asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop).result()

    def close(self) -> list[Lease]:
        """No job starts any more; the buffered leases, now out of the buffer."""
        with self.slots.lock:
            self.slots.closed = True
            left = [b.lease for b in self.slots.buffer]
            self.slots.buffer.clear()
            self.slots.work.notify_all()
            self.slots.room.notify_all()
        return left

    def stop_loop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def wanted(self, stop: threading.Event, *, prefetch: bool = True) -> int:
        """How many jobs to claim now (docs/guide.md, "Slots"), not under half a batch while the buffer
        covers the free slots. Waits up to a second for room; 0 then, or once closed or ``stop`` is set."""
        batch, slots = self.claim_batch, self.slots
        with slots.lock:
            for _ in range(10):
                if slots.closed or stop.is_set():
                    return 0
                buffered = len(slots.buffer)
                free = slots.free
                turning = prefetch and time.monotonic() - slots.last_start < PREFETCH_WINDOW_SECONDS
                want = min(batch, free + (batch if turning else 0) - buffered)
                if want > 0 and (buffered < free or want * 2 >= batch):
                    return want
                slots.room.wait(0.1)
        return 0

    def put(self, leases: list[Lease]) -> None:
        now = time.monotonic()
        with self.slots.lock:
            if self.slots.closed:
                raise RuntimeError("engine closed")
            self.slots.buffer.extend(Buffered(lease, now) for lease in leases)
            self.slots.work.notify(len(leases))
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._pump)

    def take_stale(self, older_than: float) -> list[Lease]:
        """Out of the buffer (they go back)."""
        stale: list[Lease] = []
        with self.slots.lock:
            buffer = self.slots.buffer
            while buffer and buffer[0].claimed < older_than:
                stale.append(buffer.popleft().lease)
            if stale:
                self.slots.room.notify_all()
        return stale

    def _slot(self) -> None:
        while True:
            try:
                if not self._serve_one():
                    return
            except (JobTimeout, JobCancelled):
                continue  # landed between two jobs: the job it was meant for is over

    def _serve_one(self) -> bool:
        """Run the oldest buffered job; False once closed."""
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
            if inspect.isawaitable(value):  # a plain function that returned a coroutine
                value = self.run_coroutine(value)
        except (JobTimeout, JobCancelled, Exception) as exc:  # user code: any exception fails the attempt
            error = exc
        try:
            self._end(record, error, value)
        except (JobTimeout, JobCancelled) as exc:  # raised just as its job returned: the job is over
            self._end(record, exc, None)
        if record.zombie:  # came back after all: this thread serves again
            with slots.lock:
                slots.zombies -= 1
        return True

    def _start(self, buffered: Buffered, thread_id: int | None) -> Running:  # with the lock held
        now = time.monotonic()
        lease = buffered.lease
        timeout = self.timeout if lease.timeout is None else lease.timeout  # the job's own wins
        deadline = now + timeout if timeout > 0 else float("inf")
        record = Running(lease, now, deadline, thread_id)
        self.slots.running[id(record)] = record
        self.slots.last_start = now
        return record

    def _end(self, record: Running, error: BaseException | None, value: Any = None) -> None:
        with self.slots.lock:
            self.slots.running.pop(id(record), None)
            if len(self.slots.buffer) <= self.low_water:
                self.slots.room.notify()
            # The supervisor already failed a timed-out job and handed back an abandoned one.
            counts = record.timed_out is None and not record.abandoned and not record.cancelled
        if counts:
            self.finish(record, error, value)

    def _pump(self) -> None:
        """On the loop: start buffered jobs in the free slots."""
        assert self._loop is not None
        slots = self.slots
        with slots.lock:
            while slots.buffer and not slots.closed and slots.free > 0:
                record = self._start(slots.buffer.popleft(), None)
                record.task = self._loop.create_task(self._run_async(record))

    async def _run_async(self, record: Running) -> None:
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

    def overdue(self, now: float) -> list[Running]:
        """Running jobs newly past their deadline, marked timed out."""
        late: list[Running] = []
        with self.slots.lock:
            for record in self.slots.running.values():
                if record.timed_out is None and record.deadline <= now:
                    record.timed_out = now
                    late.append(record)
        return late

    def interrupt(self, record: Running, exception: type[BaseException] = JobTimeout) -> None:
        if record.task is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(record.task.cancel)
        elif record.thread_id is not None:
            raise_in_thread(record.thread_id, exception)

    def cancel(self, job_id: str) -> tuple[list[Lease], list[Lease]]:
        """Stop ``job_id`` here (its run no longer counts): (running leases, buffered ones now out)."""
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
        """Mark jobs ``after`` seconds past their timeout as zombies; the count."""
        with self.slots.lock:
            for record in self.slots.running.values():
                if record.timed_out is not None and not record.zombie and now - record.timed_out >= after:
                    record.zombie = True
                    self.slots.zombies += 1
            return self.slots.zombies

    def abandon_running(self) -> list[Lease]:
        """Close, and give up on the running jobs (no longer reported; the caller hands them back)."""
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
        with self.slots.lock:
            return [r.lease for r in self.slots.running.values() if r.timed_out is None and not r.cancelled]

    def counts(self) -> tuple[int, int, int]:
        """(buffered, running, zombies)"""
        with self.slots.lock:
            return len(self.slots.buffer), len(self.slots.running), self.slots.zombies


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
