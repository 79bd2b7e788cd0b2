"""Limits with real workers, starts counted from the handler's side: rates, group concurrency
and turns, pause and resume, limits changed live, and idle workers that do not spin."""

from __future__ import annotations

import io
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import Queue
from setqueue.runtime.cli import main as cli
from tests.support import RedisServer
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import redis_clock, wait_until


@pytest.fixture
def log(tmp_path: Path) -> ExecutionLog:
    return ExecutionLog(tmp_path / "exec.log")


@pytest.fixture
def start_workers(
    procs: list[Proc], tmp_path: Path, redis_url: str, queue_name: str, log: ExecutionLog
) -> Callable[..., list[Proc]]:
    def start(n: int, **settings: object) -> list[Proc]:
        env = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "EXEC_LOG": log.path, "LOG_LEVEL": "WARNING"}
        env |= {"JOB_HANDLER": "tests.support.jobs:handle", **settings}
        workers = [Proc.start("worker", tmp_path, name=f"worker-{i}", **env) for i in range(n)]
        procs.extend(workers)
        for worker in workers:
            worker.wait_ready()
        return workers

    return start


def start_times(log: ExecutionLog, prefix: str = "") -> list[float]:
    return sorted(at for event, job_id, _, at in log.events() if event == "start" and job_id.startswith(prefix))


def most_in_a_second(times: list[float]) -> int:
    """The most starts in any one-second window beginning at a start."""
    best, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= 1.0:
            first += 1
        best = max(best, last - first + 1)
    return best


def most_at_once(log: ExecutionLog, prefix: str) -> int:
    running = best = 0
    rows = [row for row in log.events() if row[1].startswith(prefix) and row[0] in ("start", "end")]
    for event, *_ in sorted(rows, key=lambda row: (row[3], row[0] == "start")):
        running += 1 if event == "start" else -1
        best = max(best, running)
    return best


def run_cli(redis_url: str, queue: str, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = cli(["--redis-url", redis_url, "--queue", queue, *args], out=out)
    return code, out.getvalue()


def test_a_rate_holds_across_four_workers_of_ten_slots(
    start_workers: Callable[..., list[Proc]], log: ExecutionLog, queue: Queue, redis_url: str, queue_name: str
) -> None:
    queue.enqueue([f"sleep-0.01-{i}" for i in range(800)])
    assert run_cli(redis_url, queue_name, "limit", "--rate", "50/s")[0] == 0  # burst 5: a tenth
    workers = start_workers(4, CONCURRENCY=10)
    wait_until(lambda: len(start_times(log)) >= 500, 30, "500 starts (ten seconds at 50/s)")
    times = start_times(log)
    assert most_in_a_second(times) <= 50 + 5, most_in_a_second(times)
    assert all(count == 1 for count in log.starts().values())
    held = sum(worker.metric('setqueue_claims_held_total{reason="rate"}') for worker in workers)
    assert held > 0


def test_a_group_runs_at_most_its_concurrency_while_slots_are_free(
    start_workers: Callable[..., list[Proc]], log: ExecutionLog, queue: Queue
) -> None:
    queue.set_group_limits(concurrency=2)
    queue.enqueue([f"sleep-0.1-{i}" for i in range(30)], group="tenant-42")
    workers = start_workers(4, CONCURRENCY=10)
    wait_until(lambda: sum(log.ends().values()) == 30, 60, "all 30 jobs done")
    assert most_at_once(log, "sleep") == 2
    assert sum(worker.metric('setqueue_claims_held_total{reason="group"}') for worker in workers) > 0
    wait_until(lambda: queue.groups() == [], 10, "the group's last jobs acked")


def test_a_small_group_is_served_before_a_big_one_has_run_twice_the_slots(
    start_workers: Callable[..., list[Proc]], log: ExecutionLog, queue: Queue
) -> None:
    workers, slots = 4, 10
    queue.enqueue([f"sleep-0.05-a{i}" for i in range(2000)], group="A")
    start_workers(workers, CONCURRENCY=slots)
    wait_until(lambda: len(start_times(log, "sleep-0.05-a")) >= 100, 30, "group A running")
    enqueued_at = time.time()  # the handlers' clock: the same machine's
    queue.enqueue([f"sleep-0.05-b{i}" for i in range(10)], group="B")
    wait_until(lambda: len(start_times(log, "sleep-0.05-b")) == 10, 30, "every B job started")
    last_b = max(start_times(log, "sleep-0.05-b"))
    a_times = start_times(log, "sleep-0.05-a")
    a_meanwhile = [at for at in a_times if enqueued_at < at < last_b]
    # The A jobs prefetched already (at most CLAIM_BATCH a worker), then A and B taking turns.
    print(f"A started {len(a_meanwhile)} jobs while B's 10 started (bound {2 * workers * slots})")
    assert len(a_meanwhile) < 2 * workers * slots, len(a_meanwhile)
    # B did not wait for A's backlog: A still had jobs to start when B's last one started. (A's rest
    # takes 2.5 s on 40 slots, jobs of 50 ms: time for B's claims on a loaded machine, where jobs of
    # 5 ms left it a quarter of a second; counting A's starts at any later time races with it.)
    assert len([at for at in a_times if at <= last_b]) < 2000


def test_after_pause_returns_no_job_starts_and_resume_starts_them_at_once(
    start_workers: Callable[..., list[Proc]], log: ExecutionLog, queue: Queue, redis_url: str, queue_name: str
) -> None:
    queue.enqueue([f"sleep-0.05-{i}" for i in range(400)])
    workers = start_workers(2, CONCURRENCY=5)
    wait_until(lambda: len(start_times(log)) >= 20, 30, "jobs running")
    code, out = run_cli(redis_url, queue_name, "pause")
    assert code == 0 and "paused" in out
    # Only what was claimed before pause returned may still start.
    claimed_before = set(queue.redis.zrange(queue.keys.in_progress, 0, -1)) | set(
        queue.redis.smembers(queue.keys.done)  # type: ignore[arg-type]
    )
    claimed_before = {c.decode() if isinstance(c, bytes) else c for c in claimed_before}
    wait_until(
        lambda: sum(w.metric('setqueue_claims_held_total{reason="paused"}') for w in workers) >= 4,
        30,
        "the workers' claims held back by the pause",
    )
    assert set(log.starts()) <= claimed_before
    assert queue.stats()["paused"] == 1
    started = len(start_times(log))
    resumed_at = redis_clock(queue.redis)
    assert run_cli(redis_url, queue_name, "resume")[0] == 0
    wait_until(lambda: len(start_times(log)) > started, 5, "a start after resume")
    first_after = min(at for at in start_times(log) if at > resumed_at - 0.001)
    assert first_after - resumed_at < 1.0


def test_a_limit_changed_with_the_cli_takes_effect_on_running_workers(
    start_workers: Callable[..., list[Proc]], log: ExecutionLog, queue: Queue, redis_url: str, queue_name: str
) -> None:
    assert run_cli(redis_url, queue_name, "push", "--group", "g", *[f"sleep-0.5-{i}" for i in range(60)])[0] == 0
    assert run_cli(redis_url, queue_name, "limit", "--group-concurrency", "1")[0] == 0
    start_workers(2, CONCURRENCY=5)
    wait_until(lambda: len(start_times(log)) >= 2, 30, "the group running one at a time")
    assert most_at_once(log, "sleep") == 1
    changed_at = redis_clock(queue.redis)
    code, out = run_cli(redis_url, queue_name, "limit", "--group-concurrency", "4")
    assert code == 0 and "concurrency 4" in out

    def four_running() -> float | None:
        running, when = 0, None
        for event, _, _, at in sorted(log.events(), key=lambda row: (row[3], row[0] == "start")):
            running += 1 if event == "start" else -1
            if running >= 4 and when is None:
                when = at
        return when

    when = wait_until(four_running, 10, "four of the group running at once")
    assert when is not None and when - changed_at < 1.0


@pytest.fixture
def quiet_redis() -> Iterator[RedisServer]:
    """Its own redis-server: its command count is this test's alone."""
    server = RedisServer().start()
    yield server
    server.cleanup()


def calls_per_second(server: RedisServer, seconds: float) -> float:
    """Commands per second clients sent over ``seconds`` of its clock, per MONITOR; not a script's own
    calls inside Redis, nor this measure's."""
    client = redis.Redis.from_url(server.url)
    ours = str(client.client_info()["addr"])
    monitor = subprocess.Popen(["redis-cli", "-p", str(server.port), "monitor"], stdout=subprocess.PIPE, text=True)
    assert monitor.stdout is not None
    assert monitor.stdout.readline().strip() == "OK"
    until = redis_clock(client) + seconds
    wait_until(lambda: redis_clock(client) >= until, seconds + 10, f"{seconds}s of the Redis clock", interval=0.5)
    monitor.kill()
    lines = monitor.stdout.read().splitlines()
    client.close()
    calls = [line for line in lines if "[0 lua]" not in line and ours not in line and "] " in line]
    return len(calls) / seconds


@pytest.mark.parametrize("limit", ["paused", "rate", "group"])
def test_an_idle_worker_held_back_by_limits_does_not_spin(
    start_workers: Callable[..., list[Proc]], log: ExecutionLog, quiet_redis: RedisServer, queue_name: str, limit: str
) -> None:
    url = quiet_redis.url
    queue = Queue.from_url(url, queue_name)
    if limit == "paused":
        queue.enqueue([f"job-{i}" for i in range(100)])
        queue.pause()
    elif limit == "rate":
        queue.enqueue([f"job-{i}" for i in range(100)])
        queue.set_rate("1/min", burst=1)
    else:
        queue.set_group_limits(concurrency=1)
        queue.enqueue([f"stuck-{i}" for i in range(100)], group="g")
    queue.redis.delete(queue.keys.wake)  # the enqueue's wake-ups: a worker starting now needs none
    [worker] = start_workers(1, CONCURRENCY=10, REDIS_URL=url)
    held = f'setqueue_claims_held_total{{reason="{limit}"}}'
    # Past its start: idle rounds held back, one a second.
    wait_until(lambda: worker.metric(held) >= 4, 30, "four claims held back")
    rate = calls_per_second(quiet_redis, 3)
    print(f"idle worker held back ({limit}): {rate:.1f} Redis calls a second")
    assert rate <= 5, f"{rate:.1f} Redis calls a second from an idle worker"  # its claim, its wait, a look at the sweep
    assert len(log.starts()) <= 1
    queue.close()


def test_the_creator_spreads_its_ids_over_groups(
    procs: list[Proc], tmp_path: Path, queue: Queue, redis_url: str, queue_name: str
) -> None:
    env: dict[str, Any] = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "CREATE_TOTAL": 30, "CREATE_BATCH": 5}
    creator = Proc.start("creator", tmp_path, CREATE_RATE=0, CREATE_GROUPS=3, CREATE_ID_PREFIX="c", **env)
    procs.append(creator)
    assert creator.wait(30) == 0
    assert {(g.name, g.waiting) for g in queue.groups()} == {("group-1", 10), ("group-2", 10), ("group-3", 10)}
    assert queue.inspect("c-6") is not None and queue.inspect("c-6").group == "group-2"  # type: ignore[union-attr]
