"""How a queue made of one or more plain queues (cores) routes: the contract every router keeps, and
the router of a plain queue. The routers of sharded queues and of several queues served as one are in
``setqueue.sharded`` and ``setqueue.group``; ``setqueue.operations`` runs every operation over any.

A router is generic in what a core is (``setqueue.operations.QueueCore``), needing of it only its name
and key layout, so routing stands apart from the operations."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from setqueue.jobs import Lease
from setqueue.keys import QueueKeys
from setqueue.limits import Limits, Rate


class Core(Hashable, Protocol):
    """What a router reads of a core: its name and its key layout."""

    @property
    def name(self) -> str: ...
    @property
    def keys(self) -> QueueKeys: ...


C = TypeVar("C", bound=Core)


class Router(Protocol[C]):
    """How a queue made of one or more ``C`` routes (setqueue.routing has the three kinds)."""

    name: str

    @property
    def cores(self) -> Sequence[C]:
        """Every core, in claim priority order."""

    def home(self, job_id: str) -> C:
        """The core a new ``job_id`` is enqueued in."""

    def holders(self, job_id: str) -> Sequence[C]:
        """The cores that may hold ``job_id`` (one, unless several queues are served as one)."""

    def of_lease(self, lease: Lease) -> C:
        """The core ``lease`` was claimed from."""

    def claim_order(self, request_id: str | None) -> Iterable[tuple[C, str | None]]:
        """The cores a claim visits, in order, each with its part's request id (lazily: a claim that is
        satisfied early stops visiting)."""

    def part(self, request_id: str | None, core: C) -> str | None:
        """The request id of ``core``'s part of a call given ``request_id``."""

    def queue_name(self, core: C) -> str:
        """The queue name leases and job info from ``core`` carry (a sharded queue's, not the shard's)."""

    def wake_keys(self, on_a_cluster: bool) -> list[str]:
        """The lists an idle worker blocks on."""

    def extra_wake(self, core: C, on_a_cluster: bool) -> str | None:
        """A list to push wake tokens to, besides what ``core``'s scripts push, when jobs become
        claimable in it (a sharded queue on a Cluster, whose workers cannot BLPOP across slots)."""

    def shape_stats(self, each: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The queue's ``stats()`` from every core's, in ``cores`` order."""

    def rate_shares(self, rate: Rate | None) -> list[tuple[C, Rate | None]]:
        """What each core enforces of a rate set for the whole queue."""

    def whole_limits(self, first: Limits) -> Limits:
        """The queue's limits from its first core's (rates scaled back from a shard's share)."""

    def shard_counts(self) -> list[tuple[str, int]]:
        """(name, shard count) of every sharded queue in it, to check against what Redis records."""


class PlainRouter(Generic[C]):
    """The routing of a plain queue: one core holds everything."""

    def __init__(self, core: C) -> None:
        self.core = core
        self.name = core.name

    @property
    def cores(self) -> Sequence[C]:
        return (self.core,)

    def home(self, job_id: str) -> C:
        return self.core

    def holders(self, job_id: str) -> Sequence[C]:
        return (self.core,)

    def of_lease(self, lease: Lease) -> C:
        return self.core

    def claim_order(self, request_id: str | None) -> Iterable[tuple[C, str | None]]:
        return ((self.core, request_id),)

    def part(self, request_id: str | None, core: C) -> str | None:
        return request_id

    def queue_name(self, core: C) -> str:
        return self.name

    def wake_keys(self, on_a_cluster: bool) -> list[str]:
        return [self.core.keys.wake]

    def extra_wake(self, core: C, on_a_cluster: bool) -> str | None:
        return None  # the scripts wake this queue's workers

    def shape_stats(self, each: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return each[0]

    def rate_shares(self, rate: Rate | None) -> list[tuple[C, Rate | None]]:
        return [(self.core, rate)]

    def whole_limits(self, first: Limits) -> Limits:
        return first

    def shard_counts(self) -> list[tuple[str, int]]:
        return []
