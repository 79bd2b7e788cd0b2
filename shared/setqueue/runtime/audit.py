"""Auditing a queue from Redis (AUDIT=true, chaos runs): every created id in exactly one state, none
lost, and no job that succeeded twice without a lost lease to explain it.

What the services record under ``setqueue:{Q}:audit:…`` (docs/reference.md, "Key layout"):

- **created**: the creator, after each enqueue, raises ``audit:created[<prefix>]`` to the number of
  its last id. Enqueue and record are two calls, so a creator that dies between them leaves ids the
  audit undercounts, never calls lost.
- **runs**: the demo handler records each run as a success or a failure, keyed by the claim's token
  so that a record resent after a connection error counts once.
- **lost leases**: ids the cleaner's sweep put back after their lease expired, and those a worker
  hands back still running after its shutdown grace: a run may have gone on after each, so each
  explains one more successful run.
- **workflows** (chaos runs, ``python -m setqueue.runtime.audit --workflows BATCH CHAINS FAN_INS``): chains
  of CHAIN_STEPS jobs (prefix ``wfchain…``, each step waiting for the one before, "fail" mode) and
  fan-ins of FAN_IN_MEMBERS jobs and a callback (prefix ``wffanin…``, the callback last, "run" mode),
  recorded under ``audit:created`` like the creator's, so the checks above cover their ids too. The
  audit adds: dependents released (expected: those whose dependencies all ended, done for a chain
  step) and released twice; callbacks run and run twice without a lost lease.

:class:`Auditor` reads those and the states in chunks, each in one MULTI so that an id is judged at
one instant (every transition is one script).
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from setqueue.client import connect
from setqueue.executors import Executor
from setqueue.jobs import Lease
from setqueue.keys import MAX_IDS_PER_CALL, STATES, QueueKeys
from setqueue.queue import Queue
from setqueue.runtime.settings import CommonSettings, SettingError
from setqueue.script_cache import call_script
from setqueue.scripts import text
from setqueue.steps import Snapshot

RUN_RECORD_TTL_MS = 120_000  # long enough to outlive redis-py's resends of one record
CHAIN_STEPS = 3
FAN_IN_MEMBERS = 20
CHAIN_PREFIX = "wfchain"  # ids <prefix><batch>x<n>-1 … -CHAIN_STEPS
FAN_IN_PREFIX = "wffanin"  # ids <prefix><batch>x<n>-1 … -FAN_IN_MEMBERS, then the callback
ENDED = ("done", "failed", "cancelled")
SAMPLE = 100  # ids of each finding kept in a report

# Raises a creator's count to ARGV[2], never lowers it.
_RAISE_CREATED = """
local created = KEYS[1]
local prefix, count = ARGV[1], tonumber(ARGV[2])
if count > tonumber(redis.call('HGET', created, prefix) or '0') then
  redis.call('HSET', created, prefix, count)
end
"""

# Counts one run of a job once: the marker (claim token, id) makes a resent record a no-op.
_RECORD_RUN = """
local marker, runs = KEYS[1], KEYS[2]
local job_id, marker_ttl_ms = ARGV[1], ARGV[2]
if redis.call('SET', marker, '1', 'NX', 'PX', marker_ttl_ms) then
  redis.call('HINCRBY', runs, job_id, 1)
end
"""


class AuditRecorder:
    def __init__(self, client: redis.Redis, keys: QueueKeys) -> None:
        self.redis = client
        self.keys = keys
        self._raise_created = client.register_script(_RAISE_CREATED)
        self._record_run = client.register_script(_RECORD_RUN)

    def created(self, prefix: str, count: int) -> None:
        call_script(self.redis, self._raise_created.sha, _RAISE_CREATED, [self.keys.audit_created], [prefix, count])

    def run(self, lease: Lease, *, succeeded: bool) -> None:
        runs = self.keys.audit_successes if succeeded else self.keys.audit_failures
        keys = [self.keys.audit_run(lease.token, lease.id), runs]
        call_script(self.redis, self._record_run.sha, _RECORD_RUN, keys, [lease.id, RUN_RECORD_TTL_MS])

    def lease_lost(self, ids: Sequence[str]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for job_id in ids:
            pipe.hincrby(self.keys.audit_lease_lost, job_id, 1)
        pipe.execute()


@dataclass(frozen=True)
class AuditReport:
    created: int
    states: dict[str, int]
    lost: int  # created, in no state (and not explained by the retention)
    in_two_states: int
    trimmed: int  # in no state after a successful run, while done has a retention: dropped from done
    successful_runs: int
    failed_runs: int
    duplicates: int  # ids that succeeded more than once
    unexplained_duplicates: int  # ... more often than 1 + their lost leases
    lease_losses: int
    history_reclaims: int  # lines "lease lost" and "handed back" in the jobs' histories
    unrecorded_reclaims: int  # ids with more lost leases recorded than their history shows
    lost_ids: tuple[str, ...]  # up to SAMPLE of each
    two_state_ids: tuple[str, ...]
    unexplained_ids: tuple[str, ...]
    unrecorded_ids: tuple[str, ...]
    finished_at: float  # Unix time
    seconds: float  # how long the audit took
    # Workflows (chains and fan-ins; 0 without any). A dependent is released when it left waiting for
    # the line: it ran, or is in todos, in_progress or scheduled. Expected: all its dependencies ended
    # (all done, for a chain step). Twice: it succeeded more often than 1 + its lost leases (a second
    # release would run it again), or it ran although a chain step before it did not end done.
    dependents_expected: int = 0
    dependents_released: int = 0
    dependents_released_twice: int = 0
    callbacks_expected: int = 0  # fan-ins whose members all ended
    callbacks_ran: int = 0  # ... whose callback ran (at least one claim recorded)
    callbacks_ran_twice: int = 0  # ... that succeeded more often than 1 + its lost leases
    workflow_ids: tuple[str, ...] = ()  # up to SAMPLE dependents where the counts part

    @property
    def ok(self) -> bool:
        return not (self.lost or self.in_two_states or self.unexplained_duplicates or self.unrecorded_reclaims)

    @property
    def workflows_ok(self) -> bool:
        """Every dependent released when expected and once, every callback run once (after a drain)."""
        return (
            self.dependents_expected == self.dependents_released
            and self.callbacks_expected == self.callbacks_ran
            and not (self.dependents_released_twice or self.callbacks_ran_twice or self.workflow_ids)
        )

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditReport:
        """From ``as_dict`` through JSON (tuples turned lists)."""
        values: dict[str, Any] = {name: tuple(v) if isinstance(v, list) else v for name, v in data.items()}
        return cls(**values)


@dataclass
class _Finding:
    count: int = 0
    ids: list[str] = field(default_factory=list)

    def add(self, job_id: str) -> None:
        self.count += 1
        if len(self.ids) < SAMPLE:
            self.ids.append(job_id)


@dataclass
class _Tally:
    states: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATES, 0))
    lost: _Finding = field(default_factory=_Finding)
    two_states: _Finding = field(default_factory=_Finding)
    unexplained: _Finding = field(default_factory=_Finding)
    unrecorded: _Finding = field(default_factory=_Finding)
    trimmed: int = 0
    successful_runs: int = 0
    failed_runs: int = 0
    duplicates: int = 0
    lease_losses: int = 0
    history_reclaims: int = 0
    flows: dict[str, _Flow] = field(default_factory=dict)  # workflow ids -> what the audit read of them


@dataclass(frozen=True)
class _Flow:
    state: str | None  # None: in no state, or in two
    successes: int
    runs: int  # successful and failed
    lost_leases: int  # the more of those recorded and those in its history

    @property
    def released(self) -> bool:
        return self.runs > 0 or self.state in ("todos", "in_progress", "scheduled")

    @property
    def twice(self) -> bool:
        return self.successes > 1 + self.lost_leases


RECLAIMS = ("lease lost", "handed back")  # history lines: a run may have gone on


def reclaims_in(history: Any) -> int:
    lines = [] if history is None else text(history).splitlines()
    return sum(1 for line in lines if line.split("\t")[1:2] and line.split("\t")[1] in RECLAIMS)


class Auditor:
    """``audit()`` checks every created id; the cleaner spreads one over rounds with ``start()`` and
    ``AuditPass.advance(budget)``. With ``retention`` (done drops ids), an id in no state that succeeded
    counts as trimmed, not lost."""

    def __init__(self, client: redis.Redis, keys: QueueKeys, *, retention: bool, chunk: int = MAX_IDS_PER_CALL) -> None:
        self.redis = client
        self.keys = keys
        self.retention = retention
        self.chunk = chunk

    def start(self) -> AuditPass:
        recorded = self.redis.hgetall(self.keys.audit_created)
        counts = {text(prefix): int(count) for prefix, count in recorded.items()}  # type: ignore[union-attr]
        return AuditPass(self, sorted(counts.items()))

    def audit(self) -> AuditReport:
        audit = self.start()
        audit.advance(None)
        return audit.report()

    def _read_chunk(self, ids: list[str]) -> list[list[Any]]:
        """Per state (STATES order) whether each id is in it, then its history, runs and lost leases."""
        k = self.keys
        # One MULTI (a plain pipeline when Redis is out of memory).
        reads = Snapshot(
            (
                ("ZMSCORE", k.todos, *ids),
                ("ZMSCORE", k.in_progress, *ids),
                ("SMISMEMBER", k.done, *ids),
                ("SMISMEMBER", k.failed, *ids),
                ("ZMSCORE", k.scheduled, *ids),
                ("SMISMEMBER", k.cancelled, *ids),
                ("ZMSCORE", k.waiting, *ids),
                ("HMGET", k.history, *ids),
                ("HMGET", k.audit_successes, *ids),
                ("HMGET", k.audit_failures, *ids),
                ("HMGET", k.audit_lease_lost, *ids),
                ("ZMSCORE", k.grouped, *ids),
            )
        )
        todos, *rest, grouped = Executor(self.redis).do(reads)
        # A waiting job with a group is in todos' state too (setqueue.keys: grouped).
        waiting = [rank if rank is not None else other for rank, other in zip(todos, grouped, strict=True)]
        return [waiting, *rest]


class AuditPass:
    """One audit in progress, in chunks. A chunk counts only once its read succeeded, so ``advance`` may
    be called again after a Redis error."""

    def __init__(self, auditor: Auditor, counts: list[tuple[str, int]]) -> None:
        self.auditor = auditor
        self.counts = counts
        self.created = sum(n for _, n in counts)
        self.started = time.monotonic()
        self._prefix = 0  # index into counts
        self._next = 1  # number of the next id of that prefix
        self._tally = _Tally()

    @property
    def finished(self) -> bool:
        return self._prefix >= len(self.counts)

    def advance(self, budget: int | None) -> bool:
        """Up to ``budget`` more ids (None: all); True once done."""
        left = float("inf") if budget is None else budget
        while not self.finished and left > 0:
            prefix, count = self.counts[self._prefix]
            size = int(min(self.auditor.chunk, left, count - self._next + 1))
            ids = [f"{prefix}-{n}" for n in range(self._next, self._next + size)]
            self._judge(ids, self.auditor._read_chunk(ids))
            left -= size
            self._next += size
            if self._next > count:
                self._prefix, self._next = self._prefix + 1, 1
        return self.finished

    def _judge(self, ids: list[str], replies: list[list[Any]]) -> None:
        t = self._tally
        todos, in_progress, done, failed, scheduled, cancelled, waiting, history, successes, failures, lease_lost = (
            replies
        )
        for i, job_id in enumerate(ids):
            present = (
                todos[i] is not None,
                in_progress[i] is not None,
                bool(done[i]),
                bool(failed[i]),
                scheduled[i] is not None,
                bool(cancelled[i]),
                waiting[i] is not None,
            )
            succeeded = int(successes[i] or 0)
            lost_leases = int(lease_lost[i] or 0)
            reclaimed = reclaims_in(history[i])
            t.successful_runs += succeeded
            t.failed_runs += int(failures[i] or 0)
            t.lease_losses += lost_leases
            t.history_reclaims += reclaimed
            # A history keeps its last ten lines: a longer one may have let older reclaims go.
            kept_whole = history[i] is None or text(history[i]).count("\n") < 9
            if lost_leases > reclaimed and kept_whole:
                t.unrecorded.add(job_id)
            where = [state for state, here in zip(STATES, present, strict=True) if here]
            if len(where) > 1:
                t.two_states.add(job_id)
            elif where:
                t.states[where[0]] += 1
            elif self.auditor.retention and succeeded:
                t.trimmed += 1
            else:
                t.lost.add(job_id)
            if succeeded > 1:
                t.duplicates += 1
                if succeeded > 1 + max(lost_leases, reclaimed):
                    t.unexplained.add(job_id)
            if job_id.startswith((CHAIN_PREFIX, FAN_IN_PREFIX)):
                runs = succeeded + int(failures[i] or 0)
                state = where[0] if len(where) == 1 else None
                t.flows[job_id] = _Flow(state, succeeded, runs, max(lost_leases, reclaimed))

    def _workflows(self) -> dict[str, Any]:
        """The workflow rows of the report, from the flows read (a workflow some of whose ids were not
        read yet counts once they are)."""
        rows: dict[str, Any] = dict.fromkeys(
            (
                "dependents_expected",
                "dependents_released",
                "dependents_released_twice",
                "callbacks_expected",
                "callbacks_ran",
                "callbacks_ran_twice",
            ),
            0,
        )
        parted = _Finding()
        flows = self._tally.flows
        for prefix, count in self.counts:
            ids = [f"{prefix}-{n}" for n in range(1, count + 1)]
            if not prefix.startswith((CHAIN_PREFIX, FAN_IN_PREFIX)) or any(i not in flows for i in ids):
                continue
            if prefix.startswith(CHAIN_PREFIX):  # each step after the one before, "fail" mode
                pairs = [([before], step) for before, step in itertools.pairwise(ids)]
            else:  # the callback after every member, "run" mode
                pairs = [(ids[:-1], ids[-1])]
            for dependencies, dependent in pairs:
                flow = flows[dependent]
                if prefix.startswith(CHAIN_PREFIX):
                    expected = all(flows[d].state == "done" for d in dependencies)
                else:
                    expected = all(flows[d].state in ENDED for d in dependencies)
                rows["dependents_expected"] += expected
                rows["dependents_released"] += flow.released
                rows["dependents_released_twice"] += flow.twice or (flow.runs > 0 and not expected)
                if expected != flow.released:
                    parted.add(dependent)
                if prefix.startswith(FAN_IN_PREFIX):
                    rows["callbacks_expected"] += expected
                    rows["callbacks_ran"] += flow.runs > 0
                    rows["callbacks_ran_twice"] += flow.twice
        rows["workflow_ids"] = tuple(parted.ids)
        return rows

    def report(self) -> AuditReport:
        t = self._tally
        return AuditReport(
            created=self.created,
            states=dict(t.states),
            lost=t.lost.count,
            in_two_states=t.two_states.count,
            trimmed=t.trimmed,
            successful_runs=t.successful_runs,
            failed_runs=t.failed_runs,
            duplicates=t.duplicates,
            unexplained_duplicates=t.unexplained.count,
            lease_losses=t.lease_losses,
            history_reclaims=t.history_reclaims,
            unrecorded_reclaims=t.unrecorded.count,
            lost_ids=tuple(t.lost.ids),
            two_state_ids=tuple(t.two_states.ids),
            unexplained_ids=tuple(t.unexplained.ids),
            unrecorded_ids=tuple(t.unrecorded.ids),
            finished_at=time.time(),
            seconds=time.monotonic() - self.started,
            **self._workflows(),
        )


def make_workflows(queue: Queue, recorder: AuditRecorder, batch: int, chains: int, fan_ins: int) -> int:
    """Batch ``batch`` of a chaos run's workflows: ``chains`` chains and ``fan_ins`` fan-ins (module
    docstring), each recorded as created once all of it is enqueued. Safe to repeat after an error: an
    id already there is left alone, and a dependency already ended counts at once. Returns how many ids
    the batch has."""
    made = 0
    for n in range(chains):
        prefix = f"{CHAIN_PREFIX}{batch}x{n}"
        ids = [f"{prefix}-{step}" for step in range(1, CHAIN_STEPS + 1)]
        queue.enqueue(ids[:1])
        for before, step in itertools.pairwise(ids):
            queue.enqueue([step], depends_on=[before])
        recorder.created(prefix, len(ids))
        made += len(ids)
    for n in range(fan_ins):
        prefix = f"{FAN_IN_PREFIX}{batch}x{n}"
        members = [f"{prefix}-{m}" for m in range(1, FAN_IN_MEMBERS + 1)]
        callback = f"{prefix}-{FAN_IN_MEMBERS + 1}"
        queue.enqueue(members)
        queue.enqueue([callback], depends_on=members, if_dependency_fails="run")
        recorder.created(prefix, FAN_IN_MEMBERS + 1)
        made += FAN_IN_MEMBERS + 1
    return made


def main(argv: Sequence[str] = ()) -> int:
    """``python -m setqueue.runtime.audit``: audit once, print the report as JSON; exit 1 on a problem.
    ``... --workflows BATCH CHAINS FAN_INS``: make that batch of workflows (``make_workflows``), print
    how many ids it has. Exit 2 for a bad setting or argument."""
    usage = "usage: python -m setqueue.runtime.audit [--workflows BATCH CHAINS FAN_INS]"
    workflows: list[int] | None = None
    if argv:
        flag, *numbers = argv
        if flag != "--workflows" or len(numbers) != 3 or not all(n.isdigit() for n in numbers):
            print(f"setqueue.runtime.audit: {usage}", file=sys.stderr)
            return 2
        workflows = [int(n) for n in numbers]
    try:
        settings = CommonSettings.from_env()
    except SettingError as exc:
        print(f"setqueue.runtime.audit: {exc}", file=sys.stderr)
        return 2
    options = settings.queue_options()
    queue = Queue(connect(settings.redis_url, **settings.tls_options()), options.pop("name"), **options)
    try:
        if workflows is not None:
            batch, chains, fan_ins = workflows
            print(make_workflows(queue, AuditRecorder(queue.redis, queue.keys), batch, chains, fan_ins))
            return 0
        report = Auditor(queue.redis, queue.keys, retention=settings.trims_done).audit()
    finally:
        queue.close()
    print(json.dumps(report.as_dict()))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
