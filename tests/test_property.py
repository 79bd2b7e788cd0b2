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

Dependencies: an enqueue names existing ids ("fail" or "run" mode; an unknown one is refused with
nothing written). The job waits (never claimed, in no other state) until every dependency ended; a
dependency counts once, the first way it ended after the job was enqueued (one ended before counts at
once). With "fail" a dependency that failed, was cancelled or deleted fails the job at once, and so on
down its own dependents; otherwise the job is released when the last one ended, to the back of the line
(or to scheduled, enqueued with a delay); a sole dependent of the same queue (a chain step) whose
release an ack recorded waits until the next claim, sweep, stats or inspect moves it (the model takes
which were recorded from Redis), and one cancelled meanwhile never arrived. inspect().waiting_on
counts what arrived, each way, and a claimed callback's lease.dependencies() says how each ended and
what a done one returned. Released exactly once: a second release would put the id back in line (a
state, or a place in line, the model does not have) and a lost one would leave it waiting; both fail
the state check after every step.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from setqueue import FailOutcome, JobFailed, Lease, Queue, UnknownJob, WaitProgress
from tests.support import RedisServer, queue_members
from tests.support.limits import check_groups

IDS_ALL = [f"id{i}" for i in range(8)]
IDS = st.sampled_from(IDS_ALL)
PRIORITIES = st.integers(-2, 2)
GROUPS = st.sampled_from([None, None, "g1", "g2", "g3"])
MAX_ATTEMPTS = 3
RANK_BAND = 2**48  # places per priority in a rank (lua/includes/rank.lua)


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
    deps: dict[str, list[str]] = field(default_factory=dict)  # id enqueued with dependencies -> them, in order
    mode: dict[str, str] = field(default_factory=dict)  # that id -> its if_dependency_fails
    arrived: dict[str, dict[str, str]] = field(default_factory=dict)  # that id -> dependency -> how it ended
    later: dict[str, bool] = field(default_factory=dict)  # that id -> released to scheduled (enqueued with a delay)
    releases: dict[str, int] = field(default_factory=dict)  # that id -> times released (this run of it)
    run: dict[str, int] = field(default_factory=dict)  # id -> its run: a new one after a delete or rerun
    # Releases an ack recorded (dependent, dependency, the dependent's run), in order: the dependent still
    # waits (its arrival counted) until a claim, sweep, stats or inspect moves it to the line.
    recorded: list[tuple[str, str, int]] = field(default_factory=list)

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

    def forget_links(self, job_id: str) -> None:
        """A delete, or a new run of the id: its dependencies and what arrived are dropped."""
        for table in (self.deps, self.mode, self.arrived, self.later, self.releases):
            table.pop(job_id, None)  # type: ignore[attr-defined]
        self.run[job_id] = self.run.get(job_id, 0) + 1

    def drain(self) -> None:
        """As claim, sweep, stats and inspect do first: each recorded release whose dependent still waits
        in that run joins the line, in the order recorded; one cancelled meanwhile never arrived."""
        for job_id, dependency, run in self.recorded:
            if self.run.get(job_id, 0) != run:
                continue  # deleted, or a new run: its entries went with the old one
            if self.state.get(job_id) == "waiting":
                self.join_line(job_id)
            else:
                self.arrived[job_id].pop(dependency)
                self.releases[job_id] -= 1
        self.recorded.clear()

    def arrive(self, job_id: str, dependency: str, outcome: str, released: list[str]) -> bool:
        """Dependency of waiting ``job_id`` ended as ``outcome`` (counted once): it fails the job ("fail"
        mode, not done; returns True: its own dependents are to be told) or, the last one, releases it (to
        the line: appended to ``released``, placed by the caller)."""
        if self.state.get(job_id) != "waiting" or dependency in self.arrived[job_id]:
            return False
        self.arrived[job_id][dependency] = outcome
        if outcome != "done" and self.mode[job_id] == "fail":
            self.state[job_id] = "failed"
            return True
        if len(self.arrived[job_id]) == len(self.deps[job_id]):
            self.releases[job_id] += 1
            if self.later[job_id]:
                self.state[job_id] = "scheduled"
            else:
                self.state[job_id] = "todos"  # its place: given by the caller, in the order Redis gave
                released.append(job_id)
        return False

    def end(self, job_id: str, outcome: str, released: list[str]) -> None:
        """``job_id`` ended (done, failed, cancelled, deleted): each job waiting for it hears of it; the
        dependents that fail tell theirs after that, breadth first, as the release does."""
        told = [(job_id, outcome)]
        while told:
            ended, how = told.pop(0)
            for dependent in [i for i, s in self.state.items() if s == "waiting" and ended in self.deps[i]]:
                if self.arrive(dependent, ended, how, released):
                    told.append((dependent, "failed"))


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

        def settle(self, released: list[str]) -> None:
            """Released jobs join the back of the line in the order the release took them (by
            dependency, then dependent): the model takes that order from their places in Redis."""
            ranks: dict[str, int] = {}
            for key in (self.q.keys.todos, self.q.keys.grouped):
                line: list[tuple[str, float]] = self.client.zrange(key, 0, -1, withscores=True)  # type: ignore[assignment]
                for member, score in line:
                    ranks[member] = int(score) % RANK_BAND  # rank = (top - priority) * band + place
            for job_id in sorted(released, key=lambda i: ranks[i]):
                self.model.join_line(job_id)

        def record(self, dependency: str, released: list[str]) -> None:
            """Of ``released`` (the dependents the ack of ``dependency`` released, in the model), those the
            ack recorded instead of joining them to the line (a sole dependent of the same queue: the model
            takes which from Redis) wait until the next drain."""
            entries: list[str] = self.client.lrange(self.q.keys.released, 0, -1)  # type: ignore[assignment]
            for value, by in list(zip(entries[0::2], entries[1::2], strict=True))[len(self.model.recorded) :]:
                job_id = value.rsplit(" ", 1)[1]
                assert by == dependency and job_id in released
                released.remove(job_id)
                self.model.state[job_id] = "waiting"
                self.model.recorded.append((job_id, dependency, self.model.run.get(job_id, 0)))

        def ended(self, job_id: str, outcome: str) -> None:
            released: list[str] = []
            self.model.end(job_id, outcome, released)
            self.settle(released)

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
                    m.forget_links(i)
                if later:
                    m.state[i] = "scheduled"
                else:
                    m.join_line(i)

        @rule(
            ids=st.lists(IDS, min_size=1, max_size=3),
            picks=st.lists(st.integers(0, 100), min_size=1, max_size=3),
            unknown=st.sampled_from([False, False, False, True]),
            mode=st.sampled_from(["fail", "run"]),
            later=st.booleans(),
            priority=PRIORITIES,
            group=GROUPS,
        )
        def enqueue_after(
            self,
            *,
            ids: list[str],
            picks: list[int],
            unknown: bool,
            mode: str,
            later: bool,
            priority: int,
            group: str | None,
        ) -> None:
            m = self.model
            unique = list(dict.fromkeys(ids))
            known = sorted(i for i in m.state if i not in unique)
            depends_on = list(dict.fromkeys(known[p % len(known)] for p in picks)) if known else []
            if unknown or not depends_on:  # an id the queue does not know: refused
                depends_on.append(next((i for i in IDS_ALL if i not in m.state and i not in unique), "absent"))
            options: dict[str, object] = {"delay": 3600 if later else None, "priority": priority, "group": group}
            if any(d not in m.state for d in depends_on):
                before = {state: set(i) for state, i in queue_members(self.client, self.q.keys).items()}
                with pytest.raises(UnknownJob):
                    self.q.enqueue(ids, depends_on=depends_on, if_dependency_fails=mode, **options)  # type: ignore[arg-type]
                after = {state: set(i) for state, i in queue_members(self.client, self.q.keys).items()}
                assert after == before  # and the state check finds no waiting job more
                return
            new = [i for i in unique if i not in m.state]
            assert self.q.enqueue(ids, depends_on=depends_on, if_dependency_fails=mode, **options) == len(new)  # type: ignore[arg-type]
            released: list[str] = []
            for i in new:
                m.group[i] = group
                m.priority[i] = priority
                m.attempts[i] = 0
                m.state[i] = "waiting"
                m.deps[i], m.mode[i], m.arrived[i], m.later[i], m.releases[i] = list(depends_on), mode, {}, later, 0
                for dependency in depends_on:  # one that ended already counts at once, the way it ended
                    if m.state[dependency] in ("done", "failed", "cancelled"):
                        m.arrive(i, dependency, m.state[dependency], released)  # failing it tells none: new
            self.settle(released)

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
                self.model.forget_links(job_id)
                self.ended(job_id, "deleted")

        @rule(count=st.integers(1, 4))
        def claim(self, count: int) -> None:
            m = self.model
            m.drain()
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
                assert self.model.state[lease.id] != "waiting"
                if lease.id in self.model.deps:  # a callback: how each dependency ended, what it returned
                    assert self.model.releases[lease.id] == 1
                    read = lease.dependencies()
                    deps = self.model.deps[lease.id]
                    assert [d.id for d in read] == deps
                    assert [d.outcome for d in read] == [self.model.arrived[lease.id][d] for d in deps]
                    for d in read:
                        if self.model.state.get(d.id) == "done":
                            assert d.result == self.model.result[d.id]
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
                released: list[str] = []
                self.model.end(lease.id, "done", released)
                self.record(lease.id, released)
                self.settle(released)  # in this queue: claimable when ack returns

        @rule(value=st.integers(), fails=st.booleans())
        def work(self, value: int, fails: bool) -> None:
            """A worker's turn: claim the front job and end it, done or failed for good."""
            claimed = len(self.leases)
            self.claim(1)
            if len(self.leases) > claimed:
                if fails:
                    self.fail(claimed, retry=False, later=False)
                else:
                    self.ack(claimed, value)

        @rule(job_id=IDS)
        def cancel(self, job_id: str) -> None:
            before = self.model.state.get(job_id)
            assert self.q.cancel(job_id) == before
            if before in ("todos", "scheduled", "in_progress", "waiting"):
                self.model.leave_in_progress(job_id, "cancelled")
                self.model.due.pop(job_id, None)
                self.ended(job_id, "cancelled")

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
                self.ended(lease.id, "failed")

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
            self.model.drain()
            self.model.promote_due()
            assert set(result.requeued) | set(result.dead_lettered) == expired
            for i in result.requeued:
                assert self.model.attempts[i] < MAX_ATTEMPTS
                self.model.leave_in_progress(i, "todos")  # its old place
            released: list[str] = []
            for i in result.dead_lettered:
                assert self.model.attempts[i] >= MAX_ATTEMPTS
                self.model.leave_in_progress(i, "failed")
            for i in result.dead_lettered:
                self.model.end(i, "failed", released)
            self.settle(released)

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
            actual["waiting"] = set(self.client.zrange(self.q.keys.waiting, 0, -1))  # type: ignore[arg-type]
            seen: dict[str, str] = {}
            for state, ids in actual.items():
                for i in ids:
                    assert i not in seen, f"{i} is in both {seen[i]} and {state}"
                    seen[i] = state
            assert seen == self.model.state
            assert queue_members(self.client, self.q.keys)["todos"] == self.model.line()
            stats = self.q.stats()
            self.model.drain()
            assert sum(int(stats[s]) for s in actual) == len(self.model.state)

        @invariant()
        def dependencies_counted_once(self) -> None:
            self.model.drain()  # the first inspect moves what acks recorded
            for job_id, deps in self.model.deps.items():
                arrived = list(self.model.arrived[job_id].values())
                counts = {way: arrived.count(way) for way in ("done", "failed", "cancelled", "deleted")}
                info = self.q.inspect(job_id)
                assert info is not None
                assert info.waiting_on == WaitProgress(total=len(deps), **counts)
                assert self.model.releases[job_id] <= 1

        @invariant()
        def locks_only_for_live_claims(self) -> None:
            locks = {k.rsplit("lock:", 1)[1]: k for k in self.client.scan_iter(match=self.q.keys.prefix + "lock:*")}
            live = {t for t, alive in self.model.lock_alive.items() if alive and self.model.held(t) > 0}
            assert set(locks) == live
            for token, key in locks.items():
                assert self.client.get(key) == str(self.model.held(token))

    return QueueMachine


# Dependencies need jobs to end while others wait for them: among all the rules a step rarely gives that
# (one enqueue with dependencies in a hundred steps), so a second run leaves out the limits.
LIMIT_RULES = ("renew", "release", "pause", "resume", "limit_rate", "limit_groups", "look_for_the_result")


def make_dependency_machine(url: str) -> type[RuleBasedStateMachine]:
    base = make_machine(url)

    class DependencyMachine(base):  # type: ignore[valid-type, misc]
        @initialize()
        def jobs_to_wait_for(self) -> None:
            """Three jobs in line from the start, so the first enqueue can name dependencies."""
            self.enqueue(IDS_ALL[:3], later=False, priority=0, group=None, mode="ignore")

        @rule(pick=st.integers(0, 100), mode=st.sampled_from(["fail", "run"]), group=GROUPS)
        def chain_step(self, pick: int, mode: str, group: str | None) -> None:
            """The common chain step, a new id with one dependency, no delay and priority 0: its
            dependency's ack records its release, for the next claim."""
            free = [i for i in IDS_ALL if i not in self.model.state]
            if free:
                step = {"ids": free[:1], "picks": [pick], "unknown": False, "later": False, "priority": 0}
                self.enqueue_after(**step, mode=mode, group=group)

    for name in LIMIT_RULES:
        setattr(DependencyMachine, name, None)
    return DependencyMachine


def run(machine: type[RuleBasedStateMachine], examples: int, steps: int) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )


@pytest.mark.slow
def test_random_interleavings_keep_every_id_in_exactly_one_set(redis_server: RedisServer) -> None:
    run(make_machine(redis_server.url), examples=60, steps=30)


@pytest.mark.slow
def test_dependencies_release_once_and_fail_down_the_line(redis_server: RedisServer) -> None:
    run(make_dependency_machine(redis_server.url), examples=30, steps=60)
