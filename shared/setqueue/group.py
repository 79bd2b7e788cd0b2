"""Several named queues served as one (``QUEUE_NAME=emails,reports``): one worker, or one cleaner,
for all of them.

The selection rule is **strict priority in list order**: a claim takes what it can from the first
queue, then from the next, and so on; a later queue gets a worker's slots only while every queue
before it is empty. Why strict and not weights: it is the rule of the job priorities within a queue
(a later queue is a lower priority), it is predictable (an urgent queue is never slowed by a busy
background one), and whoever wants a share for each queue runs a worker pool per queue, which
also scales them apart. The price is the same as for priorities: a queue that is never empty
starves the ones after it (the per-queue queue-wait and oldest-age gauges show it).

Each lease names its queue (``lease.queue``); acks, fails, renewals and releases go to that queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from setqueue.composite import CompositeQueue, part_id, summed_stats
from setqueue.queue import JobInfo, Lease, Queue
from setqueue.sharded import ShardedQueue, open_queue

Member = Queue | ShardedQueue


class QueueGroup(CompositeQueue):
    """The worker's and the cleaner's side of the ``Queue`` API over several named queues, in strict
    priority of their order (see the module's doc)."""

    def __init__(self, members: Sequence[Member]) -> None:
        names = [m.name for m in members]
        if len(members) < 2 or len(set(names)) != len(names):
            raise ValueError(f"a queue group has two or more different queues, got {names}")
        self.members = list(members)
        self.by_name = {m.name: m for m in members}
        self.name = ",".join(names)
        first = members[0]
        self.primary = first.primary if isinstance(first, ShardedQueue) else first

    def member(self, name: str) -> Member:
        try:
            return self.by_name[name]
        except KeyError:
            raise ValueError(f"queue {name!r} is not one of {self.name}") from None

    def _member_of(self, lease: Lease) -> Member:
        return self.member(lease.queue)

    # -- workers ------------------------------------------------------------------------------------

    def claim(self, count: int = 1, *, request_id: str | None = None) -> list[Lease]:
        """Up to ``count`` jobs: all the first queue has (up to count), then the next queue's..."""
        if count < 1:
            raise ValueError("count must be at least 1")
        leases: list[Lease] = []
        for member in self.members:
            leases += member.claim(count - len(leases), request_id=part_id(request_id, member.name))
            if len(leases) == count:
                break
        return leases

    # -- the cleaner and operators ----------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Each queue's ``stats()`` under ``"queues"``, and the states summed over them."""
        each = {m.name: m.stats() for m in self.members}
        return {**summed_stats(list(each.values())), "queues": each}

    def inspect(self, job_id: str, queue: str) -> JobInfo | None:
        return self.member(queue).inspect(job_id)


QueueLike = Queue | ShardedQueue | QueueGroup


def open_queues(url: str, names: Sequence[str], shards: int = 1, **options: Any) -> QueueLike:
    """What QUEUE_NAME and QUEUE_SHARDS name, on one client: a ``Queue`` (one name, one shard), a
    ``ShardedQueue`` (one name, N shards) or a ``QueueGroup`` of those (several names)."""
    if not names:
        raise ValueError("no queue name")
    first = open_queue(url, names[0], shards, **options)
    if len(names) == 1:
        return first
    client = first.redis
    return QueueGroup([first, *(open_queue(url, name, shards, client=client, **options) for name in names[1:])])


def primary(queue: QueueLike) -> Queue:
    """The plain ``Queue`` that stands for ``queue`` where one is needed (its first queue's first shard)."""
    return queue if isinstance(queue, Queue) else queue.primary
