"""What the queues made of other queues share: a sharded queue (one queue over N shards) and a
queue group (several named queues served as one) both hand each lease, id or call to the member
it belongs to."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

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
