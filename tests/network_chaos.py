"""The network part of the chaos run (``scripts/chaos --network``): the scenarios of
tests/test_network.py, several rounds, judged as the tests judge them (0 lost, 0 unexplained re-runs,
every recovery under its bound), and the claim path measured through the fault proxy at 5 and 50 ms
round trip with 10% jitter. Its summary replaces the "Network" section of docs/chaos.md.

No Docker: real redis-server, worker, cleaner and creator processes on this host.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from setqueue import Queue, open_queue
from setqueue.sharded import shard_names
from tests.support import RedisServer
from tests.support.cluster import RedisClusterNodes
from tests.support.faultproxy import FaultProxy
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.redis_server import REPO_ROOT
from tests.support.waits import wait_until

SECTION = "## Network"
# The other shards flow again within this of a Cluster node's cut (docs/guide.md#network): a call
# meeting the cut node waits out (1 + 5 redis-py resends) x REDIS_TIMEOUT_SECONDS (0.5 s here) before
# the node is passed over; a claim and an ack may each meet it once, and 1 s for the rest.
CUT_FOUND_SECONDS = 2 * 6 * 0.5 + 1
SCENARIOS = {
    "test_a_worker_blackholed_for_twice_its_lease_is_fenced_and_serves_again": (
        "worker blackholed (half-open, both ways) for 2 x its 2 s lease while running jobs",
        "heal → it notices its lost leases (refused renewal or late ack)",
    ),
    "test_with_the_cleaner_blackholed_jobs_flow_and_a_worker_sweeps_in_its_stead": (
        "cleaner blackholed; a worker holding jobs dies",
        "last sweep → a worker sweeps in its stead (STANDIN_SWEEP_SECONDS 2)",
    ),
    "test_a_result_waiter_whose_subscription_went_silent_still_sees_the_end[blackhole]": (
        "result() waiter (blocking client): its subscription blackholed as its job ends",
        "end of job → result() returns (resubscribe, catch-up read)",
    ),
    "test_a_result_waiter_whose_subscription_went_silent_still_sees_the_end[reset]": (
        "result() waiter (blocking client): its subscription reset as its job ends",
        "end of job → result() returns (redis-py reconnects, catch-up read)",
    ),
    "test_an_async_result_waiter_whose_subscription_went_silent_still_sees_the_end": (
        "result() waiter (asyncio client): its subscription blackholed as its job ends",
        "end of job → result() returns",
    ),
    "test_an_idle_worker_whose_connection_went_silent_sees_new_work": (
        "idle worker: its connection blackholed as a job is enqueued",
        "heal → the new job runs",
    ),
    "test_a_creator_whose_enqueue_replies_are_lost_resends_and_counts_each_job_once": (
        "creator: replies blackholed while an enqueue applies, resent past redis-py's resends",
        "—",
    ),
}


@dataclass
class Outcome:
    test: str
    passed: bool
    seconds: float
    figures: dict[str, str]


@dataclass
class Latency:
    round_trip_ms: float
    jobs: int
    jobs_per_second: float
    claim_ms: float  # median claim(10) call through the proxy
    renew_ms: float  # median renewal of 10 leases
    lease_floor_seconds: float  # the lease rule's least lease at the default REDIS_TIMEOUT_SECONDS


@dataclass
class ClusterCut:
    """One Cluster master cut off from every client (its replica's link kept, so no failover)."""

    jobs: int
    cut_seconds: float
    before_per_shard: float  # jobs/s of each other shard before the cut
    flowing_after_seconds: float  # cut -> the other shards flowing again (a second's worth done)
    first_half_per_shard: float  # in the first half of the cut (the cut node found out)
    during_per_shard: float  # and in its second half
    resumed_seconds: float  # heal -> the cut shard's first job done
    done: int
    failed: int
    reruns: int
    unexplained_reruns: int

    @property
    def passed(self) -> bool:
        return self.done + self.failed == self.jobs and self.failed == 0 and self.unexplained_reruns == 0


@dataclass
class NetworkRun:
    started: str
    rounds: int
    outcomes: list[list[Outcome]] = field(default_factory=list)
    latency: list[Latency] = field(default_factory=list)
    cluster: ClusterCut | None = None

    @property
    def passed(self) -> bool:
        scenarios = all(o.passed for round_ in self.outcomes for o in round_)
        return scenarios and (self.cluster is None or self.cluster.passed)


def run_scenarios(rounds: int, out: Path, say: Any) -> list[list[Outcome]]:
    results: list[list[Outcome]] = []
    for n in range(1, rounds + 1):
        report = out / f"network-round-{n}.xml"
        command = [
            sys.executable, "-m", "pytest", "tests/test_network.py", "-q", "-p", "no:cacheprovider",
            "-o", "junit_family=xunit1", "--junitxml", str(report),
        ]  # fmt: skip
        subprocess.run(command, cwd=REPO_ROOT, check=False, capture_output=True, text=True)
        outcomes = []
        for case in ET.parse(report).getroot().iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            figures = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
            outcomes.append(Outcome(case.get("name", ""), not failed, float(case.get("time", "0")), figures))
        say(f"round {n}: {sum(o.passed for o in outcomes)} of {len(outcomes)} scenarios passed")
        results.append(outcomes)
    return results


def measure_latency(round_trip: float, jobs: int, out: Path) -> Latency:
    """One worker (default CONCURRENCY and CLAIM_BATCH, a handler that returns at once) draining ``jobs``
    through the proxy at ``round_trip`` ± 10% (0: the proxy alone): jobs/s between 10% and 90% done."""
    server = RedisServer().start()
    try:
        with FaultProxy(server.port, seed=1) as proxy:
            proxy.set_latency(round_trip, jitter=0.1)
            name = f"latency-{uuid.uuid4().hex[:8]}"
            direct = Queue.from_url(server.url, name=name)
            through = Queue.from_url(proxy.url(), name=name)
            direct.enqueue([f"probe-{n}" for n in range(200)])
            claims, renewals = [], []
            for _ in range(10):
                started = time.monotonic()
                leases = through.claim(10)
                claims.append(time.monotonic() - started)
                started = time.monotonic()
                through.renew_outcomes(leases)
                renewals.append(time.monotonic() - started)
                through.ack_many(leases)
            direct.enqueue([f"job-{n}" for n in range(jobs)])
            worker = Proc.start(
                "worker", out, name=f"latency-worker-{round(round_trip * 1000)}ms",
                REDIS_URL=proxy.url(), QUEUE_NAME=name, WORK_SECONDS=0, FAIL_RATE=0, WORKER_HEARTBEAT_SECONDS=0,
            )  # fmt: skip
            try:
                total = 100 + jobs
                wait_until(lambda: direct.stats()["done"] >= 100 + jobs // 10, 600, "10% done", 0.02)
                start_done, start_at = direct.stats()["done"], time.monotonic()
                wait_until(lambda: direct.stats()["done"] >= total - jobs // 10, 600, "90% done", 0.02)
                rate = (direct.stats()["done"] - start_done) / (time.monotonic() - start_at)
            finally:
                worker.stop()
            direct.close()
            through.close()
    finally:
        server.cleanup()
    timeout = 5.0  # REDIS_TIMEOUT_SECONDS' default
    return Latency(
        round_trip_ms=round_trip * 1000,
        jobs=jobs,
        jobs_per_second=round(rate, 1),
        claim_ms=round(statistics.median(claims) * 1000, 1),
        renew_ms=round(statistics.median(renewals) * 1000, 1),
        lease_floor_seconds=round(3 * (timeout + 1 + round_trip), 1),
    )


def cluster_partition(jobs: int, cut_seconds: float, out: Path) -> ClusterCut:
    """A 3-shard queue on a 3-master Cluster drained by 2 workers and a cleaner (lease 2 s, timeouts
    0.5 s); one shard's master is cut off from them for ``cut_seconds``."""
    cluster = RedisClusterNodes().start()
    procs: list[Proc] = []
    log_path = out / "cluster-exec.log"
    log_path.unlink(missing_ok=True)
    try:
        cluster.wait_ready()
        name = cluster.evenly_sharded_name("cut", 3)
        masters = cluster.shard_masters(name, 3)
        shards = shard_names(name, 3)
        direct = {shard: Queue(cluster.client(master), shard) for shard, master in zip(shards, masters, strict=True)}
        queue = open_queue(cluster.url(), name, shards=3)
        queue.enqueue([f"sleep-0.01-{n}" for n in range(jobs)])
        env = {
            "REDIS_URL": cluster.url(masters[1]), "QUEUE_NAME": name, "QUEUE_SHARDS": 3, "LEASE_SECONDS": 2,
            "REDIS_TIMEOUT_SECONDS": 0.5, "JOB_HANDLER": "tests.support.jobs:handle", "EXEC_LOG": str(log_path),
            "WORKER_HEARTBEAT_SECONDS": 0,
        }  # fmt: skip
        procs.append(Proc.start("cleaner", out, name="cluster-cleaner", SWEEP_INTERVAL=0.5, **env))
        for n in range(2):
            procs.append(Proc.start("worker", out, name=f"cluster-worker-{n}", CONCURRENCY=4, **env))

        def others() -> int:
            return sum(q.stats()["done"] for shard, q in direct.items() if shard != shards[0])

        wait_until(lambda: others() >= jobs // 20, 120, "the other shards flowing", 0.05)
        started, begin = time.monotonic(), others()
        wait_until(lambda: others() >= begin + jobs // 10, 120, "a tenth more done", 0.05)
        before = (others() - begin) / (time.monotonic() - started) / 2
        with cluster.clients_cut(masters[0]):
            # The fault's length is the scenario, not a wait for a condition. Its first half holds the
            # first timeouts on the cut node (until it is passed over); the second is the steady state.
            start, at = others(), time.monotonic()
            # Flowing again: the other shards did a second's worth of their rate before the cut.
            wait_until(lambda: others() >= start + 2 * before, cut_seconds, "flow", 0.05)
            flowing_after = time.monotonic() - at
            time.sleep(max(0.0, at + cut_seconds / 2 - time.monotonic()))
            half, at_half = others(), time.monotonic()
            time.sleep(cut_seconds / 2)
            first_half = (half - start) / (at_half - at) / 2
            during = (others() - half) / (time.monotonic() - at_half) / 2
        healed = time.monotonic()
        cut_shard = direct[shards[0]]
        base = cut_shard.stats()["done"]
        wait_until(lambda: cut_shard.stats()["done"] > base, 120, "the cut shard resuming", 0.02)
        resumed = time.monotonic() - healed
        wait_until(lambda: queue.stats()["todos"] + queue.stats()["in_progress"] == 0, 300, "drained", 0.2)
        stats = queue.stats()
        starts = ExecutionLog(log_path).starts()
        reruns = {job_id: n for job_id, n in starts.items() if n > 1}
        unexplained = [
            job_id
            for job_id, n in reruns.items()
            if n > 1 + sum(1 for entry in queue.history(job_id) if entry.kind == "lease lost")
        ]
        queue.close()
        return ClusterCut(
            jobs, cut_seconds, round(before, 1), round(flowing_after, 2), round(first_half, 1), round(during, 1),
            round(resumed, 2), stats["done"], stats["failed"], sum(n - 1 for n in reruns.values()), len(unexplained),
        )  # fmt: skip
    finally:
        for proc in procs:
            proc.stop()
        cluster.cleanup()


def markdown(run: NetworkRun) -> str:
    lines = [
        SECTION,
        "",
        f"`scripts/chaos --network`, {run.started}: the scenarios of `tests/test_network.py`,"
        f" {run.rounds} round{'s' if run.rounds > 1 else ''},"
        " through the fault proxy (`tests/support/faultproxy.py`) between the services and a local"
        " redis-server; the services' `REDIS_TIMEOUT_SECONDS` is 0.5 s and their lease 2 s. Measured on a busy"
        " 2-core host shared with other work: times are upper figures, never promises.",
        "",
        "| scenario | recovery measured | worst of the rounds | its stated bound | lost | unexplained re-runs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for test, (scenario, recovery) in SCENARIOS.items():
        runs = [o for round_ in run.outcomes for o in round_ if o.test == test]
        if not runs:
            continue
        worst = max((float(o.figures.get("recovery_seconds", "0")) for o in runs), default=0.0)
        bound = runs[0].figures.get("bound_seconds")
        passed = all(o.passed for o in runs)
        worst_text = f"{worst:.2f} s" if bound else "—"
        bound_text = f"{float(bound):.2f} s" if bound else "—"
        lost = "0" if passed else "**see the run**"
        reruns = "0" if passed else "**see the run**"
        what = scenario
        if test.startswith("test_a_creator"):
            created = runs[0].figures.get("created", "?")
            what = f"{scenario} ({created} jobs created, none added or counted twice)"
        lines.append(f"| {what} | {recovery} | {worst_text} | {bound_text} | {lost} | {reruns} |")
    swept = [o.figures.get("swept") for r in run.outcomes for o in r if o.test.startswith("test_a_worker_blackholed")]
    lines += [
        "",
        f"The cut-off worker's jobs swept and run elsewhere per round: {', '.join(s or '?' for s in swept)}; its late"
        " acks refused each time (`setqueue_stale_acks_total`), and it served new jobs after the heal. Every re-run"
        " had a lost lease in its job's history.",
        "",
        "**Latency** (`REDIS_TIMEOUT_SECONDS` 5 s, the defaults: `CONCURRENCY` 10, `CLAIM_BATCH` 10, a handler"
        " that returns at once; one worker through the proxy, ±10% jitter):",
        "",
        "| round trip | claim path, jobs/s | one claim of 10 | one renewal of 10 leases | least lease by the rule |",
        "|---:|---:|---:|---:|---:|",
    ]
    for lat in run.latency:
        lines.append(
            f"| {lat.round_trip_ms:g} ms | {lat.jobs_per_second:,.0f} | {lat.claim_ms:g} ms | {lat.renew_ms:g} ms |"
            f" {lat.lease_floor_seconds:g} s |"
        )
    if (cut := run.cluster) is not None:
        lines += [
            "",
            f"**A Cluster node cut off** (iptables, its replica's link kept: no failover): a 3-shard queue on 3"
            f" masters, {cut.jobs:,} jobs of 10 ms, 2 workers and a cleaner (lease 2 s, `REDIS_TIMEOUT_SECONDS`"
            f" 0.5 s); one shard's master cut off from them for {cut.cut_seconds:g} s. Each other shard:"
            f" {cut.before_per_shard:g} jobs/s before; flowing again {cut.flowing_after_seconds:g} s into the cut"
            f" (each service's first calls to the cut node wait out their timeouts; the guide's bound:"
            f" {CUT_FOUND_SECONDS:g} s), {cut.first_half_per_shard:g} jobs/s over the cut's first half,"
            f" {cut.during_per_shard:g} jobs/s over its second; the cut shard's jobs resumed"
            f" {cut.resumed_seconds:g} s after the heal;"
            f" {cut.done:,} done, {cut.failed} failed, 0 lost; {cut.reruns} re-runs, {cut.unexplained_reruns}"
            " without a lost lease to explain them.",
        ]
    lines += [
        "",
        "The rule ([guide](guide.md#network)): `LEASE_SECONDS >= 3 x (REDIS_TIMEOUT_SECONDS + 1 s + round trip)`;"
        " the default 30 s lease keeps renewals safe far beyond these round trips.",
        "",
        f"**{'PASS' if run.passed else 'FAIL'}**: "
        + ("nothing lost, every re-run explained, every recovery within its bound." if run.passed else "see the run."),
        "",
    ]
    return "\n".join(lines)


def replace_section(summary: Path, section: str) -> None:
    """docs/chaos.md with its network section (to the end of the file) replaced by ``section``."""
    text = summary.read_text(encoding="utf-8") if summary.exists() else ""
    head = text.split(f"\n{SECTION}\n", 1)[0].rstrip("\n")
    summary.write_text(f"{head}\n\n{section}", encoding="utf-8")


def network_section(summary: Path) -> str:
    """The network section of ``summary`` ("" if none), for the compose run to keep."""
    text = summary.read_text(encoding="utf-8") if summary.exists() else ""
    parts = text.split(f"\n{SECTION}\n", 1)
    return f"\n{SECTION}\n{parts[1]}" if len(parts) == 2 else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/chaos --network", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="times the scenarios run (default 3)")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs drained at 5 ms (a fifth of them at 50 ms)")
    parser.add_argument("--cluster-jobs", type=int, default=6000, help="jobs of the Cluster partition (0: skip it)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "chaos", help="where the raw results go")
    parser.add_argument("--summary", type=Path, default=REPO_ROOT / "docs" / "chaos.md", help="the summary")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.jobs < 100:
        parser.error("--rounds must be 1 or more and --jobs 100 or more")
    args.out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    run = NetworkRun(now.strftime("%Y-%m-%d %H:%M UTC"), args.rounds)

    def say(line: str) -> None:
        print(line, flush=True)

    run.outcomes = run_scenarios(args.rounds, args.out, say)
    with tempfile.TemporaryDirectory(prefix="network-chaos-") as logs:
        for round_trip, jobs in ((0.0, args.jobs), (0.005, args.jobs), (0.05, args.jobs // 5)):
            latency = measure_latency(round_trip, jobs, Path(logs))
            say(f"{latency.round_trip_ms:g} ms: {latency.jobs_per_second:g} jobs/s, renewal {latency.renew_ms:g} ms")
            run.latency.append(latency)
        if args.cluster_jobs:
            run.cluster = cluster_partition(args.cluster_jobs, 12.0, Path(logs))
            say(f"cluster cut: {run.cluster}")
    stem = now.strftime("%Y-%m-%d-%H%M")
    (args.out / f"network-{stem}.json").write_text(json.dumps(asdict(run), indent=2) + "\n", encoding="utf-8")
    section = markdown(run)
    replace_section(args.summary, section)
    print()
    print(section)
    print(f"chaos --network: raw results in {args.out}, summary in {args.summary}")
    return 0 if run.passed else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
