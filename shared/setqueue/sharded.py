"""Routing of one logical queue stored as N shards ``Q~i``, each a whole plain queue under its own
hash tag (docs/guide.md#shards). An id always lives in shard ``crc32(id) mod N``, so scripts stay
single-slot and a lease finds its shard from its id alone. The operations themselves are
``setqueue.operations``'s, written once for every kind of queue."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any, Generic

from setqueue.jobs import Lease
from setqueue.keys import MAX_SHARDS, QueueKeys, shard_name, shard_of

__all__ = ["ShardRouter", "shard_name", "shard_names", "shard_of"]
from setqueue.limits import GroupLimits, Limits, Rate
from setqueue.records import part_id, summed_stats
from setqueue.routing import C


def shard_names(name: str, shards: int) -> list[str]:
    """The names of a queue's shards; a queue of one shard is plain and keeps its name."""
    return [name] if shards == 1 else [shard_name(name, i) for i in range(shards)]


class ShardRouter(Generic[C]):
    """Ids to ``crc32(id) mod N``; claims visit the shards in turn, each call starting one further than
    the last (so no shard starves); answers are summed; rates are split 1/N."""

    def __init__(self, cores: Sequence[C], name: str) -> None:
        if not 2 <= len(cores) <= MAX_SHARDS:
            raise ValueError(f"a sharded queue has 2 to {MAX_SHARDS} shards, got {len(cores)}")
        self.name = name
        self._cores = list(cores)
        self._next = 0  # the shard the next claim starts at
        self._wake = QueueKeys(name).wake  # the queue's own wake list, on a Cluster

    @property
    def cores(self) -> Sequence[C]:
        return self._cores

    def home(self, job_id: str) -> C:
        return self._cores[shard_of(job_id, len(self._cores))]

    def holders(self, job_id: str) -> Sequence[C]:
        return (self.home(job_id),)

    def of_lease(self, lease: Lease) -> C:
        return self.home(lease.id)

    def claim_order(self, request_id: str | None) -> Iterator[tuple[C, str | None]]:
        start, n = self._next, len(self._cores)
        self._next = (start + 1) % n
        for core in itertools.islice(itertools.cycle(self._cores), start, start + n):
            yield core, part_id(request_id, core.name)

    def part(self, request_id: str | None, core: C) -> str | None:
        return part_id(request_id, core.name)

    def queue_name(self, core: C) -> str:
        return self.name  # handlers and inspect see the queue's name, not the shard's

    def wake_keys(self, on_a_cluster: bool) -> list[str]:
        """Every shard's list (one BLPOP); on a Cluster (no BLPOP across slots) the queue's own, fed by
        ``extra_wake``."""
        return [self._wake] if on_a_cluster else [core.keys.wake for core in self._cores]

    def extra_wake(self, core: C, on_a_cluster: bool) -> str | None:
        return self._wake if on_a_cluster else None

    def shape_stats(self, each: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The shards' stats summed, each shard's own under ``"shards"``."""
        return {**summed_stats(each), "shards": list(each)}

    def rate_shares(self, rate: Rate | None) -> list[tuple[C, Rate | None]]:
        """1/N of the rate in each shard (burst rounded up): ids spread evenly, so the shares add up."""
        share = None if rate is None else rate.split(len(self._cores))
        return [(core, share) for core in self._cores]

    def whole_limits(self, first: Limits) -> Limits:
        """The first shard's limits, rates scaled back to the whole queue's."""
        n = len(self._cores)

        def whole(rate: Rate | None) -> Rate | None:
            return None if rate is None else Rate(rate.count, rate.period_ms // n, rate.burst * n)

        def whole_group(limits: GroupLimits) -> GroupLimits:
            return GroupLimits(limits.concurrency, whole(limits.rate))

        return Limits(
            paused=first.paused,
            rate=whole(first.rate),
            group_default=whole_group(first.group_default),
            groups={name: whole_group(limits) for name, limits in first.groups.items()},
        )

    def shard_counts(self) -> list[tuple[str, int]]:
        return [(self.name, len(self._cores))]
