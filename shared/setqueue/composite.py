"""What the queues made of other queues share: a sharded queue (one queue over N shards) and a
queue group (several named queues served as one) both hand each lease, id or call to the member
it belongs to."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from redis.cluster import RedisCluster

from setqueue.queue import ClusterAwareRedis

if TYPE_CHECKING:
    from setqueue.queue import Queue

I = TypeVar("I")  # noqa: E741 (an item)
K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


def dispatch(items: Sequence[I], member_of: Callable[[I], K], call: Callable[[K, list[I]], Sequence[R]]) -> list[R]:
    """``call(member, its items)`` once for each member the items belong to (``member_of``); the
    results (one per item) come back in the order of ``items``."""
    positions: dict[K, list[int]] = defaultdict(list)
    for j, item in enumerate(items):
        positions[member_of(item)].append(j)
    results: list[R | None] = [None] * len(items)
    for member, where in positions.items():
        for j, result in zip(where, call(member, [items[j] for j in where]), strict=True):
            results[j] = result
    return results  # type: ignore[return-value]  # every position was filled


def part_id(request_id: str | None, member: str) -> str | None:
    """The request id of one member's part of a call (None: the call has none)."""
    return None if request_id is None else f"{request_id}-{member}"


class SharedOptions:
    """The options of a queue made of others: its members share one set of settings, so they are
    read from the first one. ``primary`` is that first plain ``Queue`` (a group's first queue, or
    its first shard)."""

    primary: Queue

    @property
    def redis(self) -> Any:
        return self.primary.redis

    @property
    def lease_seconds(self) -> float:
        return self.primary.lease_seconds

    @property
    def retry_backoff_seconds(self) -> float:
        return self.primary.retry_backoff_seconds

    @property
    def request_ttl_seconds(self) -> float:
        return self.primary.request_ttl_seconds

    @property
    def wake_cap(self) -> int:
        return self.primary.wake_cap

    def backoff_delay(self, attempt: int) -> float:
        return self.primary.backoff_delay(attempt)


def sum_counts(counts: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """Counts per key (jobs per priority) summed over the members."""
    total: dict[int, int] = defaultdict(int)
    for each in counts:
        for key, n in each.items():
            total[key] += n
    return dict(total)


# On a Redis Cluster one BLPOP cannot span the wake lists of several slots: the waiting polls them
# this often instead (an idle worker's pick-up then takes up to this long, not a millisecond).
CLUSTER_WAKE_POLL_SECONDS = 0.05


def wait_on_wake_lists(client: Any, keys: Sequence[str], timeout: float) -> bool:
    """Block until one of the wake lists ``keys`` has a token (taking it) or ``timeout`` passes: one
    BLPOP over all of them, or on a Redis Cluster (whose BLPOP takes keys of one slot only) a poll of
    each, then a short BLPOP on the first, in turn."""
    if not _on_a_cluster(client):
        return client.blpop(list(keys), timeout=max(timeout, 0.001)) is not None
    deadline = time.monotonic() + timeout
    while True:
        if any(client.lpop(key) is not None for key in keys[1:]):
            return True
        remaining = deadline - time.monotonic()
        if client.blpop([keys[0]], timeout=max(min(remaining, CLUSTER_WAKE_POLL_SECONDS), 0.001)) is not None:
            return True
        if remaining <= CLUSTER_WAKE_POLL_SECONDS:
            return False


def _on_a_cluster(client: Any) -> bool:
    if isinstance(client, ClusterAwareRedis):
        return client.cluster_client() is not None
    return isinstance(client, RedisCluster)
