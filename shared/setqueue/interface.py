"""One interface for every kind of queue: ``JobQueue`` (and ``Shard``, one plain queue).

A plain ``Queue`` (one queue in one Redis slot), a ``ShardedQueue`` (one queue over N shards) and a
``QueueGroup`` (several named queues served as one, in strict priority of their order) all have
these attributes and methods, with the same signatures; ``setqueue.open_queue`` makes whichever the
arguments name. The services and the CLI use nothing else, so none of them needs to know which
kind it was given: what differs is said by ``queues`` (the named queues served) and ``shards`` (the
plain queues that hold the jobs, each a ``Shard``: a ``Queue`` in one Redis slot, with its keys).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import redis

from setqueue.jobs import AckResult, FailOutcome, JobInfo, Lease, SweepResult
from setqueue.keys import QueueKeys


@runtime_checkable
class JobQueue(Protocol):
    """What every kind of queue offers (see the module's doc). Calls that take a lease go to the
    queue (and shard) the lease came from; calls that take an id go to the queue that holds it."""

    name: str  # a group's name is its members' names joined by commas

    @property
    def redis(self) -> redis.Redis: ...
    @property
    def lease_seconds(self) -> float: ...
    @property
    def retry_backoff_seconds(self) -> float: ...
    @property
    def request_ttl_seconds(self) -> float:
        """How long Redis keeps a call's result for a resend with the same request id."""
        ...

    @property
    def queues(self) -> Sequence[JobQueue]:
        """The named queues served: itself, or a group's members."""
        ...

    @property
    def shards(self) -> Sequence[Shard]:
        """The plain queues that hold the jobs: itself, its shards, or all of a group's."""
        ...

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
    ) -> int: ...

    # -- workers
    def claim(self, count: int = 1, *, request_id: str | None = None) -> list[Lease]: ...
    def renew(self, lease: Lease) -> bool: ...
    def renew_many(self, leases: Sequence[Lease]) -> list[bool]: ...
    def ack(self, lease: Lease) -> bool: ...
    def ack_many(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[AckResult]: ...
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
    def ping(self, *, record: bool = False) -> bool: ...
    def close(self) -> None: ...


@runtime_checkable
class Shard(JobQueue, Protocol):
    """One plain queue in one Redis slot (a ``Queue``): what holds jobs, with the keys it keeps them
    under, and the periodic runs that live in one queue."""

    keys: QueueKeys
    wake_cap: int  # how many idle workers one call may wake
    payload_max_bytes: int  # the largest payload enqueue takes

    def create_periodic_runs(self, runs: Sequence[tuple[str, int, str, str | None]]) -> tuple[list[str], list[str]]: ...
    def periodic_slots(self) -> dict[str, float]: ...
    def seconds_since_sweep(self) -> float | None: ...
