"""PROCESSES=N: N worker processes under a supervisor (worker/supervisor.py); runs counted from the
handler's side (tests.support.jobs logs `start|end <id> <pid> <time>`)."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import Queue
from setqueue.runtime.logs import configure_logging
from setqueue.runtime.settings import SETTING_BY_NAME, SettingError, usable_cores
from tests.support import REPO_ROOT, RedisServer
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc, parse_metrics
from tests.support.waits import wait_until
from worker.supervisor import combine

SUCCESS = 'setqueue_jobs_completed_total{outcome="success"}'
RESTARTS = "setqueue_worker_process_restarts_total"
PROCESSES = "setqueue_worker_processes"


Start = Callable[..., tuple[Proc, ExecutionLog]]


@pytest.fixture
def start_workers(procs: list[Proc], tmp_path: Path, redis_url: str, queue_name: str) -> Start:
    def start(**settings: Any) -> tuple[Proc, ExecutionLog]:
        log = ExecutionLog(tmp_path / "executions.log")
        defaults = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "PROCESSES": 2, "IDLE_WAIT_SECONDS": 0.1}
        env = defaults | {"JOB_HANDLER": "tests.support.jobs:handle", "EXEC_LOG": log.path, **settings}
        p = Proc.start("worker", tmp_path, name="supervisor", **env)
        procs.append(p)
        return p, log

    return start


def child_pids(supervisor: Proc, count: int = 2) -> list[int]:
    """The children's pids, once /healthz says every one is up and healthy."""

    def healthy() -> list[int] | None:
        health = supervisor.healthz()
        if health is None or health[0] != 200:
            assert supervisor.alive(), supervisor.log()
            return None
        pids = [child["pid"] for child in health[1]["children"]]
        return pids if len(pids) == count else None

    pids = wait_until(healthy, 30, "every worker process healthy")
    assert pids is not None and supervisor.process.pid not in pids
    return pids


def child_ports(supervisor: Proc) -> dict[int, int]:
    """child index -> its private metrics port, from its start line."""
    pattern = r"setqueue-worker\[(\d+)\] setqueue\.worker: setqueue-worker starting: .* metrics=127\.0\.0\.1:(\d+)"
    return {int(index): int(port) for index, port in re.findall(pattern, supervisor.log())}


def child_metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return parse_metrics(response.read().decode())


def running_by_pid(log: ExecutionLog) -> dict[int, set[str]]:
    running: dict[int, set[str]] = {}
    for event, job_id, pid, _ in log.events():
        if event == "start":
            running.setdefault(pid, set()).add(job_id)
        else:
            running.get(pid, set()).discard(job_id)
    return {pid: jobs for pid, jobs in running.items() if jobs}


# -- the setting


def test_processes_takes_a_number_or_auto() -> None:
    setting = SETTING_BY_NAME["PROCESSES"]
    assert setting.default == "1" and setting.parse("1") == 1 and setting.parse(" 8 ") == 8
    assert setting.parse("auto") == setting.parse("AUTO") == min(usable_cores(), 256) >= 1
    assert usable_cores() == len(os.sched_getaffinity(0))
    for bad in ("0", "-1", "abc", "1e9", "", "257", "2.5", "inf"):
        with pytest.raises(SettingError, match="PROCESSES"):
            setting.parse(bad)


# -- the supervisor


@pytest.mark.slow
def test_two_processes_run_every_job_once_and_metrics_sum_them(
    start_workers: Start, make_queue: Callable[..., Queue]
) -> None:
    q = make_queue()
    supervisor, log = start_workers(CONCURRENCY=2, CLAIM_BATCH=2)
    pids = child_pids(supervisor)
    # 200 jobs of 20 ms on 2 x 2 slots: a second or more of work for both processes.
    ids = [f"sleep-0.02-{n}" for n in range(200)]
    q.enqueue(ids)
    wait_until(lambda: q.stats()["done"] == len(ids), 60, "every job done")

    assert log.starts() == Counter(ids) and log.ends() == Counter(ids)  # each ran exactly once
    ran_in = Counter(pid for event, _, pid, _ in log.events() if event == "end")
    assert set(ran_in) == set(pids) and len(ran_in) == 2, ran_in  # in both, neither the supervisor

    # The supervisor's /metrics sums its children's.
    wait_until(lambda: supervisor.metric(SUCCESS) == len(ids), 15, "the supervisor's sum to reach every job")
    ports = child_ports(supervisor)
    assert sorted(ports) == [0, 1]
    counts = [child_metrics(port)[SUCCESS] for port in ports.values()]
    assert sorted(counts) == sorted(ran_in.values()) and sum(counts) == len(ids)
    m = supervisor.metrics()
    assert m["setqueue_jobs_claimed_total"] == len(ids)
    assert m["setqueue_job_processing_seconds_count"] == len(ids)
    assert m["setqueue_worker_slots"] == 4  # 2 processes x CONCURRENCY 2
    assert m["setqueue_redis_up"] == 1  # the least of the children's, not their sum
    assert m[PROCESSES] == 2 and m[RESTARTS] == 0
    assert "setqueue-worker[0] " in supervisor.log() and "setqueue-worker[1] " in supervisor.log()

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0, supervisor.log()
    assert "Traceback" not in supervisor.log()


@pytest.mark.slow
def test_a_killed_process_is_replaced_and_its_jobs_come_back_through_the_cleaner(
    start_workers: Start,
    procs: list[Proc],
    tmp_path: Path,
    redis_url: str,
    queue_name: str,
    *,
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue()
    env: dict[str, Any] = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "LEASE_SECONDS": 2, "MAX_ATTEMPTS": 5}
    cleaner = Proc.start("cleaner", tmp_path, SWEEP_INTERVAL=0.2, **env)
    procs.append(cleaner)
    supervisor, log = start_workers(CONCURRENCY=2, CLAIM_BATCH=2, LEASE_SECONDS=2, MAX_ATTEMPTS=5)
    pids = child_pids(supervisor)
    ids = [f"sleep-0.5-{n}" for n in range(40)]
    q.enqueue(ids)

    busy = wait_until(lambda: running_by_pid(log), 30, "a job running")
    victim = next(iter(busy))
    assert victim in pids
    before = supervisor.metric(SUCCESS)  # the victim's acks so far are in it
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: supervisor.metric(RESTARTS) == 1, 30, "the restart")
    assert supervisor.metric(SUCCESS) >= before  # the dead one's counts stay in the sum
    replaced = child_pids(supervisor)
    assert victim not in replaced and len(set(replaced) - set(pids)) == 1
    wait_until(lambda: supervisor.metric(PROCESSES) == 2, 10, "two processes again")

    wait_until(lambda: q.stats()["done"] == len(ids), 90, "every job done")
    stats = q.stats()
    assert stats["in_progress"] == 0 and stats["failed"] == 0 and stats["todos"] == 0

    # Every job ran at least once; twice only one the victim started and did not ack.
    starts = log.starts()
    assert set(starts) == set(ids) and max(starts.values()) <= 2, starts
    started_by_victim = {job_id for event, job_id, pid, _ in log.events() if pid == victim and event == "start"}
    ended_by_victim = {job_id for event, job_id, pid, _ in log.events() if pid == victim and event == "end"}
    twice = {job_id for job_id, n in starts.items() if n == 2}
    assert started_by_victim - ended_by_victim <= twice <= started_by_victim
    assert twice, "the victim was killed in the middle of a job"

    # Each job the cleaner took back has a "lease lost" entry naming the victim.
    lost = {job_id: [h for h in q.history(job_id) if h.kind == "lease lost"] for job_id in ids}
    lost = {job_id: entries for job_id, entries in lost.items() if entries}
    assert twice <= set(lost)
    assert all(e.worker.endswith(f":{victim}") for entries in lost.values() for e in entries), lost
    assert not (set(lost) - twice) & started_by_victim  # the rest it had claimed, not started
    assert cleaner.metric("setqueue_cleaner_requeued_total") == len(lost)
    # Every ack counts but the victim's after the supervisor last read them.
    least = len(ids) - len(ended_by_victim)
    wait_until(lambda: supervisor.metric(SUCCESS) >= least, 10, "the acks counted")
    assert before <= supervisor.metric(SUCCESS) <= len(ids)
    assert "was killed by SIGKILL: restarting it in" in supervisor.log()

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(30) == 0, supervisor.log()


@pytest.mark.slow
def test_sigterm_drains_every_process_and_exits_0(start_workers: Start, make_queue: Callable[..., Queue]) -> None:
    q = make_queue()
    supervisor, log = start_workers(CONCURRENCY=2, CLAIM_BATCH=2, SHUTDOWN_GRACE_SECONDS=30)
    pids = child_pids(supervisor)
    ids = [f"sleep-1-{n}" for n in range(40)]
    q.enqueue(ids)
    wait_until(lambda: set(running_by_pid(log)) == set(pids), 30, "both processes running jobs")

    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(45) == 0, supervisor.log()
    # The running jobs finished and were acked; the rest went back to todos.
    stats = q.stats()
    assert stats["in_progress"] == 0, stats
    started = log.starts()
    assert log.ends() == started and max(started.values()) == 1
    done = q.redis.smembers(q.keys.done)
    assert {j.decode() if isinstance(j, bytes) else j for j in done} == set(started)  # type: ignore[union-attr]
    assert stats["todos"] == len(ids) - len(started) > 0
    text = supervisor.log()
    for index in (0, 1):
        assert f"setqueue-worker[{index}] setqueue.worker: SIGTERM received" in text, text
    assert "Traceback" not in text


@pytest.mark.slow
def test_a_process_stopping_for_zombie_slots_is_restarted_as_a_lone_worker_restarts(
    start_workers: Start, make_queue: Callable[..., Queue]
) -> None:
    """One rule for one process and for N (worker.restart): here the supervisor applies it."""
    q = make_queue()
    supervisor, log = start_workers(CONCURRENCY=1, CLAIM_BATCH=1, JOB_TIMEOUT_SECONDS=0.5)
    pids = child_pids(supervisor)
    q.enqueue(["stuck-1"], max_attempts=1)
    wait_until(lambda: log.starts()["stuck-1"] == 1, 30, "the stuck job to start")
    later = [f"sleep-0.01-{n}" for n in range(6)]
    q.enqueue(later)
    wait_until(lambda: q.stats()["done"] == 6 and q.stats()["failed"] == 1, 60, "the later jobs done", 0.05)
    wait_until(lambda: supervisor.metric(RESTARTS) == 1, 30, "the restart")
    (stuck_pid,) = log.pids("stuck-1")
    said = rf"worker process \d \(pid {stuck_pid}\) exited with code 4: restarting it in 0.25s"
    assert re.search(said, supervisor.log()), supervisor.log()
    assert all(log.starts()[i] == log.ends()[i] == 1 for i in later)
    assert stuck_pid in pids and q.stats()["in_progress"] == 0
    assert len(child_pids(supervisor)) == 2


# -- when it cannot keep them running


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    server = RedisServer(args=["--requirepass", "right"]).start()
    yield server
    server.cleanup()


def locked_url(server: RedisServer, password: str) -> str:
    return f"redis://:{password}@127.0.0.1:{server.port}/0"


@pytest.mark.slow
def test_redis_refusing_the_password_is_one_line_and_exit_3(start_workers: Start, locked_redis: RedisServer) -> None:
    # The supervisor checks once before any child starts: one line, as a lone worker says it.
    supervisor, _ = start_workers(REDIS_URL=locked_url(locked_redis, "wrong"))
    assert supervisor.wait(30) == 3, supervisor.log()
    lines = supervisor.log().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("setqueue-worker: Redis at redis://:***@"), lines
    assert "refused us" in lines[0]


@pytest.mark.slow
def test_a_process_refused_by_redis_at_start_stops_the_supervisor_with_3(start_workers: Start) -> None:
    server = RedisServer(args=["--requirepass", "right"]).start()
    try:
        supervisor, _ = start_workers(REDIS_URL=locked_url(server, "right"))
        pids = child_pids(supervisor)
        # The password changes under the running workers (their connections stay logged in); a
        # process starting now is refused, and would be again: no restart loop.
        admin = redis.Redis(port=server.port, password="right")
        admin.config_set("requirepass", "changed")
        admin.close()
        os.kill(pids[0], signal.SIGKILL)
        assert supervisor.wait(60) == 3, supervisor.log()
        text = supervisor.log()
        assert text.count("restarting it in") == 1, text  # the killed one, once
        assert "exited with code 3 (Redis refuses us): not restarting it; stopping the others" in text
        assert "refused us: it refused the user or password in REDIS_URL" in text
    finally:
        server.cleanup()


CRASHING = """
def configure_worker(settings):
    raise RuntimeError("cannot start: the database is gone")

def handle(lease):
    pass
"""


@pytest.mark.slow
def test_processes_that_keep_crashing_make_it_give_up_with_1(start_workers: Start, tmp_path: Path) -> None:
    (tmp_path / "crashing.py").write_text(CRASHING)
    supervisor, _ = start_workers(JOB_HANDLER="crashing:handle", PYTHONPATH=str(tmp_path))
    assert supervisor.wait(90) == 1, supervisor.log()
    text = supervisor.log()
    assert re.search(r"worker process \d \(pid \d+\) exited with code 1 after 5 restarts within 60s: giving up", text)
    assert "setqueue-worker stopped (exit code 1)" in text


# -- the sums, in-process


def test_combine_sums_counts_and_takes_the_least_redis_up() -> None:
    from prometheus_client import CollectorRegistry, Counter, Gauge  # noqa: PLC0415

    def process(done: int, up: int, held: int) -> list[Any]:
        registry = CollectorRegistry()
        Counter("setqueue_jobs_completed", "Done.", ["queue"], registry=registry).labels("q").inc(done)
        Gauge("setqueue_redis_up", "Up.", registry=registry).set(up)
        Gauge("setqueue_jobs_in_progress", "Held.", registry=registry).set(held)
        Gauge("setqueue_seconds_since_sweep", "Since.", ["queue"], registry=registry).labels("q").set(held)
        return list(registry.collect())

    combined = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in combine([process(3, 1, 2), process(4, 0, 5)])
        for s in family.samples
    }
    assert combined[("setqueue_jobs_completed_total", (("queue", "q"),))] == 7
    assert combined[("setqueue_redis_up", ())] == 0
    assert combined[("setqueue_jobs_in_progress", ())] == 7
    assert combined[("setqueue_seconds_since_sweep", (("queue", "q"),))] == 5


def test_the_compose_stacks_scale_workers_by_replicas() -> None:
    # One process per container: compose restarts it, Prometheus scrapes each replica. Read as text:
    # the cluster file's !override tags are compose's, not YAML's.
    for name in ("docker-compose.yml", "docker-compose.cluster.yml"):
        values = re.findall(r"^\s*PROCESSES:\s*(.*?)\s*$", (REPO_ROOT / name).read_text(), re.M)
        assert all(value.strip("\"'") == "1" for value in values), (name, values)


def test_a_child_says_its_index_in_json_logs_too() -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", "setqueue-worker", stream=stream, child=3)
    try:
        logging.getLogger("setqueue.worker").info("hello")
    finally:
        logging.getLogger().handlers.clear()
    record = json.loads(stream.getvalue())
    assert record["child"] == 3 and record["service"] == "setqueue-worker" and record["message"] == "hello"
