"""Random interleavings of every queue operation, lease expiry, due times passing, result lookups and
limits, checked against a model after every step (hypothesis, real Redis).

Enqueues take each identity mode: "ignore" leaves a known id alone, "replace" re-places a waiting one
as the call's (not counted as new), "rerun" starts an ended one afresh (counted).

Invariants: every known id is in exactly one state, and the states hold exactly the model's ids; a
result is what the handler returned, or says how the job ended; todos is in the model's line order
(priority, then place: enqueue, coming due and a retry give the next place, a release or a lost
lease keeps the old one) and a claim takes its front; a claim's lock exists exactly while unexpired
and owning a job in in_progress, and counts those jobs; an operation succeeds exactly when its lease
owns the id. Limits: a paused claim takes nothing; a claim takes no more than the rate allows;
a group never runs more than its concurrency; a claim takes each group's front (without groups, the
whole line's) and takes something whenever a job could start; check_groups holds.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from setqueue import FailOutcome, JobFailed, Lease, Queue, UnknownJob
from tests.support import RedisServer, queue_members
from tests.support.limits import check_groups

IDS = st.sampled_from([f"id{i}" for i in range(8)])
PRIORITIES = st.integers(-2, 2)
GROUPS = st.sampled_from([None, None, "g1", "g2", "g3"])
MAX_ATTEMPTS = 3


@dataclass
class Model:
    state: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)  # id -> token of the current claim
    lock_alive: dict[str, bool] = field(default_factory=dict)  # token -> its lock has not expired
    due: dict[str, int] = field(default_factory=dict)  # scheduled ids whose due time has passed -> that time
    priority: dict[str, int] = field(default_factory=dict)
    place: dict[str, int] = field(default_factory=dict)  # id -> its place in line (todos, in_progress)
    places_given: int = 0
    result: dict[str, object] = field(default_factory=dict)  # done id -> what its handler returned
    group: dict[str, str | None] = field(default_factory=dict)  # id -> its job group
    paused: bool = False
    concurrency: int | None = None  # every group's default
    own_concurrency: dict[str, int | None] = field(default_factory=dict)  # a group's own
    burst: int | None = None  # the queue's rate: 1/h with this burst (no refill in a test's time)
    started_under_rate: int = 0  # jobs claimed since the rate was set

    def limit_of(self, group: str) -> int | None:
        return self.own_concurrency.get(group, self.concurrency)

    def running(self, group: str) -> int:
        return sum(1 for i, s in self.state.items() if s == "in_progress" and self.group.get(i) == group)

    def tokens(self) -> float:
        return float("inf") if self.burst is None else max(0, self.burst - self.started_under_rate)

    def could_start(self) -> bool:
        if self.paused or self.tokens() < 1:
            return False
        for job_id in self.line():
            group = self.group.get(job_id)
            limit = None if group is None else self.limit_of(group)
            if limit is None or self.running(group) < limit:  # type: ignore[arg-type]
                return True
        return False

    def join_line(self, job_id: str) -> None:
        self.places_given += 1
        self.place[job_id] = self.places_given
        self.state[job_id] = "todos"

    def line(self) -> list[str]:
        waiting = [i for i, s in self.state.items() if s == "todos"]
        return sorted(waiting, key=lambda i: (-self.priority[i], self.place[i]))

    def promote_due(self) -> None:
        """As claim and sweep do: due scheduled jobs join the line, in due-time order."""
        for job_id in sorted(self.due, key=self.due.__getitem__):
            self.join_line(job_id)
        self.due.clear()

    def owns(self, lease: Lease) -> bool:
        return self.state.get(lease.id) == "in_progress" and self.owner.get(lease.id) == lease.token

    def leave_in_progress(self, job_id: str, state: str) -> None:
        self.state[job_id] = state
        self.owner.pop(job_id, None)

    def held(self, token: str) -> int:
        return sum(1 for i, t in self.owner.items() if t == token and self.state[i] == "in_progress")


def make_machine(url: str) -> type[RuleBasedStateMachine]:
    class QueueMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.q = Queue.from_url(
                url,
                name=f"prop-{uuid.uuid4().hex[:10]}",
                lease_seconds=60,
                max_attempts=MAX_ATTEMPTS,
                retry_backoff_seconds=0,  # without an explicit delay, retries go straight to todos
            )
            self.client = redis.Redis.from_url(url, decode_responses=True)
            self.model = Model()
            self.leases: list[Lease] = []

        @initialize()
        def start(self) -> None:
            pass

        def teardown(self) -> None:
            self.q.close()
            self.client.close()

        def pick(self, index: int) -> Lease | None:
            return self.leases[index % len(self.leases)] if self.leases else None

        @rule(
            ids=st.lists(IDS, max_size=4),
            later=st.booleans(),
            priority=PRIORITIES,
            group=GROUPS,
            mode=st.sampled_from(["ignore", "ignore", "replace", "rerun"]),
        )
        def enqueue(self, ids: list[str], later: bool, priority: int, group: str | None, mode: str) -> None:
            m = self.model
            unique = list(dict.fromkeys(ids))
            new = [i for i in unique if i not in m.state]
            replaced = [i for i in unique if mode == "replace" and m.state.get(i) in ("todos", "scheduled")]
            rerun = [i for i in unique if mode == "rerun" and m.state.get(i) in ("done", "failed", "cancelled")]
            delay = 3600 if later else None
            assert self.q.enqueue(ids, delay=delay, priority=priority, group=group, if_exists=mode) == len(new + rerun)
            for i in unique:
                if i not in new + replaced + rerun:
                    continue
                m.group[i] = group
                m.priority[i] = priority
                m.due.pop(i, None)
                if i not in replaced:  # a new job, or a rerun: a fresh start
                    m.attempts[i] = 0
                    m.result.pop(i, None)
                if later:
                    m.state[i] = "scheduled"
                else:
                    m.join_line(i)

        @rule(job_id=IDS)
        def come_due(self, job_id: str) -> None:
            if self.model.state.get(job_id) == "scheduled" and job_id not in self.model.due:
                due = len(self.model.due) + 1  # a time long past, later than the others that came due
                self.client.zadd(self.q.keys.scheduled, {job_id: due})  # what time does, on demand
                self.model.due[job_id] = due

        @rule(job_id=IDS)
        def delete(self, job_id: str) -> None:
            assert self.q.delete(job_id) == self.model.state.get(job_id)
            if job_id in self.model.state:
                del self.model.state[job_id]
                self.model.result.pop(job_id, None)
                self.model.owner.pop(job_id, None)
                self.model.attempts.pop(job_id, None)
                self.model.due.pop(job_id, None)

        @rule(count=st.integers(1, 4))
        def claim(self, count: int) -> None:
            m = self.model
            m.promote_due()
            could_start = m.could_start()
            line = m.line()
            leases = self.q.claim(count)
            ids = [lease.id for lease in leases]
            if not any(m.group.get(i) for i in m.state):
                assert ids == line[: int(min(count, m.tokens()))] if not m.paused else ids == []
            assert len(ids) <= min(count, m.tokens())
            if m.paused:
                assert ids == []
            if could_start:
                assert ids, "a job could start and the claim took none"
            for group in {m.group.get(i) for i in ids}:
                own = [i for i in ids if m.group.get(i) == group]
                assert own == [i for i in line if m.group.get(i) == group][: len(own)]  # its group's front
                limit = None if group is None else m.limit_of(group)
                if limit is not None:
                    assert m.running(group) + len(own) <= limit  # type: ignore[arg-type]
            if m.burst is not None:
                m.started_under_rate += len(ids)
            for lease in leases:
                assert lease.priority == self.model.priority[lease.id]
                self.model.state[lease.id] = "in_progress"
                self.model.attempts[lease.id] += 1
                assert lease.attempt == self.model.attempts[lease.id]
                self.model.owner[lease.id] = lease.token
                self.model.lock_alive[lease.token] = True
            self.leases += leases

        @rule(index=st.integers(0, 100))
        def expire(self, index: int) -> None:
            lease = self.pick(index)
            if lease is not None and self.model.owns(lease):
                self.client.delete(self.q.keys.lock(lease.token))  # what the TTL does, on demand
                self.model.lock_alive[lease.token] = False  # for every job of that claim

        @rule(index=st.integers(0, 100))
        def renew(self, index: int) -> None:
            lease = self.pick(index)
            if lease is not None:
                assert self.q.renew(lease) == (self.model.owns(lease) and self.model.lock_alive[lease.token])

        @rule(index=st.integers(0, 100), value=st.none() | st.integers() | st.text(max_size=5) | st.binary(max_size=5))
        def ack(self, index: int, value: object) -> None:
            lease = self.pick(index)
            if lease is None:
                return
            expected = self.model.owns(lease)
            assert self.q.ack(lease, value) == expected
            if expected:
                self.model.leave_in_progress(lease.id, "done")
                self.model.result[lease.id] = value

        @rule(job_id=IDS)
        def cancel(self, job_id: str) -> None:
            before = self.model.state.get(job_id)
            assert self.q.cancel(job_id) == before
            if before in ("todos", "scheduled", "in_progress"):
                self.model.leave_in_progress(job_id, "cancelled")
                self.model.due.pop(job_id, None)

        @rule(job_id=IDS)
        def look_for_the_result(self, job_id: str) -> None:
            state = self.model.state.get(job_id)
            if state == "done":
                assert self.q.result(job_id, timeout=0) == self.model.result[job_id]
            elif state in ("failed", "cancelled"):
                with pytest.raises(JobFailed) as failed:
                    self.q.result(job_id, timeout=0)
                assert failed.value.state == state
            elif state is None:
                with pytest.raises(UnknownJob):
                    self.q.result(job_id, timeout=0)
            else:
                with pytest.raises(TimeoutError):
                    self.q.result(job_id, timeout=0)

        @rule(index=st.integers(0, 100), retry=st.booleans(), later=st.booleans())
        def fail(self, index: int, retry: bool, later: bool) -> None:
            lease = self.pick(index)
            if lease is None:
                return
            outcome = self.q.fail(lease, "boom", retry=retry, delay=3600 if later else None)
            if not self.model.owns(lease):
                assert outcome is FailOutcome.STALE
            elif retry and self.model.attempts[lease.id] < MAX_ATTEMPTS:
                assert outcome is FailOutcome.RETRIED
                self.model.leave_in_progress(lease.id, "scheduled")
                if not later:
                    self.model.join_line(lease.id)  # a retry goes to the back
            else:
                assert outcome is FailOutcome.DEAD
                self.model.leave_in_progress(lease.id, "failed")

        @rule(index=st.integers(0, 100))
        def release(self, index: int) -> None:
            lease = self.pick(index)
            if lease is None:
                return
            expected = self.model.owns(lease)
            assert self.q.release([lease]) == [FailOutcome.RELEASED if expected else FailOutcome.STALE]
            if expected:
                self.model.leave_in_progress(lease.id, "todos")  # its old place
                self.model.attempts[lease.id] -= 1

        @rule()
        def sweep(self) -> None:
            expired = {
                i
                for i, s in self.model.state.items()
                if s == "in_progress" and not self.model.lock_alive[self.model.owner[i]]
            }
            result = self.q.sweep()
            self.model.promote_due()
            assert set(result.requeued) | set(result.dead_lettered) == expired
            for i in result.requeued:
                assert self.model.attempts[i] < MAX_ATTEMPTS
                self.model.leave_in_progress(i, "todos")  # its old place
            for i in result.dead_lettered:
                assert self.model.attempts[i] >= MAX_ATTEMPTS
                self.model.leave_in_progress(i, "failed")

        @rule()
        def pause(self) -> None:
            assert self.q.pause() == (not self.model.paused)
            self.model.paused = True

        @rule()
        def resume(self) -> None:
            assert self.q.resume() == self.model.paused
            self.model.paused = False

        @rule(burst=st.none() | st.integers(1, 6))
        def limit_rate(self, burst: int | None) -> None:
            self.q.set_rate(None if burst is None else "1/h", burst=burst)
            if burst is None or self.model.burst is None:
                self.model.started_under_rate = 0  # a rate removed forgets what it counted
            self.model.burst = burst

        @rule(group=st.sampled_from([None, "g1", "g2"]), concurrency=st.none() | st.integers(1, 2))
        def limit_groups(self, group: str | None, concurrency: int | None) -> None:
            self.q.set_group_limits(group, concurrency=concurrency)
            if group is None:
                self.model.concurrency = concurrency
            elif concurrency is None:
                self.model.own_concurrency.pop(group, None)
            else:
                self.model.own_concurrency[group] = concurrency

        @invariant()
        def groups_kept_in_step(self) -> None:
            check_groups(self.client, self.q.keys)

        @invariant()
        def sets_match_the_model(self) -> None:
            actual = {state: set(ids) for state, ids in queue_members(self.client, self.q.keys).items()}
            seen: dict[str, str] = {}
            for state, ids in actual.items():
                for i in ids:
                    assert i not in seen, f"{i} is in both {seen[i]} and {state}"
                    seen[i] = state
            assert seen == self.model.state
            assert queue_members(self.client, self.q.keys)["todos"] == self.model.line()
            stats = self.q.stats()
            assert sum(int(stats[s]) for s in actual) == len(self.model.state)

        @invariant()
        def locks_only_for_live_claims(self) -> None:
            locks = {k.rsplit("lock:", 1)[1]: k for k in self.client.scan_iter(match=self.q.keys.prefix + "lock:*")}
            live = {t for t, alive in self.model.lock_alive.items() if alive and self.model.held(t) > 0}
            assert set(locks) == live
            for token, key in locks.items():
                assert self.client.get(key) == str(self.model.held(token))

    return QueueMachine


@pytest.mark.slow
def test_random_interleavings_keep_every_id_in_exactly_one_set(redis_server: RedisServer) -> None:
    run_state_machine_as_test(
        make_machine(redis_server.url),
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )
