"""Routing of several named queues served as one, in strict priority of their order
(docs/guide.md#several-queues). Leases go back to ``lease.queue``; id lookups search every queue;
new ids go to the first. The operations themselves are ``setqueue.operations``'s."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, Generic

from setqueue.jobs import Lease
from setqueue.limits import Limits, Rate
from setqueue.records import part_id, summed_stats
from setqueue.routing import C, Router


class MultiRouter(Generic[C]):
    """Routes over member routers (plain or sharded queues), each keeping its own routing inside."""

    def __init__(self, members: Sequence[Router[C]]) -> None:
        names = [m.name for m in members]
        if len(members) < 2 or len(set(names)) != len(names):
            raise ValueError(f"several queues served as one are two or more different queues, got {names}")
        self.members = list(members)
        self.by_name = {m.name: m for m in members}
        self.name = ",".join(names)
        self._member_of_core = {core: m for m in members for core in m.cores}

    @property
    def cores(self) -> Sequence[C]:
        return list(self._member_of_core)

    def member(self, name: str) -> Router[C]:
        """The member queue ``name``; ValueError if it is not one."""
        try:
            return self.by_name[name]
        except KeyError:
            raise ValueError(f"queue {name!r} is not one of {self.name}") from None

    def home(self, job_id: str) -> C:
        return self.members[0].home(job_id)

    def holders(self, job_id: str) -> Sequence[C]:
        return [core for m in self.members for core in m.holders(job_id)]

    def of_lease(self, lease: Lease) -> C:
        return self.member(lease.queue).of_lease(lease)

    def claim_order(self, request_id: str | None) -> Iterator[tuple[C, str | None]]:
        """All the first queue has, then the next queue's..."""
        return itertools.chain.from_iterable(m.claim_order(part_id(request_id, m.name)) for m in self.members)

    def part(self, request_id: str | None, core: C) -> str | None:
        member = self._member_of_core[core]
        return member.part(part_id(request_id, member.name), core)

    def queue_name(self, core: C) -> str:
        return self._member_of_core[core].queue_name(core)

    def wake_keys(self, on_a_cluster: bool) -> list[str]:
        return [key for m in self.members for key in m.wake_keys(on_a_cluster)]

    def extra_wake(self, core: C, on_a_cluster: bool) -> str | None:
        return self._member_of_core[core].extra_wake(core, on_a_cluster)

    def shape_stats(self, each: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Each queue's stats under ``"queues"``, and the states summed."""
        by_core = dict(zip(self.cores, each, strict=True))
        queues = {m.name: m.shape_stats([by_core[core] for core in m.cores]) for m in self.members}
        return {**summed_stats(list(each)), "queues": queues}

    def rate_shares(self, rate: Rate | None) -> list[tuple[C, Rate | None]]:
        """Each queue enforces the whole rate (a sharded one splits it among its shards)."""
        return [share for m in self.members for share in m.rate_shares(rate)]

    def whole_limits(self, first: Limits) -> Limits:
        return self.members[0].whole_limits(first)

    def shard_counts(self) -> list[tuple[str, int]]:
        return [count for m in self.members for count in m.shard_counts()]
