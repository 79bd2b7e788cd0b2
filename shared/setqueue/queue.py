"""The set-model work queue on redis-py's blocking client: todos -> in_progress -> done, plus failed
(dead letters), scheduled and cancelled.

Each transition is one Lua script (atomic), safe to resend (docs/guide.md#resends). The operations
are written once, sans-I/O, in ``setqueue.operations``; this module runs them with the blocking
``Executor`` and adds what only a blocking client does: waiting for work (BLPOP) and for results
(a listener thread). ``setqueue.aio`` is its asyncio twin."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

import redis

from setqueue.client import (
    Client,
    ClusterAwareRedis,
    ClusterWaiter,
    EndedListener,
    connect,
    on_a_cluster,
    take_wake_token,
    until_due,
)
from setqueue.core import QueueCore
from setqueue.executors import Executor
from setqueue.front import QueueFront
from setqueue.keys import check_seconds, validate_job_id
from setqueue.layout import LayoutCheck
from setqueue.operations import Operations
from setqueue.records import job_items
from setqueue.routing import PlainRouter, Router
from setqueue.steps import Steps
from setqueue.tasks import Sent, Task
from setqueue.workflows import Workflows

__all__ = ["Queue", "job_items"]

P = ParamSpec("P")
R = TypeVar("R")


def _blocking(op: Callable[Concatenate[Operations, P], Steps[R]]) -> Callable[Concatenate[Queue, P], R]:
    """The operation ``op`` as a blocking method: it runs ``op``'s steps on the queue's client."""

    @functools.wraps(op)
    def run(self: Queue, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.executor.run(op(self.operations, *args, **kwargs))

    return run


class Queue(QueueFront):
    """A queue on redis-py's blocking client: one named queue in one Redis (or one Redis Cluster
    slot), or, built by ``setqueue.open_queue``, a sharded queue or several queues served as one (each
    the same class over another router). It implements ``setqueue.JobQueue``.

    ``client``: a ``redis.Redis``, or a ``RedisCluster`` (wrapped: ``queue.redis`` is a ``redis.Redis``
    either way). ``options``: ``QueueCore``'s (lease_seconds, max_attempts, ...), where their defaults
    are declared; ValueError for one out of range."""

    operations: Operations  # every operation, sans-I/O, run here

    name: str

    def __init__(self, client: Client, name: str = "default", **options: Any) -> None:
        core = QueueCore(name, **options)
        self._setup(client, PlainRouter(core), None, None)

    def _setup(
        self, client: Client, router: Router[QueueCore], shards: Sequence[Queue] | None, queues: Sequence[Queue] | None
    ) -> None:
        """Open over ``router``; ``shards`` and ``queues``: the plain and named queues it is made of
        (None: itself)."""
        self.redis: redis.Redis = client if isinstance(client, redis.Redis) else ClusterAwareRedis.around(client)
        self._made_of(router, shards, queues)
        self.operations = Operations(router, Workflows, reporter=self.progress, linker=self.dependencies)
        self.executor = Executor(self.redis, LayoutCheck([core.name for core in router.cores]))
        self._ended: dict[QueueCore, EndedListener] = {}  # the subscriptions result() waits on
        self._waiter: ClusterWaiter | None = None  # made by a first wait across Cluster slots

    @classmethod
    def from_url(cls, url: str, name: str = "default", **options: Any) -> Queue:
        """A plain queue on a new client for ``url`` (``setqueue.client.connect``); any kind: ``open_queue``."""
        return cls(connect(url), name, **options)

    # -- every operation of JobQueue, written once in setqueue.operations

    enqueue = _blocking(Operations.enqueue)
    claim = _blocking(Operations.claim)
    renew = _blocking(Operations.renew)
    renew_many = _blocking(Operations.renew_many)
    renew_outcomes = _blocking(Operations.renew_outcomes)
    ack = _blocking(Operations.ack)
    ack_many = _blocking(Operations.ack_many)
    fail = _blocking(Operations.fail)
    release = _blocking(Operations.release)
    sweep = _blocking(Operations.sweep)
    stats = _blocking(Operations.stats)
    inspect = _blocking(Operations.inspect)
    requeue_failed = _blocking(Operations.requeue_failed)
    delete = _blocking(Operations.delete)
    cancel = _blocking(Operations.cancel)
    history = _blocking(Operations.history)
    progress = _blocking(Operations.progress)
    pause = _blocking(Operations.pause)
    resume = _blocking(Operations.resume)
    set_rate = _blocking(Operations.set_rate)
    set_group_limits = _blocking(Operations.set_group_limits)
    limits = _blocking(Operations.limits)
    groups = _blocking(Operations.groups)
    dependencies = _blocking(Operations.dependencies)
    chain = _blocking(Operations.chain)
    fan_in = _blocking(Operations.fan_in)

    def ping(self, *, record: bool = False) -> bool:
        """``Operations.ping``: it checks the key-layout version itself and records none (the queue's first
        other operation does), so a command that refuses its input after a ping has written nothing."""
        return self.executor.run(self.operations.ping(record=record), check_layout=False)

    @overload
    def send(self, task: Task[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Sent[R]: ...
    @overload
    def send(self, task: str, /, *args: Any, **kwargs: Any) -> Sent[Any]: ...

    def send(self, task: Task[Any, Any] | str, /, *args: Any, **kwargs: Any) -> Sent[Any]:
        """Send a call of ``task`` (a ``Task``: checked against its function's signature, by mypy too; or a
        task's name) as one job: ``Operations.send``. Returns ``Sent(id, created, task)``."""
        return self.executor.run(self.operations.send(task, args, kwargs))

    def wake_keys(self) -> list[str]:
        """The lists an idle worker blocks on."""
        return self.executor.run(self.operations.wake_keys())

    def wait_for_work(self, timeout: float) -> bool:
        """Block until woken by an enqueue or requeue, ``timeout`` passes, or ``due_in`` comes: one BLPOP,
        or a ``ClusterWaiter`` across Cluster slots. True when woken (or due)."""
        return until_due(self.due_in(), timeout, self._take_wake_token)

    def _take_wake_token(self, timeout: float) -> bool:
        keys = self.wake_keys()
        if len(keys) == 1 or not on_a_cluster(self.redis):
            return take_wake_token(self.redis, keys, timeout)
        if self._waiter is None:
            self._waiter = ClusterWaiter(self.redis, keys)
        return self._waiter.wait(timeout)

    # -- one plain queue alone (setqueue.interface.Shard)

    def seconds_since_sweep(self) -> float | None:
        """Seconds since anyone swept this queue (Redis clock; None: not within a day)."""
        return self.executor.run(self.operations.seconds_since_sweep(self.core))

    def create_periodic_runs(self, runs: Sequence[tuple[str, int, str, str | None]]) -> tuple[list[str], list[str]]:
        """For each (name, slot ms, run id, payload), enqueue the run unless one of that slot or later
        exists; returns the names created and those seen first (slot recorded, no run)."""
        return self.executor.run(self.operations.create_periodic_runs(self.core, runs))

    def periodic_slots(self) -> dict[str, float]:
        """Schedule name -> its latest slot (Unix seconds)."""
        return self.executor.run(self.operations.periodic_slots(self.core))

    # -- results

    @overload
    def result(self, job_id: Sent[R], timeout: float | None = None) -> R: ...
    @overload
    def result(self, job_id: str, timeout: float | None = None) -> Any: ...

    def result(self, job_id: str | Sent[Any], timeout: float | None = None) -> Any:
        """What the job's handler returned, once it ends (TimeoutError after ``timeout`` seconds; None:
        wait for ever); ``job_id`` may be what ``send`` returned, and the value then has the task's
        return type. Raises JobFailed (dead-lettered or cancelled), ResultGone (not kept), UnknownJob."""
        wanted = job_id.id if isinstance(job_id, Sent) else job_id
        return self.results([wanted], timeout)[wanted]

    async def result_async(self, job_id: str, timeout: float | None = None) -> Any:
        """``result`` in a thread, for asyncio code on the blocking client (``setqueue.aio`` needs none)."""
        return await asyncio.to_thread(self.result, job_id, timeout)

    def results(self, job_ids: Iterable[str], timeout: float | None = None) -> dict[str, Any]:
        """``result`` of several jobs: id -> value; raises as ``result`` for the first that does. The calls
        of one queue share one subscription to its end-of-job channel: no polling per waiter."""
        wanted = list(dict.fromkeys(validate_job_id(job_id) for job_id in job_ids))
        if timeout is not None:
            check_seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        found: dict[str, Any] = {}
        for core, ids in self.executor.run(self.operations.holders_of(wanted)).items():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            found.update(self._results_in(core, ids, left, len(wanted)))
        return {job_id: found[job_id] for job_id in wanted}

    def _results_in(self, core: QueueCore, wanted: list[str], timeout: float | None, asked: int) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        ended: dict[str, Any] = {}
        listener = self._ended.get(core)
        if listener is None:
            listener = self._ended[core] = EndedListener(self.redis, core.keys.ended_channel)
        woken = listener.watch(wanted)  # first: no job can end unseen between a look and the wait
        try:
            waiting = self.executor.run(self.operations.look(core, wanted, ended))
            while waiting:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{len(waiting)} of {asked} jobs have not ended (e.g. {waiting[0]!r})")
                if woken.wait(left):
                    woken.clear()
                    listener.check()
                    waiting = self.executor.run(self.operations.look(core, waiting, ended))
        finally:
            listener.forget(wanted, woken)
        return ended

    def close(self) -> None:
        """Stop the result listeners and the Cluster waiter, and close the client."""
        for listener in self._ended.values():
            listener.close()
        if self._waiter is not None:
            self._waiter.close()
        self.redis.close()
