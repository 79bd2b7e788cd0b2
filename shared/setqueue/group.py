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
An enqueue goes to the first queue (as the creator's does); ``inspect``, ``delete`` and
``requeue_failed`` of an id look in every queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from setqueue.composite import CompositeQueue, part_id, summed_stats
from setqueue.interface import JobQueue
from setqueue.jobs import Lease


class QueueGroup(CompositeQueue):
    """Several named queues (each a plain or a sharded queue) in strict priority of their order
    (see the module's doc)."""

    def __init__(self, members: Sequence[JobQueue]) -> None:
        names = [m.name for m in members]
        if len(members) < 2 or len(set(names)) != len(names):
            raise ValueError(f"a queue group has two or more different queues, got {names}")
        self.members = list(members)
        self.by_name = {m.name: m for m in members}
        self.name = ",".join(names)

    @property
    def queues(self) -> Sequence[JobQueue]:
        return self.members

    def member(self, name: str) -> JobQueue:
        try:
            return self.by_name[name]
        except KeyError:
            raise ValueError(f"queue {name!r} is not one of {self.name}") from None

    def _member_of(self, lease: Lease) -> JobQueue:
        return self.member(lease.queue)

    def _holders_of(self, job_id: str) -> Sequence[JobQueue]:
        return self.members

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
        """As ``Queue.enqueue``, into the group's first queue."""
        return self.members[0].enqueue(
            ids, delay=delay, at=at, priority=priority, max_attempts=max_attempts, timeout=timeout, group=group
        )

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

    def stats(self) -> dict[str, Any]:
        """Each queue's ``stats()`` under ``"queues"``, and the states summed over them."""
        each = {m.name: m.stats() for m in self.members}
        return {**summed_stats(list(each.values())), "queues": each}
