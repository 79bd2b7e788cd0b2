"""The chaos run (``scripts/chaos --minutes N``): the reference stack under random faults, judged by
its own audit.

HOW_THE_AUDIT_KNOWS says what the verdict rests on. Plain Python: ``tests/compose/test_chaos.py`` runs a short one.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from python_on_whales import DockerClient
from python_on_whales.exceptions import DockerException

from setqueue.runtime.audit import CHAIN_STEPS, FAN_IN_MEMBERS, AuditReport
from tests.compose.observability import REPO
from tests.compose.stack import Stack, WaitTimeout, running_stack
from tests.network_chaos import network_section

SERVICES = ["redis", "creator", "worker", "cleaner"]
FAULTS = {
    "worker_sigkill": "worker SIGKILL (1 to all of them), started again",
    "worker_sigstop": "worker SIGSTOP past its lease, then SIGCONT",
    "cleaner_sigkill": "cleaner SIGKILL, started again",
    "redis_sigterm": "Redis SIGTERM (clean shutdown), started again",
    "redis_sigkill": "Redis SIGKILL, started again",
    "workers_scaled": "workers scaled up or down",
}
PROBE_KEY = "chaos:probe"
POSTPONED_AOF_WRITE = "Asynchronous AOF fsync is taking too long"  # Redis logs this when it does
# The cleaner's /metrics, from inside its container (the port is not published).
FETCH_METRICS = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/metrics').read().decode())"
AUDIT_GAUGES = ("lost", "in_two_states", "unexplained_duplicates")

HOW_THE_AUDIT_KNOWS = """## How the audit knows

With `AUDIT=true` (`shared/setqueue/runtime/audit.py`), right after each enqueue the creator records
how far it got (`audit:created`: prefix → n, its ids being `<prefix>-1` … `<prefix>-n`; a creator
dying between the two leaves ids unaudited, never falsely lost).
The demo handler records every run, success or failure, once per claim; the cleaner records the jobs
whose lease it found lost, and a worker the jobs it hands back still running at the end of its
shutdown grace.
Every `AUDIT_INTERVAL` the cleaner checks every created id, 500 at a time in one `MULTI`: in exactly
one state, and no more successful runs than 1 + its lost leases; its findings are the
`setqueue_audit_*` gauges and the dashboard's *Nothing lost* row.
Meanwhile the run makes a batch of workflows every few seconds, in the cleaner's container
(`python -m setqueue.runtime.audit --workflows`): chains of 3 jobs (each step waiting for the one
before) and fan-ins of 20 members and a callback ("run" mode), recorded like the creator's ids. The
final audit counts a dependent released when it ran (or is in line); it expects one whose
dependencies all ended (a chain step's done), and counts it released twice when it succeeded more
often than once per lost lease plus one, or ran after a step before it failed; a callback the same.
`python -m setqueue.runtime.audit` takes one audit. Before each Redis SIGKILL the run writes a probe
and checks after the restart that it survived: with `appendfsync everysec`, a lost write would show
as a **lost** id (an enqueue) or an **unexplained duplicate** (a claim).
`scripts/chaos --minutes 10` runs it again (about 13 minutes; a 75-second run is one of the compose
tests): it exits 1 if a job was lost, in two states, or ran successfully twice without a lost lease
to explain it.
"""


@dataclass(frozen=True)
class Plan:
    minutes: float
    create_rate: float = 25.0
    workers: int = 3  # at the start and the end; scaling faults pick 1..max_workers
    max_workers: int = 4
    gap_seconds: tuple[float, float] = (3.0, 10.0)  # between two faults
    seed: int = field(default_factory=lambda: random.randrange(2**32))
    lease_seconds: float = 3.0
    queue_name: str = "chaos"
    id_prefix: str = "chaos"
    chains: int = 2  # workflows a batch: chains of CHAIN_STEPS jobs
    fan_ins: int = 1  # ... and fan-ins of FAN_IN_MEMBERS members and a callback
    workflow_seconds: float = 3.0  # between two batches

    @property
    def jobs(self) -> int:
        return round(self.create_rate * self.minutes * 60)

    @property
    def ids_per_batch(self) -> int:
        return self.chains * CHAIN_STEPS + self.fan_ins * (FAN_IN_MEMBERS + 1)

    def settings(self) -> dict[str, str]:
        return {
            "AUDIT": "true",
            "AUDIT_INTERVAL": "5",
            "DONE_MAX_COUNT": "0",  # no retention: an id in no state is lost, never trimmed
            "DONE_MAX_AGE_SECONDS": "0",
            "CREATE_RATE": f"{self.create_rate:g}",
            "CREATE_TOTAL": str(self.jobs),
            "CREATE_BATCH": "10",
            "CREATE_GROUPS": "20",  # groups lose nothing either
            "CREATE_ID_PREFIX": self.id_prefix,
            "CONCURRENCY": "4",
            "CLAIM_BATCH": "5",  # a killed or stopped worker holds jobs
            "WORK_SECONDS": "0.05",
            "WORK_JITTER": "0.5",
            "FAIL_RATE": "0.05",
            "MAX_ATTEMPTS": "3",  # a few jobs use them all up: failed is a state, not a loss
            "LEASE_SECONDS": f"{self.lease_seconds:g}",
            "SWEEP_INTERVAL": "1",
            "LOG_LEVEL": "INFO",
        }


@dataclass(frozen=True)
class RedisKill:
    second: float  # into the run
    created_before: int  # the creator's audit record just before the kill
    probe_kept: bool

    def covers(self, number: int, rate: float) -> bool:
        """Id ``number`` was created within what Redis may have postponed (2 s) plus a second."""
        return self.created_before - 3 * rate <= number <= self.created_before + 3 * rate


@dataclass
class Verdict:
    plan: Plan
    started: str  # UTC, ISO 8601
    faults: Counter[str]
    workers_killed: int
    redis_kills: list[RedisKill]
    drained: bool
    final: AuditReport
    cleaner_samples: int
    cleaner_worst: dict[str, float]
    postponed_aof_writes: int
    timeline: list[str]
    workflow_batches: int = 0

    @property
    def expected_ids(self) -> int:
        """The creator's ids and those of the workflow batches made."""
        return self.plan.jobs + self.workflow_batches * self.plan.ids_per_batch

    @property
    def writes_lost_by_redis(self) -> list[RedisKill]:
        return [kill for kill in self.redis_kills if not kill.probe_kept]

    @property
    def lost_in_redis_windows(self) -> list[str]:
        rate, kills = self.plan.create_rate, self.writes_lost_by_redis
        created = [i for i in self.final.lost_ids if i.startswith(f"{self.plan.id_prefix}-")]
        return [i for i in created if any(k.covers(int(i.rpartition("-")[2]), rate) for k in kills)]

    @property
    def problems(self) -> list[str]:
        f = self.final
        found = [
            f"{count} ids {what}: {', '.join(ids[:10])}"
            for count, ids, what in (
                (f.lost, f.lost_ids, "lost"),
                (f.in_two_states, f.two_state_ids, "in two states"),
                (f.unexplained_duplicates, f.unexplained_ids, "ran twice unexplained"),
                (f.unrecorded_reclaims, f.unrecorded_ids, "lost a lease their history does not show"),
            )
            if count
        ]
        if f.created != self.expected_ids:
            found.append(f"the audit knows {f.created} of the {self.expected_ids} ids the creator and workflows made")
        if not f.workflows_ok:
            found.append(
                f"workflows: dependents released {f.dependents_expected} expected / {f.dependents_released} / "
                f"{f.dependents_released_twice} twice, callbacks {f.callbacks_expected} expected / {f.callbacks_ran} "
                f"ran / {f.callbacks_ran_twice} twice ({', '.join(f.workflow_ids[:10])})"
            )
        if not self.drained:
            found.append("the queue did not drain")
        return found

    @property
    def passed(self) -> bool:
        return not self.problems

    def markdown(self) -> str:
        f, p, s = self.final, self.plan, self.plan.settings()
        lines = [
            f"# Chaos run, {self.started}",
            "",
            f"{p.minutes:g} minutes of faults against redis, creator, {p.workers} workers (1 to {p.max_workers}) "
            f"and the cleaner: the creator making {p.create_rate:g} jobs/s ({p.jobs:,} in all, in "
            f"{s['CREATE_GROUPS']} job groups taking turns), {s['WORK_SECONDS']} s per job, "
            f"FAIL_RATE {s['FAIL_RATE']}, MAX_ATTEMPTS {s['MAX_ATTEMPTS']}, LEASE_SECONDS {p.lease_seconds:g}; "
            f"a fault every {p.gap_seconds[0]:g} to {p.gap_seconds[1]:g} s; seed {p.seed}. "
            f"Meanwhile {self.workflow_batches} batches of workflows, one every {p.workflow_seconds:g} s: "
            f"{self.workflow_batches * p.chains} chains of {CHAIN_STEPS} jobs and {self.workflow_batches * p.fan_ins} "
            f"fan-ins of {FAN_IN_MEMBERS} members and a callback ({self.workflow_batches * p.ids_per_batch:,} jobs).",
            "",
            "| fault | injected |",
            "|---|---:|",
        ]
        lines += [f"| {FAULTS[kind]} | {self.faults[kind]} |" for kind in FAULTS]
        lost_writes = self.writes_lost_by_redis
        lines += [
            f"| **all faults** (workers SIGKILLed in all: {self.workers_killed}) | **{sum(self.faults.values())}** |",
            "",
            "| verdict (final audit, after the drain) | jobs |",
            "|---|---:|",
            f"| created (creator and workflows) | {f.created:,} |",
            f"| done | {f.states['done']:,} |",
            f"| failed (dead-lettered: attempts used up) | {f.states['failed']:,} |",
            f"| still in todos / in_progress / scheduled / waiting | "
            f"{f.states['todos']} / {f.states['in_progress']} / {f.states['scheduled']} / {f.states['waiting']} |",
            f"| **lost** | **{f.lost}** |",
            f"| **in two states** | **{f.in_two_states}** |",
            f"| ran successfully more than once (duplicates) | {f.duplicates} |",
            f"| **duplicates not explained by a lost lease** | **{f.unexplained_duplicates}** |",
            f"| **lost leases missing from the jobs' histories** | **{f.unrecorded_reclaims}** |",
            "",
            "| workflows (final audit) | expected | released, ran | twice |",
            "|---|---:|---:|---:|",
            f"| **dependents released** (expected / released / released twice) | {f.dependents_expected} | "
            f"{f.dependents_released} | **{f.dependents_released_twice}** |",
            f"| **callbacks run** (expected / ran / ran twice without a lost lease) | {f.callbacks_expected} | "
            f"{f.callbacks_ran} | **{f.callbacks_ran_twice}** |",
            "",
            f"Runs: {f.successful_runs:,} successful, {f.failed_runs:,} failed (FAIL_RATE); "
            f"{f.lease_losses} lost leases recorded (by the cleaner's sweeps), and {f.history_reclaims} in the "
            "jobs' own histories (lease lost and swept, or handed back still running). "
            f"The cleaner's continuous audit, read {self.cleaner_samples} times during the run, showed at worst "
            + ", ".join(f"{self.cleaner_worst.get(g, 0):g} {g.replace('_', ' ')}" for g in AUDIT_GAUGES)
            + ".",
            "",
            f"Redis SIGKILLs that lost acknowledged writes (the probe written just before the kill was gone "
            f"after the restart): {len(lost_writes)} of {len(self.redis_kills)}; Redis logged "
            f"{self.postponed_aof_writes} postponed AOF writes (a SIGKILL then loses them)."
            + (
                f" Lost ids created within 3 s before such a kill: {len(self.lost_in_redis_windows)}."
                if lost_writes
                else ""
            ),
            "",
            "**PASS**: nothing lost, nothing in two states, every duplicate explained, every dependent "
            "released and every callback run once."
            if self.passed
            else "**FAIL**: " + "; ".join(self.problems) + ".",
            "",
            "<details><summary>Timeline</summary>",
            "",
            *(f"    {line}" for line in self.timeline),
            "",
            "</details>",
            "",
            HOW_THE_AUDIT_KNOWS,
        ]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "plan": {**self.plan.__dict__, "jobs": self.plan.jobs},
            "started": self.started,
            "faults": dict(self.faults),
            "workers_killed": self.workers_killed,
            "redis_kills": [kill.__dict__ for kill in self.redis_kills],
            "drained": self.drained,
            "final_audit": self.final.as_dict(),
            "cleaner_samples": self.cleaner_samples,
            "cleaner_worst": self.cleaner_worst,
            "postponed_aof_writes": self.postponed_aof_writes,
            "problems": self.problems,
            "passed": self.passed,
            "timeline": self.timeline,
            "workflow_batches": self.workflow_batches,
        }


class Chaos:
    def __init__(self, stack: Stack, plan: Plan, say: Callable[[str], None]) -> None:
        self.stack = stack
        self.plan = plan
        self.say = say
        self.rng = random.Random(plan.seed)
        self.started = time.monotonic()
        self.workers = plan.workers
        self.faults: Counter[str] = Counter()
        self.workers_killed = 0
        self.redis_kills: list[RedisKill] = []
        self.timeline: list[str] = []
        self.cleaner_samples = 0
        self.cleaner_worst: dict[str, float] = {}
        self.workflow_batches = 0  # batches made (the next one's number)
        self.stop_workflows = threading.Event()
        self.workflow_thread = threading.Thread(target=self.make_workflows, name="workflows", daemon=True)

    def note(self, line: str) -> None:
        line = f"{time.monotonic() - self.started:6.1f}s  {line}"
        self.timeline.append(line)
        self.say(line)

    def inject_for(self, seconds: float) -> None:
        """A fault every few seconds, FAULTS in shuffled rounds; the first round always completes."""
        end = self.started + seconds
        round_left: list[str] = []
        rounds = 0
        while time.monotonic() < end or (rounds == 1 and round_left):
            if not round_left:
                round_left = list(FAULTS)
                self.rng.shuffle(round_left)
                rounds += 1
            time.sleep(self.rng.uniform(*self.plan.gap_seconds))
            kind = round_left.pop()
            getattr(self, kind)()
            self.faults[kind] += 1
            self.read_cleaner_audit()

    def make_workflow_batch(self) -> bool:
        """The next batch of workflows, in the cleaner's container; False if it could not (the cleaner or
        Redis down): the same batch is made again, its ids left alone where they are."""
        p = self.plan
        command = ["python", "-m", "setqueue.runtime.audit", "--workflows"]
        try:
            self.stack.docker.compose.execute(
                "cleaner", [*command, str(self.workflow_batches), str(p.chains), str(p.fan_ins)], tty=False
            )
        except DockerException:
            return False
        self.workflow_batches += 1
        return True

    def make_workflows(self) -> None:
        """A batch every ``workflow_seconds`` until told to stop."""
        while not self.stop_workflows.wait(self.plan.workflow_seconds):
            self.make_workflow_batch()

    def finish_workflows(self, timeout: float = 180) -> None:
        """Stop making workflows; a batch left half made is finished (after ``restore``)."""
        self.stop_workflows.set()
        self.workflow_thread.join()
        end = time.monotonic() + timeout
        while not self.make_workflow_batch():  # one more whole batch: one left half made is the same
            if time.monotonic() > end:
                raise WaitTimeout(f"the last batch of workflows could not be made within {timeout:.0f}s")
            time.sleep(1)
        self.note(f"workflows: {self.workflow_batches} batches made")

    def restore(self) -> None:
        self.stack.docker.compose.start(services=["redis", "cleaner"])
        self.wait_for_redis()
        self.scale(self.plan.workers)
        for container in self.stack.containers("worker"):
            self.signal_processes(container, "SIGCONT")
        self.note(f"restored: redis and cleaner up, {self.plan.workers} workers")

    def drain(self, timeout: float) -> bool:
        def state() -> tuple[bool, dict[str, int]]:
            (creator,) = self.stack.docker.compose.ps(services=["creator"], all=True)
            return bool(creator.state.running), self.stack.counts()

        def drained(now: tuple[bool, dict[str, int]]) -> bool:
            creating, counts = now
            busy = ("todos", "in_progress", "scheduled", "waiting")
            return not creating and all(counts[state] == 0 for state in busy)

        try:
            _, counts = self.stack.wait(state, drained, "the queue to drain", timeout=timeout)
        except WaitTimeout as exc:
            self.note(f"did not drain within {timeout:.0f}s: {str(exc).splitlines()[0]}")
            return False
        self.note(f"drained: {counts}")
        return True

    def final_audit(self) -> AuditReport:
        try:
            out = self.stack.docker.compose.execute("cleaner", ["python", "-m", "setqueue.runtime.audit"], tty=False)
        except DockerException as exc:  # exit 1: the audit found something, reported on stdout
            if exc.return_code != 1 or not exc.stdout:
                raise
            out = exc.stdout
        report = AuditReport.from_dict(json.loads(out or "{}"))
        self.note(
            f"final audit: {report.created} created, {report.states}, lost {report.lost}, "
            f"in two states {report.in_two_states}, duplicates {report.duplicates} "
            f"({report.unexplained_duplicates} unexplained); dependents released {report.dependents_expected} "
            f"expected / {report.dependents_released} / {report.dependents_released_twice} twice, callbacks run "
            f"{report.callbacks_expected} / {report.callbacks_ran} / {report.callbacks_ran_twice} twice"
        )
        return report

    def verdict(self, started: str, drained: bool, final: AuditReport) -> Verdict:
        postponed = (self.stack.docker.compose.logs(services=["redis"]) or "").count(POSTPONED_AOF_WRITE)
        return Verdict(
            self.plan, started, self.faults, self.workers_killed, self.redis_kills, drained, final,
            self.cleaner_samples, self.cleaner_worst, postponed, self.timeline, self.workflow_batches,
        )  # fmt: skip

    # -- the faults

    def worker_sigkill(self) -> None:
        running = self.stack.containers("worker")
        victims = self.rng.sample(running, self.rng.randint(1, len(running))) if running else []
        self.stack.docker.kill(victims, signal="SIGKILL")
        self.workers_killed += len(victims)
        down = self.rng.uniform(1, 5)
        self.note(f"worker SIGKILL: {len(victims)} of {len(running)} ({_names(victims)}); started again in {down:.1f}s")
        time.sleep(down)
        self.scale(self.workers)

    def worker_sigstop(self) -> None:
        running = self.stack.containers("worker")
        if not running:
            self.scale(self.workers)
            running = self.stack.containers("worker")
        victim = self.rng.choice(running)
        stopped = self.plan.lease_seconds + self.rng.uniform(1, 4)
        self.signal_processes(victim, "SIGSTOP")
        self.note(f"worker SIGSTOP: {victim.name} for {stopped:.1f}s (lease {self.plan.lease_seconds:g}s)")
        time.sleep(stopped)
        self.signal_processes(victim, "SIGCONT")

    def cleaner_sigkill(self) -> None:
        compose = self.stack.docker.compose
        compose.kill(services=["cleaner"], signal="SIGKILL")
        down = self.rng.uniform(2, 8)
        self.note(f"cleaner SIGKILL; started again in {down:.1f}s")
        time.sleep(down)
        compose.start(services=["cleaner"])

    def redis_sigterm(self) -> None:
        started = time.monotonic()
        self.stack.docker.compose.restart(services=["redis"], timeout=60)  # SIGTERM: Redis saves and exits
        self.wait_for_redis()
        self.note(f"Redis SIGTERM, started again: answering after {time.monotonic() - started:.1f}s")

    def redis_sigkill(self) -> None:
        """``appendfsync everysec`` loses the writes Redis postponed for a slow fsync: the probe, written
        last, tells whether acknowledged writes were lost (their ids still count as lost)."""
        (redis,) = self.stack.containers("redis")
        first_start = redis.state.started_at
        created = int(self.stack.redis("HGET", self.stack.key("audit:created"), self.plan.id_prefix) or 0)
        probe = int(self.stack.redis("INCR", PROBE_KEY))  # acknowledged: the last write before the kill
        started = time.monotonic()
        self.stack.docker.kill(redis, signal="SIGKILL")
        # Its restart policy may restart it before we look: gone, or a new start, will do.
        self.stack.wait(lambda: _state(redis), lambda s: not s[0] or s[1] != first_start, "Redis to die")
        self.stack.docker.compose.start(services=["redis"])
        self.wait_for_redis()
        kept = int(self.stack.redis("GET", PROBE_KEY) or 0) >= probe
        self.redis_kills.append(RedisKill(time.monotonic() - self.started, created, kept))
        self.note(
            f"Redis SIGKILL at creator record {created}, started again: answering after "
            f"{time.monotonic() - started:.1f}s; last acknowledged write {'kept' if kept else 'LOST'}"
        )

    def workers_scaled(self) -> None:
        before = self.workers
        self.workers = self.rng.choice([n for n in range(1, self.plan.max_workers + 1) if n != before])
        self.scale(self.workers)
        self.note(f"workers scaled {before} -> {self.workers}")

    def scale(self, workers: int) -> None:
        self.stack.docker.compose.up(
            services=["worker"], scales={"worker": workers}, detach=True, dependencies=False, quiet=True
        )

    def signal_processes(self, container: Any, signal_name: str) -> None:
        """kill(-1) from inside: every process but PID 1 (an init would not pass SIGSTOP on)."""
        code = f"import os, signal; os.kill(-1, signal.{signal_name})"
        with contextlib.suppress(DockerException):  # the container went away meanwhile
            self.stack.docker.execute(container, ["python", "-c", code])

    def wait_for_redis(self) -> None:
        self.stack.wait_for_redis(timeout=120)

    def read_cleaner_audit(self) -> dict[str, float]:
        try:
            text = self.stack.docker.compose.execute("cleaner", ["python", "-c", FETCH_METRICS], tty=False) or ""
        except DockerException:
            return {}
        values = {
            name.removeprefix("setqueue_audit_"): float(value)
            for name, _, value in (line.partition(" ") for line in text.splitlines())
            if name.startswith("setqueue_audit_")
        }
        if values:
            self.cleaner_samples += 1
            for gauge in AUDIT_GAUGES:
                self.cleaner_worst[gauge] = max(self.cleaner_worst.get(gauge, 0.0), values.get(gauge, 0.0))
        return values

    def wait_for_cleaner_audit(self, since: float, timeout: float = 60) -> None:
        self.stack.wait(
            lambda: self.read_cleaner_audit().get("last_timestamp_seconds", 0.0),
            lambda finished: finished >= since,
            "the cleaner's audit after the drain",
            timeout=timeout,
        )


def _names(containers: list[Any]) -> str:
    return ", ".join(c.name for c in containers)


def _state(container: Any) -> tuple[bool, Any]:
    container.reload()
    return bool(container.state.running), container.state.started_at


def run(plan: Plan, docker: DockerClient | None = None, say: Callable[[str], None] = print) -> Verdict:
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    docker = docker if docker is not None else DockerClient()
    say(f"chaos: {plan.minutes:g} min, {plan.jobs} jobs, seed {plan.seed}; starting the stack")
    with running_stack(
        docker, plan.settings(), plan.queue_name, services=SERVICES, project_prefix="setqueue-chaos"
    ) as stack:
        chaos = Chaos(stack, plan, say)
        chaos.scale(plan.workers)
        chaos.workflow_thread.start()
        chaos.inject_for(plan.minutes * 60)
        chaos.restore()
        chaos.finish_workflows()
        drained = chaos.drain(timeout=max(300.0, plan.minutes * 60))
        chaos.wait_for_cleaner_audit(since=time.time())  # a last audit round; nothing runs any more
        return chaos.verdict(started, drained, chaos.final_audit())


def write_results(verdict: Verdict, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stem = verdict.started.replace(" UTC", "").replace(" ", "-").replace(":", "")
    (directory / f"{stem}.json").write_text(json.dumps(verdict.as_dict(), indent=2) + "\n", encoding="utf-8")
    path = directory / f"{stem}.md"
    path.write_text(verdict.markdown(), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/chaos", description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to inject faults (default 10)")
    parser.add_argument("--rate", type=float, default=Plan.create_rate, help="jobs created per second (default 25)")
    parser.add_argument("--seed", type=int, help="seed of the fault schedule (default: random, printed)")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "chaos", help="where the raw results go")
    parser.add_argument(
        "--summary", type=Path, default=REPO / "docs" / "chaos.md", help="the current summary (tracked in git)"
    )
    args = parser.parse_args(argv)
    if not args.minutes > 0 or not args.rate > 0:
        parser.error("--minutes and --rate must be positive")
    plan = Plan(minutes=args.minutes, create_rate=args.rate, **({"seed": args.seed} if args.seed is not None else {}))
    verdict = run(plan, say=lambda line: print(line, flush=True))
    path = write_results(verdict, args.out)
    # The network section (scripts/chaos --network) is its own run's: kept as it is.
    args.summary.write_text(verdict.markdown() + network_section(args.summary), encoding="utf-8")
    print()
    print(verdict.markdown())
    print(f"chaos: results in {path}, summary in {args.summary}")
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
