"""What the queues made of other queues share: a sharded queue (one queue over N shards) and a
queue group (several named queues served as one) both hand each lease, id or call to the member
it belongs to."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, TypeVar

from redis.cluster import RedisCluster

from setqueue.keys import STATES
from setqueue.queue import (
    AckResult,
    ClusterAwareRedis,
    FailOutcome,
    Lease,
    Queue,
    SweepResult,
    take_wake_token,
    until_due,
)

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
    _waiter: ClusterWaiter | None = None  # made by the first wait on a Redis Cluster

    def _member_of(self, lease: Lease) -> Any:
        raise NotImplementedError

    def _made_claimable(self, n: int) -> None:
        """After a call that made ``n`` jobs claimable again (a retry, a release, a sweep's requeue;
        their scripts woke the member's idle workers): what else should wake (nothing, here)."""

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
        any of them is due: one BLPOP over every member's wake list, or on a Redis Cluster (whose
        BLPOP takes the keys of one slot), a ``ClusterWaiter``."""
        return until_due(self.due_in(), timeout, self._take_wake_token)

    def _take_wake_token(self, timeout: float) -> bool:
        keys = self.wake_keys()
        if len(keys) == 1 or not on_a_cluster(self.redis):
            return take_wake_token(self.redis, keys, timeout)
        if self._waiter is None:
            self._waiter = ClusterWaiter(self.redis, keys)
        return self._waiter.wait(timeout)

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
        self._made_claimable(1 if outcome is FailOutcome.RETRIED else 0)
        return outcome

    def release(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[FailOutcome]:
        outcomes = dispatch(
            leases, self._member_of, lambda m, part: m.release(part, request_id=part_id(request_id, m.name))
        )
        self._made_claimable(outcomes.count(FailOutcome.RELEASED))
        return outcomes

    def sweep(self, limit: int = 1000) -> SweepResult:
        """Every member's sweep (each examines up to ``limit`` ids)."""
        results = [m.sweep(limit) for m in self.members]
        swept = SweepResult(
            [i for r in results for i in r.requeued],
            [i for r in results for i in r.dead_lettered],
            sum(r.done_trimmed for r in results),
        )
        self._made_claimable(len(swept.requeued))
        return swept

    def ping(self) -> bool:
        return all(m.ping() for m in self.members)

    def close(self) -> None:
        if self._waiter is not None:
            self._waiter.close()
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


# On a Redis Cluster, the longest one BLPOP of a ClusterWaiter blocks: a BLPOP cannot be called off,
# so this bounds how long one outlives the wait it was sent for.
CLUSTER_WAKE_SLICE_SECONDS = 0.25


class ClusterWaiter:
    """Waits on wake lists that live in different slots of a Redis Cluster, where one BLPOP takes
    keys of one slot only: one BLPOP per list at once, each in a thread of its own, and the first
    token wakes the wait.

    A BLPOP cannot be called off, so each blocks for at most CLUSTER_WAKE_SLICE_SECONDS and the
    wait sends the next one. One still blocked when a wait returns is kept, not sent again: the
    token it may take then is what the next wait sees first, so no token is taken for nothing."""

    def __init__(self, client: Any, keys: Sequence[str]) -> None:
        self._client = client
        self._keys = list(keys)
        self._pool = ThreadPoolExecutor(max_workers=len(self._keys), thread_name_prefix="setqueue-wake")
        self._blocked: dict[str, Future[Any]] = {}

    def wait(self, timeout: float) -> bool:
        """True when a token was taken from any list, False when ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            for key in self._keys:
                if key not in self._blocked:
                    slice_ = max(min(remaining, CLUSTER_WAKE_SLICE_SECONDS), 0.001)
                    self._blocked[key] = self._pool.submit(self._client.blpop, [key], timeout=slice_)
            finished, _ = futures_wait(self._blocked.values(), max(remaining, 0), FIRST_COMPLETED)
            woken = False
            for key, future in list(self._blocked.items()):
                if future in finished:
                    del self._blocked[key]
                    woken = future.result() is not None or woken  # a Redis error is the caller's
            if woken:
                return True
            if deadline - time.monotonic() <= 0:
                return False

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def on_a_cluster(client: Any) -> bool:
    """Whether ``client`` runs on a Redis Cluster (connects to find out)."""
    if isinstance(client, ClusterAwareRedis):
        return client.cluster_client() is not None
    return isinstance(client, RedisCluster)
