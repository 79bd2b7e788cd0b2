"""Several named queues served as one (docs/guide.md#several-queues)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from setqueue.composite import CompositeQueue, part_id, summed_stats
from setqueue.interface import JobQueue
from setqueue.jobs import Lease


class QueueGroup(CompositeQueue):
    """Plain or sharded queues in strict priority of their order. Leases go back to ``lease.queue``; id
    lookups search every queue."""

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
        """Up to ``count`` jobs: all the first queue has, then the next queue's..."""
        if count < 1:
            raise ValueError("count must be at least 1")
        leases: list[Lease] = []
        for member in self.members:
            leases += member.claim(count - len(leases), request_id=part_id(request_id, member.name))
            if len(leases) == count:
                break
        return leases

    def stats(self) -> dict[str, Any]:
        """Each queue's ``stats()`` under ``"queues"``, and the states summed."""
        each = {m.name: m.stats() for m in self.members}
        return {**summed_stats(list(each.values())), "queues": each}
