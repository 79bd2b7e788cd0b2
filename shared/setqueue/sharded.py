"""One logical queue stored as N shards ``Q~i``, each a whole ``Queue`` under its own hash tag
(docs/guide.md#shards). An id always lives in shard ``crc32(id) mod N``, so scripts stay
single-slot and a lease finds its shard from its id alone."""

from __future__ import annotations

import contextlib
import dataclasses
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis

from setqueue.client import OptionError, on_a_cluster
from setqueue.composite import CompositeQueue, part_id, summed_stats
from setqueue.flow import GroupLimits, Limits, Rate
from setqueue.interface import JobQueue
from setqueue.jobs import JobInfo, Lease, job_options
from setqueue.keys import MAX_SHARDS, QueueKeys, validate_group
from setqueue.queue import Queue, job_items


def shard_name(name: str, shard: int) -> str:
    return f"{name}~{shard}"


def shard_names(name: str, shards: int) -> list[str]:
    return [name] if shards == 1 else [shard_name(name, i) for i in range(shards)]


def shard_of(job_id: str, shards: int) -> int:
    return zlib.crc32(job_id.encode("utf-8")) % shards


class ShardedQueue(CompositeQueue):
    """The API of ``Queue`` over 2 to MAX_SHARDS shards."""

    def __init__(self, shards: Sequence[Queue], name: str) -> None:
        if not 2 <= len(shards) <= MAX_SHARDS:
            raise ValueError(f"a sharded queue has 2 to {MAX_SHARDS} shards, got {len(shards)}")
        self.name = name
        self.members = list(shards)
        self._shards = list(shards)
        self._next = 0  # the shard the next claim starts at
        self._wake = QueueKeys(name).wake  # on a Cluster (wake_keys)

    @property
    def queues(self) -> Sequence[JobQueue]:
        return (self,)

    @property
    def shards(self) -> Sequence[Queue]:
        return self._shards

    def _shard(self, job_id: str) -> Queue:
        return self._shards[shard_of(job_id, len(self._shards))]

    def _member_of(self, lease: Lease) -> Queue:
        return self._shard(lease.id)

    def _holders_of(self, job_id: str) -> Sequence[JobQueue]:
        return (self._shard(job_id),)

    def ping(self, *, record: bool = False) -> bool:
        """Every shard answers and the shard count holds (``check_shards``)."""
        answered = all([shard.ping() for shard in self._shards])
        self.check_shards(record=record)
        return answered

    def check_shards(self, *, record: bool) -> None:
        """OptionError (shards) for a queue opened with another shard count, or holding jobs unsharded:
        ids would change place. ``record``: write the count if none is."""
        plain = QueueKeys(self.name)
        stored: str | None = self.redis.get(plain.shards)  # type: ignore[assignment]  # decoded
        if stored is None:
            if self.redis.exists(plain.todos, plain.in_progress, plain.scheduled):
                raise OptionError(
                    "shards", f"queue {self.name} holds jobs unsharded: drain it (or use a new name) first"
                )
            if not record:
                return
            self.redis.set(plain.shards, len(self._shards), nx=True)
            stored = self.redis.get(plain.shards)  # type: ignore[assignment]
        if int(stored or 0) != len(self._shards):
            raise OptionError(
                "shards",
                f"queue {self.name} has {stored} shards, not {len(self._shards)}: "
                "drain it (or use a new name) before changing that",
            )

    # -- waking idle workers

    def wake_keys(self) -> list[str]:
        """Every shard's list (one BLPOP); on a Cluster (no BLPOP across slots) the queue's own, fed by
        ``_made_claimable``."""
        return [self._wake] if self._on_a_cluster() else super().wake_keys()

    def _on_a_cluster(self) -> bool:
        return on_a_cluster(self.redis)

    def _made_claimable(self, n: int) -> None:
        """On a Cluster, wake up to ``n`` idle workers of any shard. Outside the script: a lost wake-up
        delays a pick-up by at most IDLE_WAIT_SECONDS, never loses a job."""
        if n <= 0 or not self._on_a_cluster():
            return
        cap = self.wake_cap
        # Out of memory refuses the LPUSH: only a hint is lost.
        with contextlib.suppress(redis.OutOfMemoryError), self.redis.pipeline(transaction=True) as pipe:
            pipe.lpush(self._wake, *["1"] * min(n, cap))
            pipe.ltrim(self._wake, 0, cap - 1)
            pipe.execute()

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
    ) -> int:
        """As ``Queue.enqueue``, each id to its shard; everything is checked before any shard is written."""
        job_options(max_attempts, timeout)
        if group is not None:
            validate_group(group)
        by_shard: dict[int, list[tuple[str, str | None]]] = defaultdict(list)
        for item in job_items(ids, self._first.payload_max_bytes):
            by_shard[shard_of(item[0], len(self._shards))].append(item)
        added = 0
        for shard, part in by_shard.items():
            jobs: Mapping[str, str | None] | list[str] = (
                dict(part) if isinstance(ids, Mapping) else [job_id for job_id, _ in part]
            )
            added += self._shards[shard].enqueue(
                jobs, delay=delay, at=at, priority=priority, max_attempts=max_attempts, timeout=timeout, group=group
            )
        # As enqueue.lua: jobs due later wake one worker.
        self._made_claimable(added if delay is None and at is None else min(added, 1))
        return added

    # -- workers

    def claim(self, count: int = 1, *, request_id: str | None = None) -> list[Lease]:
        """Up to ``count`` jobs from the shards in turn, starting one further than the last call."""
        if count < 1:
            raise ValueError("count must be at least 1")
        start, n = self._next, len(self._shards)
        self._next = (start + 1) % n
        leases: list[Lease] = []
        for step in range(n):
            queue = self._shards[(start + step) % n]
            leases += queue.claim(count - len(leases), request_id=part_id(request_id, queue.name))
            if len(leases) == count:
                break
        # Handlers see the queue's name.
        return [dataclasses.replace(lease, queue=self.name) for lease in leases]

    # -- flow control: each shard enforces its share

    def set_rate(self, rate: Rate | str | None, *, burst: int | None = None) -> None:
        """As ``Queue.set_rate`` for the whole queue: each shard enforces 1/N in its own slot (burst rounded
        up); ids spread evenly, so the shares add up while every shard has work."""
        share = self._share(rate, burst)
        for shard in self._shards:
            shard.set_rate(share)
        self._made_claimable(self.wake_cap)

    def _share(self, rate: Rate | str | None, burst: int | None) -> Rate | None:
        shared = Rate.given(rate, burst)
        return None if shared is None else shared.split(len(self._shards))

    def set_group_limits(
        self,
        group: str | None = None,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        burst: int | None = None,
    ) -> None:
        """As ``Queue.set_group_limits``: each shard enforces 1/N of the rate and the whole concurrency."""
        share = self._share(rate, burst)
        for shard in self._shards:
            shard.set_group_limits(group, concurrency=concurrency, rate=share)
        self._made_claimable(self.wake_cap)

    def limits(self) -> Limits:
        """The first shard's limits, rates scaled back to the whole queue's."""
        first, n = self._shards[0].limits(), len(self._shards)

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

    # -- operators

    def stats(self) -> dict[str, Any]:
        """``Queue.stats`` summed over the shards, each shard's own under ``"shards"``."""
        each = [q.stats() for q in self._shards]
        return {**summed_stats(each), "shards": each}

    def inspect(self, job_id: str) -> JobInfo | None:
        found = super().inspect(job_id)
        return None if found is None else dataclasses.replace(found, queue=self.name)
