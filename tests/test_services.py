"""The creator, worker and cleaner as real processes on a real redis-server; every wait polls a state."""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cleaner.service import CleanerService
from creator.service import CreatorService
from setqueue import Lease, PermanentJobError, Queue
from setqueue.runtime.settings import CleanerSettings, CreatorSettings, WorkerSettings
from tests.support import PersistentRedisServer, free_port
from tests.support.procs import Proc, base_env
from tests.support.waits import wait_until
from worker.service import WorkerService

SUCCESS = 'setqueue_jobs_completed_total{outcome="success"}'
FAILURE = 'setqueue_jobs_completed_total{outcome="failure"}'


@pytest.fixture
def start(procs: list[Proc], tmp_path: Path) -> Callable[..., Proc]:
    def run(module: str, name: str | None = None, **settings: object) -> Proc:
        p = Proc.start(module, tmp_path, name=name, **settings)
        procs.append(p)
        return p

    return run


def common(redis_url: str, queue_name: str, **extra: Any) -> dict[str, Any]:
    return {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, **extra}


def done_count(q: Queue) -> int:
    return int(q.stats()["done"])


def env_of(redis_url: str, queue_name: str, **extra: Any) -> dict[str, str]:
    return base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0, **extra)


def run_in_thread(service: WorkerService, until: Callable[[], bool], what: str) -> list[int]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(service.run()))
    thread.start()
    wait_until(until, 30, what)
    service.request_stop()
    thread.join(30)
    return codes


@pytest.mark.slow
def test_pipeline_survives_a_killed_worker(
    start: Callable[..., Proc], redis_url: str, queue_name: str, make_queue: Callable[..., Queue]
) -> None:
    total = 2000
    q = make_queue()
    env = common(redis_url, queue_name, LEASE_SECONDS=2, MAX_ATTEMPTS=5)
    cleaner = start("cleaner", SWEEP_INTERVAL=0.2, **env)
    # Jobs so slow the victim finishes none: it surely holds leases when killed.
    victim = start("worker", name="victim", WORK_SECONDS=30, CLAIM_BATCH=5, **env)
    victim.wait_ready()
    creator = start("creator", CREATE_RATE=0, CREATE_TOTAL=total, CREATE_BATCH=200, CREATE_ID_PREFIX="e2e", **env)
    wait_until(lambda: victim.metric("setqueue_jobs_in_progress") > 0, 30, "the victim to hold jobs")
    workers = [
        start("worker", name=f"worker{i}", WORK_SECONDS=0.002, WORK_JITTER=0.5, FAIL_RATE=0.05, **env) for i in range(3)
    ]

    # It stops prefetching a second after its last job started and hands back its buffer; wait for that.
    def victim_view() -> tuple[float, float, float]:
        m = victim.metrics()
        return m["setqueue_jobs_claimed_total"], m["setqueue_jobs_released_total"], m["setqueue_jobs_in_progress"]

    settled: list[tuple[float, float, float]] = []

    def steady() -> bool:
        settled.append(victim_view())
        return len(settled) > 20 and len(set(settled[-20:])) == 1  # the same for 2 s

    wait_until(steady, 60, "the victim to settle")
    victim_claimed, victim_released, victim_held = settled[-1]
    assert victim.metric(SUCCESS) == 0
    victim.signal(signal.SIGKILL)
    victim.wait(10)

    assert creator.wait(60) == 0, creator.log()
    assert f"created {total} new jobs (0 duplicates)" in creator.log()
    wait_until(lambda: q.stats()["done"] + q.stats()["failed"] == total, 60, "every job to finish")
    wait_until(lambda: cleaner.metric('setqueue_queue_depth{state="done"}') == q.stats()["done"], 30, "depth gauge")
    stats = q.stats()
    assert stats["todos"] == 0 and stats["in_progress"] == 0

    # The victim's jobs came back through the cleaner, and nowhere else.
    requeued = cleaner.metric("setqueue_cleaner_requeued_total")
    assert requeued == victim_held == victim_claimed - victim_released > 0
    assert cleaner.metric("setqueue_jobs_dead_lettered_total") == 0

    # The workers' metrics agree with Redis: each done job acked once, each claim moved one id out of todos.
    m = [w.metrics() for w in workers]
    assert sum(x[SUCCESS] for x in m) == stats["done"]
    assert sum(x["setqueue_jobs_dead_lettered_total"] for x in m) == stats["failed"]
    assert sum(x[FAILURE] for x in m) == sum(
        x["setqueue_jobs_retried_total"] + x["setqueue_jobs_dead_lettered_total"] for x in m
    )
    released = victim_released + sum(x["setqueue_jobs_released_total"] for x in m)
    assert sum(x["setqueue_jobs_claimed_total"] for x in m) + victim_claimed == (
        total + requeued + released + sum(x["setqueue_jobs_retried_total"] for x in m)
    )
    assert sum(x["setqueue_stale_acks_total"] for x in m) == 0
    assert all(x["setqueue_jobs_in_progress"] == 0 for x in m)
    assert all(x["setqueue_redis_up"] == 1 for x in [*m, cleaner.metrics()])
    assert sum(x["setqueue_job_end_to_end_seconds_count"] for x in m) == stats["done"]
    for p in [*workers, cleaner]:
        health = p.healthz()
        assert health is not None and health[0] == 200 and health[1]["status"] == "ok"
    # No per-job lines at INFO.
    for w in workers:
        assert len(w.log().splitlines()) < 10, w.log()
    assert "requeued" in cleaner.log()


Busy = Callable[..., tuple[Queue, Proc, int]]


@pytest.fixture
def busy(start: Callable[..., Proc], redis_url: str, queue_name: str, make_queue: Callable[..., Queue]) -> Busy:
    """A worker holding some of 40 jobs: (its queue, it, how many it claimed)."""

    def run(**settings: Any) -> tuple[Queue, Proc, int]:
        q = make_queue()
        q.enqueue([f"job-{n}" for n in range(40)])
        worker = start("worker", CLAIM_BATCH=4, **common(redis_url, queue_name, LEASE_SECONDS=30), **settings)
        wait_until(lambda: worker.try_get("/metrics") and worker.metric("setqueue_jobs_in_progress") > 0, 30, "busy")
        return q, worker, int(worker.metric("setqueue_jobs_claimed_total"))

    return run


def _no_orphans(q: Queue) -> None:
    stats = q.stats()
    assert stats["in_progress"] == 0, q.redis.smembers(q.keys.in_progress)
    assert stats["todos"] + stats["done"] == 40


@pytest.mark.slow
def test_sigterm_finishes_held_jobs_then_exits_0(busy: Busy) -> None:
    q, worker, _ = busy(WORK_SECONDS=0.3, WORK_JITTER=0, SHUTDOWN_GRACE_SECONDS=30)
    worker.signal(signal.SIGTERM)
    assert worker.wait(45) == 0, worker.log()
    _no_orphans(q)
    assert q.stats()["done"] >= 1
    assert "SIGTERM received" in worker.log()


@pytest.mark.slow
def test_sigterm_past_the_grace_period_hands_jobs_back(busy: Busy) -> None:
    q, worker, claimed = busy(WORK_SECONDS=60, SHUTDOWN_GRACE_SECONDS=0.5)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.log()
    _no_orphans(q)
    assert q.stats()["todos"] == 40  # all handed back, the running one too
    assert "jobs still running: handing them back" in worker.log()
    again = q.claim(40)  # a release does not use up an attempt
    assert len(again) == 40
    assert claimed > 0 and all(lease.attempt == 1 for lease in again)


@pytest.mark.slow
def test_second_signal_exits_at_once(busy: Busy) -> None:
    _, worker, _ = busy(WORK_SECONDS=60, SHUTDOWN_GRACE_SECONDS=60)
    worker.signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM received" in worker.log(), 10, "the first signal to be logged")
    worker.signal(signal.SIGTERM)
    assert worker.wait(10) == 128 + signal.SIGTERM


@pytest.fixture
def own_redis() -> Iterator[PersistentRedisServer]:
    server = PersistentRedisServer().start()
    yield server
    server.cleanup()


@pytest.mark.slow
def test_redis_outage_is_waited_out_and_nothing_is_lost(
    start: Callable[..., Proc], own_redis: PersistentRedisServer, queue_name: str
) -> None:
    total = 1000
    env = common(own_redis.url, queue_name, LEASE_SECONDS=5)
    q = Queue.from_url(own_redis.url, name=queue_name)
    cleaner = start("cleaner", SWEEP_INTERVAL=0.2, **env)
    workers = [start("worker", name=f"w{i}", WORK_SECONDS=0.003, **env) for i in range(2)]
    creator = start("creator", CREATE_RATE=250, CREATE_TOTAL=total, CREATE_ID_PREFIX="out", **env)
    services = [cleaner, *workers, creator]
    for p in services:
        p.wait_ready()
    wait_until(lambda: done_count(q) >= 100, 30, "some progress")
    for p in services:
        health = p.healthz()
        assert health is not None and health[0] == 200

    own_redis.stop()
    for p in [cleaner, *workers]:
        wait_until(lambda p=p: (p.healthz() or (0,))[0] == 503, 20, f"{p.name} /healthz 503")  # type: ignore[misc]
        wait_until(lambda p=p: p.metric("setqueue_redis_up") == 0, 20, f"{p.name} redis_up 0")  # type: ignore[misc]
    wait_until(lambda: creator.metric("setqueue_redis_up") == 0, 20, "creator redis_up 0")
    wait_until(lambda: all("retry 2 in" in p.log() for p in services), 30, "a third try in every service")
    own_redis.start()

    assert creator.wait(60) == 0, creator.log()
    wait_until(lambda: done_count(q) == total, 60, "every created job to be done")
    ids = [f"out-{n}" for n in range(1, total + 1)]
    pipe = q.redis.pipeline()
    for job_id in ids:
        pipe.sismember(q.keys.done, job_id)
    assert all(pipe.execute())
    for p in [cleaner, *workers]:
        wait_until(lambda p=p: p.metric("setqueue_redis_up") == 1, 20, f"{p.name} redis_up 1")  # type: ignore[misc]
        wait_until(lambda p=p: (p.healthz() or (0,))[0] == 200, 20, f"{p.name} /healthz 200")  # type: ignore[misc]
        log = p.log()
        assert "redis unavailable" in log and "redis reachable again" in log, log
        assert log.count("redis reachable again") == 1, log
        assert "Traceback" not in log, log
    created_line = [line for line in creator.log().splitlines() if "created" in line and "new jobs" in line]
    assert created_line, creator.log()
    q.close()


# -- in-process pieces


def test_healthz_reports_a_stuck_loop(redis_url: str, queue_name: str) -> None:
    service = CleanerService(CleanerSettings.from_env(env_of(redis_url, queue_name)))
    try:
        ok, body = service.health()
        assert ok and body["status"] == "ok"
        service._last_beat -= 1000
        ok, body = service.health()
        assert not ok and body["status"] == "stuck"
    finally:
        service.close()


def test_healthz_reports_redis_down(queue_name: str) -> None:
    service = CleanerService(CleanerSettings.from_env(env_of(f"redis://127.0.0.1:{free_port()}/0", queue_name)))
    ok, body = service.health()
    assert not ok and body["status"] == "redis_unreachable" and body["redis"] == "down"
    service.close()


def test_worker_in_process_acks_fails_and_dead_letters(redis_url: str, queue_name: str) -> None:
    settings = WorkerSettings.from_env(env_of(redis_url, queue_name, MAX_ATTEMPTS=2, IDLE_WAIT_SECONDS=0.05))

    def handler(lease: Lease) -> None:
        if lease.id == "bad":
            raise ValueError("always fails")
        if lease.id == "fatal":
            raise PermanentJobError("cannot be retried")

    service = WorkerService(settings, handler=handler)
    q = service.queue.shards[0]
    q.enqueue(["a", "b", "bad", "fatal"])
    assert run_in_thread(service, lambda: q.stats()["done"] + q.stats()["failed"] == 4, "all four to finish") == [0]
    stats = q.stats()
    assert stats["done"] == 2 and stats["failed"] == 2 and stats["todos"] == 0 and stats["in_progress"] == 0
    info = q.inspect("bad")
    assert info is not None and "always fails" in (info.error or "")
    sample = service.metrics.registry.get_sample_value
    mine = {"queue": queue_name}
    assert sample("setqueue_jobs_completed_total", {**mine, "outcome": "success"}) == 2
    assert sample("setqueue_jobs_dead_lettered_total", mine) == 2
    assert sample("setqueue_jobs_retried_total", mine) == 1
    service.close()


def test_retry_waits_out_errors_without_raising(
    redis_url: str, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    service = CleanerService(CleanerSettings.from_env(env_of(redis_url, queue_name)))
    service._backoff.base = 0.001
    calls = iter([redis.ConnectionError("down"), redis.TimeoutError("slow"), redis.BusyLoadingError("loading")])

    def flaky() -> str:
        error = next(calls, None)
        if error is not None:
            raise error
        return "ok"

    with caplog.at_level("WARNING"):
        assert service.retry(flaky, "test") == "ok"
    lines = [r.getMessage() for r in caplog.records]
    assert len([line for line in lines if "unavailable" in line]) == 3
    assert len([line for line in lines if "reachable again" in line]) == 1
    assert service.metrics.registry.get_sample_value("setqueue_redis_up") == 1
    service.close()


def test_creator_reads_ids_from_stdin_and_counts_duplicates(redis_url: str, queue_name: str) -> None:
    env = env_of(redis_url, queue_name, CREATE_FROM_STDIN="true")
    creator = CreatorService(CreatorSettings.from_env(env), stdin=io.StringIO("a\n\nb\n  c \na\n"))
    creator.target.enqueue(["b"])
    assert creator.run() == 0
    assert (creator.sent, creator.created, creator.duplicates) == (4, 2, 2)
    sample = creator.metrics.registry.get_sample_value
    mine = {"queue": queue_name}
    assert sample("setqueue_jobs_created_total", mine) == 2 and sample("setqueue_jobs_duplicate_total", mine) == 2
    assert creator.queue.stats()["todos"] == 3
    creator.close()


def test_creator_paces_by_a_monotonic_schedule(redis_url: str, queue_name: str) -> None:
    env = env_of(redis_url, queue_name, CREATE_RATE=200, CREATE_TOTAL=100, CREATE_ID_PREFIX="p")
    creator = CreatorService(CreatorSettings.from_env(env))
    started = time.monotonic()
    assert creator.run() == 0
    assert time.monotonic() - started >= 0.4  # a lower bound only: 100 ids at 200/s
    assert creator.created == 100
    info = creator.target.inspect("p-100")
    assert info is not None and info.state == "todos"
    creator.close()


@pytest.mark.slow
def test_idle_worker_stops_at_once_on_sigterm(start: Callable[..., Proc], redis_url: str, queue_name: str) -> None:
    # Idle, it blocks on the wake-up list; a signal interrupts that wait.
    worker = start("worker", IDLE_WAIT_SECONDS=60, **common(redis_url, queue_name))
    worker.wait_ready()
    wait_until(lambda: "working with handler" in worker.log(), 15, "the worker loop")
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()
    assert "Traceback" not in worker.log()


# -- what a newcomer trips on


ASYNC_JOBS = """
import asyncio

async def handle(lease):
    await asyncio.sleep(0.01)
    raise RuntimeError("an async handler that fails once it has run")
"""


def test_an_async_handler_runs_and_its_failure_fails_the_job(
    tmp_path: Path, redis_url: str, queue_name: str, make_queue: Callable[..., Queue]
) -> None:
    (tmp_path / "asyncjobs.py").write_text(ASYNC_JOBS)
    q = make_queue()
    q.enqueue(["a", "b", "c"])
    env = env_of(redis_url, queue_name, MAX_ATTEMPTS=1, JOB_HANDLER="asyncjobs:handle")
    with worker_process([sys.executable, "-m", "worker"], env, tmp_path) as worker:
        wait_until(lambda: q.stats()["failed"] == 3 or worker.poll() is not None, 30, "three dead letters")
        assert q.stats()["done"] == 0
        info = q.inspect("a")
        assert info is not None and "fails once it has run" in (info.error or "")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0


@contextlib.contextmanager
def worker_process(command: list[str], env: dict[str, str], cwd: Path) -> Iterator[subprocess.Popen[str]]:
    worker = subprocess.Popen(command, env=env, cwd=cwd, stderr=subprocess.PIPE, text=True)
    try:
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()


def test_a_handler_returning_an_awaitable_has_it_awaited(redis_url: str, queue_name: str) -> None:
    ran: list[str] = []

    async def work(lease: Lease) -> None:
        ran.append(lease.id)

    def handler(lease: Lease) -> Any:
        return work(lease)  # a plain function that hands back a coroutine: the worker awaits it

    service = WorkerService(
        WorkerSettings.from_env(env_of(redis_url, queue_name, IDLE_WAIT_SECONDS=0.05)), handler=handler
    )
    q = service.queue.shards[0]
    q.enqueue(["a", "b", "c"])
    run_in_thread(service, lambda: q.stats()["done"] == 3, "the three jobs done")
    assert sorted(ran) == ["a", "b", "c"]
    service.close()


MY_JOBS = """
from pathlib import Path

def handle(lease):
    Path(lease.id + ".ran").write_text("ran")
"""


def test_the_setqueue_worker_command_imports_handlers_from_the_current_directory(
    tmp_path: Path, redis_url: str, queue_name: str, make_queue: Callable[..., Queue]
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "myjobs.py").write_text(MY_JOBS)
    q = make_queue()
    q.enqueue(["a", "b"])
    command = str(Path(sys.executable).parent / "setqueue-worker")
    env = env_of(redis_url, queue_name, JOB_HANDLER="myjobs:handle")
    with worker_process([command], env, jobs) as worker:
        wait_until(lambda: q.stats()["done"] == 2 or worker.poll() is not None, 30, "both jobs done")
        assert worker.poll() is None, worker.communicate()[1]
        assert sorted(p.name for p in jobs.glob("*.ran")) == ["a.ran", "b.ran"]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0


def reachable(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5):
            return True
    except urllib.error.HTTPError:
        return True  # it answered
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@pytest.mark.parametrize(("extra", "outside"), [({}, True), ({"METRICS_HOST": "127.0.0.1"}, False)])
def test_metrics_host_decides_where_metrics_listen(
    start: Callable[..., Proc], redis_url: str, queue_name: str, *, extra: dict[str, str], outside: bool
) -> None:
    # 127.0.0.2 is this host but not 127.0.0.1: it stands for "another interface".
    cleaner = start("cleaner", **common(redis_url, queue_name), **extra)
    cleaner.wait_ready()
    assert reachable("127.0.0.1", cleaner.port)
    assert reachable("127.0.0.2", cleaner.port) is outside
