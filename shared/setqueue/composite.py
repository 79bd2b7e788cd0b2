"""What sharded queues (one queue over N shards) and queue groups (several queues as one) share:
each lease, id or call goes to the member it belongs to."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import redis

from setqueue.client import ClusterWaiter, on_a_cluster, take_wake_token, until_due
from setqueue.flow import FLOW_STATS, GROUP_STATES, GroupInfo, Limits, Rate
from setqueue.interface import JobQueue, Shard
from setqueue.jobs import AckResult, FailOutcome, HistoryEntry, JobInfo, Lease, RenewOutcome, SweepResult, UnknownJob
from setqueue.keys import STATES, check_seconds, validate_job_id

I = TypeVar("I")  # noqa: E741 (an item)
K = TypeVar("K")  # a member: compared by identity
R = TypeVar("R")


def dispatch(items: Sequence[I], member_of: Callable[[I], K], call: Callable[[K, list[I]], Sequence[R]]) -> list[R]:
    """``call(member, its items)`` once per member; the results come back in the order of ``items``."""
    positions: dict[K, list[int]] = defaultdict(list)
    for j, item in enumerate(items):
        positions[member_of(item)].append(j)
    results: list[R | None] = [None] * len(items)
    for member, where in positions.items():
        for j, result in zip(where, call(member, [items[j] for j in where]), strict=True):
            results[j] = result
    return results  # type: ignore[return-value]  # every position was filled


def part_id(request_id: str | None, member: str) -> str | None:
    return None if request_id is None else f"{request_id}-{member}"


def summed_stats(each: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The members' ``stats()`` summed; the oldest pending age is the oldest of any."""
    total: dict[str, Any] = {name: sum(s[name] for s in each) for name in (*STATES, "results_kept", *FLOW_STATS)}
    total["oldest_pending_age_seconds"] = max(s["oldest_pending_age_seconds"] for s in each)
    by_priority: dict[int, int] = defaultdict(int)
    for s in each:
        for priority, n in s["todos_by_priority"].items():
            by_priority[priority] += n
    total["todos_by_priority"] = dict(by_priority)
    return total


class CompositeQueue:
    """A queue made of ``members``: options read from the first shard; leases go to ``_member_of``,
    ids to ``_holders_of``."""

    name: str
    members: Sequence[JobQueue]
    _waiter: ClusterWaiter | None = None  # made by a first wait on a Cluster

    def _member_of(self, lease: Lease) -> JobQueue:
        raise NotImplementedError

    def _holders_of(self, job_id: str) -> Sequence[JobQueue]:
        """The members that may hold ``job_id`` (a shard: exactly one)."""
        raise NotImplementedError

    def _made_claimable(self, n: int) -> None:
        """After ``n`` jobs became claimable again (their scripts woke the member's workers): what else to wake."""

    @property
    def shards(self) -> Sequence[Shard]:
        return [shard for member in self.members for shard in member.shards]

    @property
    def _first(self) -> Shard:
        return self.shards[0]

    @property
    def redis(self) -> redis.Redis:
        return self._first.redis

    @property
    def lease_seconds(self) -> float:
        return self._first.lease_seconds

    @property
    def retry_backoff_seconds(self) -> float:
        return self._first.retry_backoff_seconds

    @property
    def request_ttl_seconds(self) -> float:
        return self._first.request_ttl_seconds

    @property
    def wake_cap(self) -> int:
        return self._first.wake_cap

    def backoff_delay(self, attempt: int) -> float:
        return self._first.backoff_delay(attempt)

    def due_in(self) -> float | None:
        due = [d for m in self.members if (d := m.due_in()) is not None]
        return min(due) if due else None

    def wake_keys(self) -> list[str]:
        return [key for m in self.members for key in m.wake_keys()]

    def wait_for_work(self, timeout: float) -> bool:
        """As ``Queue.wait_for_work`` over every member: one BLPOP, or a ``ClusterWaiter`` across Cluster slots."""
        return until_due(self.due_in(), timeout, self._take_wake_token)

    def _take_wake_token(self, timeout: float) -> bool:
        keys = self.wake_keys()
        if len(keys) == 1 or not on_a_cluster(self.redis):
            return take_wake_token(self.redis, keys, timeout)
        if self._waiter is None:
            self._waiter = ClusterWaiter(self.redis, keys)
        return self._waiter.wait(timeout)

    # -- leases go back to the member they came from

    def renew(self, lease: Lease) -> bool:
        return self.renew_many([lease])[0]

    def renew_many(self, leases: Sequence[Lease]) -> list[bool]:
        return dispatch(leases, self._member_of, lambda m, part: m.renew_many(part))

    def renew_outcomes(self, leases: Sequence[Lease]) -> list[RenewOutcome]:
        return dispatch(leases, self._member_of, lambda m, part: m.renew_outcomes(part))

    def ack(self, lease: Lease, result: Any = None) -> bool:
        return self.ack_many([lease], results=[result])[0].acked

    def ack_many(
        self, leases: Sequence[Lease], *, results: Sequence[Any] | None = None, request_id: str | None = None
    ) -> list[AckResult]:
        values = list(results) if results is not None else [None] * len(leases)
        pairs = list(zip(leases, values, strict=True))
        return dispatch(
            pairs,
            lambda pair: self._member_of(pair[0]),
            lambda m, part: m.ack_many(
                [lease for lease, _ in part], results=[v for _, v in part], request_id=part_id(request_id, m.name)
            ),
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
        outcome = self._member_of(lease).fail(lease, reason, retry=retry, delay=delay, request_id=request_id)
        self._made_claimable(1 if outcome is FailOutcome.RETRIED else 0)
        return outcome

    def release(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[FailOutcome]:
        outcomes = dispatch(
            leases, self._member_of, lambda m, part: m.release(part, request_id=part_id(request_id, m.name))
        )
        self._made_claimable(outcomes.count(FailOutcome.RELEASED))
        return outcomes

    # -- ids go to the member that holds them

    def _found(self, job_id: str, call: Callable[[JobQueue], R | None]) -> R | None:
        validate_job_id(job_id)
        for member in self._holders_of(job_id):
            found = call(member)
            if found is not None:
                return found
        return None

    def inspect(self, job_id: str) -> JobInfo | None:
        return self._found(job_id, lambda m: m.inspect(job_id))

    def delete(self, job_id: str) -> str | None:
        return self._found(job_id, lambda m: m.delete(job_id))

    def cancel(self, job_id: str) -> str | None:
        return self._found(job_id, lambda m: m.cancel(job_id))

    def _holder(self, job_id: str) -> JobQueue | None:
        """The member that knows ``job_id``, or None."""
        holders = self._holders_of(validate_job_id(job_id))
        if len(holders) == 1:
            return holders[0]
        return next((m for m in holders if m.inspect(job_id) is not None), None)

    def history(self, job_id: str) -> list[HistoryEntry]:
        holder = self._holder(job_id)
        return [] if holder is None else holder.history(job_id)

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        holder = self._holder(job_id)
        if holder is None:
            raise UnknownJob(f"job {job_id!r} is not in queue {self.name!r}")
        return holder.result(job_id, timeout)

    async def result_async(self, job_id: str, timeout: float | None = None) -> Any:
        return await asyncio.to_thread(self.result, job_id, timeout)

    def results(self, job_ids: Iterable[str], timeout: float | None = None) -> dict[str, Any]:
        """Member by member, on each one's subscription (the time left shrinks as it goes)."""
        if timeout is not None:
            check_seconds("timeout", timeout)
        wanted = list(dict.fromkeys(job_ids))
        deadline = None if timeout is None else time.monotonic() + timeout
        by_member: dict[JobQueue, list[str]] = defaultdict(list)
        for job_id in wanted:
            holder = self._holder(job_id)
            if holder is None:
                raise UnknownJob(f"job {job_id!r} is not in queue {self.name!r}")
            by_member[holder].append(job_id)
        found: dict[str, Any] = {}
        for member, ids in by_member.items():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            found.update(member.results(ids, left))
        return {job_id: found[job_id] for job_id in wanted}

    def requeue_failed(self, ids: Iterable[str] | None = None, *, limit: int = 1000) -> int:
        """Every member's dead letters (up to ``limit`` each), or the ids given, each in its holder."""
        if ids is None:
            moved = sum(m.requeue_failed(limit=limit) for m in self.members)
        else:
            by_member: dict[JobQueue, list[str]] = defaultdict(list)
            for job_id in ids:
                for member in self._holders_of(validate_job_id(job_id)):
                    by_member[member].append(job_id)
            moved = sum(member.requeue_failed(part) for member, part in by_member.items())
        self._made_claimable(moved)
        return moved

    # -- all members

    def sweep(self, limit: int = 1000) -> SweepResult:
        results = [m.sweep(limit) for m in self.members]
        swept = SweepResult(
            [i for r in results for i in r.requeued],
            [i for r in results for i in r.dead_lettered],
            sum(r.done_trimmed for r in results),
        )
        self._made_claimable(len(swept.requeued))
        return swept

    def ping(self, *, record: bool = False) -> bool:
        return all([m.ping(record=record) for m in self.members])

    # -- flow control: every shard alike (ShardedQueue splits rates)

    def pause(self) -> bool:
        paused = [shard.pause() for shard in self.shards]
        return any(paused)

    def resume(self) -> bool:
        resumed = [shard.resume() for shard in self.shards]
        self._made_claimable(self.wake_cap)
        return any(resumed)

    def set_rate(self, rate: Rate | str | None, *, burst: int | None = None) -> None:
        for member in self.members:
            member.set_rate(rate, burst=burst)
        self._made_claimable(self.wake_cap)

    def set_group_limits(
        self,
        group: str | None = None,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        burst: int | None = None,
    ) -> None:
        for member in self.members:
            member.set_group_limits(group, concurrency=concurrency, rate=rate, burst=burst)
        self._made_claimable(self.wake_cap)

    def limits(self) -> Limits:
        return self.members[0].limits()

    def groups(self, most: int = 100) -> list[GroupInfo]:
        """Each member's groups merged by name: counts summed, the liveliest state."""
        merged: dict[str, GroupInfo] = {}
        for member in self.members:
            for info in member.groups(most):
                seen = merged.get(info.name)
                if seen is None:
                    merged[info.name] = info
                    continue
                state = min(seen.state, info.state, key=GROUP_STATES.index)
                merged[info.name] = dataclasses.replace(
                    seen, waiting=seen.waiting + info.waiting, running=seen.running + info.running, state=state
                )
        return list(merged.values())[:most]

    def close(self) -> None:
        if self._waiter is not None:
            self._waiter.close()
        for m in self.members:
            m.close()
