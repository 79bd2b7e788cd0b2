"""What the queues made of other queues share: a sharded queue (one queue over N shards) and a
queue group (several named queues served as one) both hand each lease, id or call to the member
it belongs to."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

from redis.cluster import RedisCluster

from setqueue.keys import STATES
from setqueue.queue import AckResult, ClusterAwareRedis, FailOutcome, Lease, Queue, SweepResult

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


class CompositeQueue:
    """What a queue made of others (``members``) does alike whatever it is made of: its options
    (the members share one set of settings, read from ``primary``, the first plain ``Queue``: a
    group's first queue, or the first shard), waiting for work on all of them, sweeping them all,
    and handing each lease to the member it came from (``_member_of``)."""

    primary: Queue
    members: Sequence[Any]  # Queue or ShardedQueue: each has the Queue API used below

    def _member_of(self, lease: Lease) -> Any:
        raise NotImplementedError

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

    def due_in(self) -> float | None:
        """Seconds until the next scheduled job of any member is due, as the last claims saw it."""
        due = [d for m in self.members if (d := m.due_in()) is not None]
        return min(due) if due else None

    def wake_keys(self) -> list[str]:
        return [key for m in self.members for key in m.wake_keys()]

    def wait_for_work(self, timeout: float) -> bool:
        """Block until an enqueue to any member wakes us, ``timeout`` passes, or a scheduled job of
        any of them is due (see ``wait_on_wake_lists``)."""
        due_in = self.due_in()
        if due_in is not None:
            timeout = min(timeout, due_in)
            if timeout <= 0:
                return True
        return wait_on_wake_lists(self.redis, self.wake_keys(), timeout)

    def renew(self, lease: Lease) -> bool:
        return self.renew_many([lease])[0]

    def renew_many(self, leases: Sequence[Lease]) -> list[bool]:
        return dispatch(leases, self._member_of, lambda m, part: m.renew_many(part))

    def ack(self, lease: Lease) -> bool:
        return self.ack_many([lease])[0].acked

    def ack_many(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[AckResult]:
        return dispatch(
            leases, self._member_of, lambda m, part: m.ack_many(part, request_id=part_id(request_id, m.name))
        )

    def fail(
        self,
        lease: Lease,
        reason: str = "",
        *,
        retry: bool = True,
        delay: float | None = None,
        request_id: str | None = None,
    ) -> FailOutcome:
        outcome: FailOutcome = self._member_of(lease).fail(
            lease, reason, retry=retry, delay=delay, request_id=request_id
        )
        return outcome

    def release(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[FailOutcome]:
        return dispatch(
            leases, self._member_of, lambda m, part: m.release(part, request_id=part_id(request_id, m.name))
        )

    def sweep(self, limit: int = 1000) -> SweepResult:
        """Every member's sweep (each examines up to ``limit`` ids)."""
        results = [m.sweep(limit) for m in self.members]
        return SweepResult(
            [i for r in results for i in r.requeued],
            [i for r in results for i in r.dead_lettered],
            sum(r.done_trimmed for r in results),
        )

    def ping(self) -> bool:
        return all(m.ping() for m in self.members)

    def close(self) -> None:
        for m in self.members:
            m.close()


def summed_stats(each: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The members' ``stats()`` as one: every state and the jobs per priority summed, the oldest
    pending age the oldest of any member."""
    total: dict[str, Any] = {state: sum(s[state] for s in each) for state in STATES}
    total["oldest_pending_age_seconds"] = max(s["oldest_pending_age_seconds"] for s in each)
    by_priority: dict[int, int] = defaultdict(int)
    for s in each:
        for priority, n in s["todos_by_priority"].items():
            by_priority[priority] += n
    total["todos_by_priority"] = dict(by_priority)
    return total


# On a Redis Cluster one BLPOP cannot span the wake lists of several slots: waiting on those of
# several queues polls them this often instead (an idle worker's pick-up then takes up to this long,
# not a millisecond). A sharded queue has one list for all its shards there (ShardedQueue.wake_keys).
CLUSTER_WAKE_POLL_SECONDS = 0.05


def wait_on_wake_lists(client: Any, keys: Sequence[str], timeout: float) -> bool:
    """Block until one of the wake lists ``keys`` has a token (taking it) or ``timeout`` passes: one
    BLPOP over all of them, or on a Redis Cluster (whose BLPOP takes keys of one slot only), for
    several, a poll of each, then a short BLPOP on the first, in turn."""
    if len(keys) == 1 or not on_a_cluster(client):
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


def on_a_cluster(client: Any) -> bool:
    """Whether ``client`` runs on a Redis Cluster (connects to find out)."""
    if isinstance(client, ClusterAwareRedis):
        return client.cluster_client() is not None
    return isinstance(client, RedisCluster)
