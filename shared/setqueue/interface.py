"""``JobQueue``, what every ``Queue`` (plain, ``ShardedQueue``, ``MultiQueue``: whichever
``setqueue.open_queue`` makes) shares; the services and CLI use nothing else. ``Shard``: one plain queue."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar, overload, runtime_checkable

import redis

from setqueue.jobs import AckResult, FailOutcome, HistoryEntry, JobInfo, JobRef, Lease, RenewOutcome, SweepResult
from setqueue.keys import QueueKeys
from setqueue.limits import GroupInfo, Limits, Rate
from setqueue.tasks import Sent, Task

P = ParamSpec("P")
R = TypeVar("R")


@runtime_checkable
class JobQueue(Protocol):
    """What every kind of queue offers. Calls taking a lease go to the queue (and shard) it came from;
    calls taking an id, to the queue holding it."""

    name: str  # a group's name is its members' names joined by commas

    @property
    def redis(self) -> redis.Redis: ...
    @property
    def lease_seconds(self) -> float: ...
    @property
    def retry_backoff_seconds(self) -> float: ...
    @property
    def request_ttl_seconds(self) -> float:
        """How long a call's result is kept for a resend with the same request id."""

    @property
    def queues(self) -> Sequence[JobQueue]:
        """Itself, or a group's members."""

    @property
    def shards(self) -> Sequence[Shard]:
        """Itself, its shards, or all of a group's."""

    # -- producers
    def enqueue(
        self,
        ids: Iterable[str] | Mapping[str, Any],
        *,
        delay: float | None = None,
        at: float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        timeout: float | None = None,
        group: str | None = None,
        retry_timeouts: bool | None = None,
        if_exists: str = "ignore",
        depends_on: Iterable[str | Sent[Any] | JobRef] | None = None,
        if_dependency_fails: str = "fail",
        request_id: str | None = None,
    ) -> int: ...

    @overload
    def send(self, task: Task[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Sent[R]: ...
    @overload
    def send(self, task: str, /, *args: Any, **kwargs: Any) -> Sent[Any]: ...
    def send(self, task: Task[Any, Any] | str, /, *args: Any, **kwargs: Any) -> Sent[Any]:
        """Send a call of ``task`` (a ``Task``, or a task's name) as one job."""

    # -- workers
    def claim(self, count: int = 1, *, request_id: str | None = None) -> list[Lease]: ...
    def renew(self, lease: Lease) -> bool: ...
    def renew_many(self, leases: Sequence[Lease]) -> list[bool]: ...
    def renew_outcomes(self, leases: Sequence[Lease]) -> list[RenewOutcome]: ...
    def ack(self, lease: Lease, result: Any = None) -> bool: ...
    def ack_many(
        self, leases: Sequence[Lease], *, results: Sequence[Any] | None = None, request_id: str | None = None
    ) -> list[AckResult]: ...
    def fail(
        self,
        lease: Lease,
        reason: str = "",
        *,
        retry: bool = True,
        delay: float | None = None,
        request_id: str | None = None,
    ) -> FailOutcome: ...
    def release(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[FailOutcome]: ...
    def backoff_delay(self, attempt: int) -> float: ...
    def due_in(self) -> float | None: ...
    def wake_keys(self) -> list[str]: ...
    def wait_for_work(self, timeout: float) -> bool: ...

    # -- the cleaner and operators
    def sweep(self, limit: int = 1000) -> SweepResult: ...
    def stats(self) -> dict[str, Any]: ...
    def inspect(self, job_id: str) -> JobInfo | None: ...
    def requeue_failed(self, ids: Iterable[str] | None = None, *, limit: int = 1000) -> int: ...
    def delete(self, job_id: str) -> str | None: ...
    def cancel(self, job_id: str) -> str | None: ...
    def history(self, job_id: str) -> list[HistoryEntry]: ...
    @overload
    def result(self, job_id: Sent[R], timeout: float | None = None) -> R: ...
    @overload
    def result(self, job_id: str, timeout: float | None = None) -> Any: ...
    def result(self, job_id: str | Sent[Any], timeout: float | None = None) -> Any:
        """What the job's handler returned, once it ends."""

    async def result_async(self, job_id: str, timeout: float | None = None) -> Any: ...
    def results(self, job_ids: Iterable[str], timeout: float | None = None) -> dict[str, Any]: ...
    def ping(self, *, record: bool = False) -> bool: ...
    def close(self) -> None: ...

    # -- limits
    def pause(self) -> bool: ...
    def resume(self) -> bool: ...
    def set_rate(self, rate: Rate | str | None, *, burst: int | None = None) -> None: ...
    def set_group_limits(
        self,
        group: str | None = None,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        burst: int | None = None,
    ) -> None: ...
    def limits(self) -> Limits: ...
    def groups(self, most: int = 100) -> list[GroupInfo]: ...


@runtime_checkable
class Shard(JobQueue, Protocol):
    """One plain ``Queue`` in one Redis slot: its keys, and the periodic runs that live in one queue."""

    @property
    def keys(self) -> QueueKeys:
        """Its key layout."""

    @property
    def wake_cap(self) -> int:
        """How many idle workers one call may wake."""

    @property
    def payload_max_bytes(self) -> int: ...

    @property
    def limited(self) -> bool:
        """The last claim found a rate or group limits."""

    @property
    def on_held(self) -> Callable[[str, str], None] | None:
        """Told (queue, reason) when limits held jobs."""

    @on_held.setter
    def on_held(self, told: Callable[[str, str], None] | None) -> None: ...

    def create_periodic_runs(self, runs: Sequence[tuple[str, int, str, str | None]]) -> tuple[list[str], list[str]]: ...
    def periodic_slots(self) -> dict[str, float]: ...
    def seconds_since_sweep(self) -> float | None: ...
    def progress(self, lease: Lease, fraction: float, message: str = "") -> bool: ...
