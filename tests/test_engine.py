"""The worker engine: concurrency, timeouts, hand-back, zombies, shutdown; runs counted from the
handler's execution log, not the queue's view."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from setqueue import Queue
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import wait_until

HANDLERS = {"threads": "tests.support.jobs:handle", "async": "tests.support.jobs:handle_async"}


@pytest.fixture
def execlog(tmp_path: Path) -> ExecutionLog:
    return ExecutionLog(tmp_path / "executions.log")


@pytest.fixture
def worker(
    procs: list[Proc], tmp_path: Path, execlog: ExecutionLog, redis_url: str, queue_name: str
) -> Callable[..., Proc]:
    def start(name: str = "w", **settings: Any) -> Proc:
        settings = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "EXEC_LOG": str(execlog.path), **settings}
        settings.setdefault("JOB_HANDLER", HANDLERS["threads"])
        p = Proc.start("worker", tmp_path, name=name, **settings)
        procs.append(p)
        p.wait_ready()
        return p

    return start


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["threads", "async"])
def test_a_worker_runs_concurrency_jobs_at_once(
    worker: Callable[..., Proc], execlog: ExecutionLog, make_queue: Callable[..., Queue], *, kind: str
) -> None:
    q = make_queue()
    worker(CONCURRENCY=5, JOB_HANDLER=HANDLERS[kind])
    q.enqueue([f"sleep-1-{n}" for n in range(10)])
    wait_until(lambda: q.stats()["done"] == 10, 60, "ten jobs done")
    assert execlog.most_at_once() == 5
    assert set(execlog.starts().values()) == {1} and len(execlog.starts()) == 10


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["threads", "async"])
def test_a_hung_job_times_out_and_the_rest_of_its_claim_carries_on(
    worker: Callable[..., Proc], execlog: ExecutionLog, make_queue: Callable[..., Queue], *, kind: str
) -> None:
    q = make_queue()
    q.enqueue(["spin-1"])
    w = worker(
        CONCURRENCY=2,
        CLAIM_BATCH=10,
        JOB_TIMEOUT_SECONDS=1,
        MAX_ATTEMPTS=1,
        JOB_HANDLER=HANDLERS[kind],
    )
    wait_until(lambda: execlog.starts()["spin-1"] == 1, 30, "the hanging job to start")
    others = [f"sleep-0.05-{n}" for n in range(20)]
    q.enqueue(others)
    wait_until(lambda: q.stats()["done"] == 20 and q.stats()["failed"] == 1, 60, "the others done, the hung one failed")
    info = q.inspect("spin-1")
    assert info is not None and info.state == "failed" and (info.error or "").startswith("timeout"), info
    assert all(execlog.starts()[i] == 1 and execlog.ends()[i] == 1 for i in others)
    assert w.metric("setqueue_job_timeouts_total") == 1
    assert w.metric("setqueue_worker_zombie_threads") == 0  # the timeout landed: the slot is back
    assert w.alive()


@pytest.mark.slow
def test_unstarted_jobs_are_handed_back_rather_than_wait_behind_a_hung_one(
    worker: Callable[..., Proc], execlog: ExecutionLog, make_queue: Callable[..., Queue]
) -> None:
    q = make_queue()
    # One slot, no timeout, a 3 s lease: a job may wait for a slot a third of it.
    settings = {"CONCURRENCY": 1, "CLAIM_BATCH": 10, "LEASE_SECONDS": 3, "JOB_TIMEOUT_SECONDS": 0}
    busy = worker(name="busy", **settings)
    q.enqueue(["stuck-1"])
    wait_until(lambda: execlog.starts()["stuck-1"] == 1, 30, "the stuck job to start")
    others = [f"quick-{n}" for n in range(9)]
    q.enqueue(others)  # the busy worker prefetches them behind its stuck job
    idle = worker(name="idle", **settings)
    wait_until(lambda: q.stats()["done"] == 9, 30, "the other jobs done")
    idle_pid = idle.process.pid
    assert all(execlog.pids(i) == {idle_pid} and execlog.starts()[i] == 1 for i in others)
    assert execlog.starts()["stuck-1"] == 1
    assert q.stats()["in_progress"] == 1  # the stuck job, still held by its worker
    assert busy.alive() and idle.alive()


@pytest.mark.slow
def test_zombie_slots_restart_the_worker_in_place_with_nothing_lost(
    worker: Callable[..., Proc], execlog: ExecutionLog, make_queue: Callable[..., Queue]
) -> None:
    """Started as users start it (``python -m worker``, PROCESSES unset, no process manager): its jobs
    block in C past their timeout on every slot, so it stops itself, and runs itself again in place."""
    q = make_queue()
    q.enqueue(["stuck-1", "stuck-2"], max_attempts=1)
    w = worker(CONCURRENCY=2, CLAIM_BATCH=5, JOB_TIMEOUT_SECONDS=0.5)
    wait_until(lambda: execlog.starts()["stuck-1"] == execlog.starts()["stuck-2"] == 1, 30, "both slots stuck")
    later = [f"sleep-0.01-{n}" for n in range(4)]
    q.enqueue(later)  # claimed behind the stuck ones, handed back when it stops

    def later_done() -> bool:
        assert w.alive(), w.log()  # exited, and nothing restarts it
        stats = q.stats()
        return bool(stats["done"] == 4 and stats["failed"] == 2)

    wait_until(later_done, 60, "the later jobs done", 0.05)
    log = w.log()
    assert "2 of 2 slots are zombies" in log and "restarting this worker" in log, log
    assert log.count("setqueue-worker starting") == 2, log
    # Each later job ran once, after the restart, in the very process the user started.
    assert all(execlog.starts()[i] == execlog.ends()[i] == 1 for i in later)
    assert all(execlog.pids(i) == {w.process.pid} for i in later)
    stats = q.stats()
    assert stats["in_progress"] == stats["todos"] == stats["scheduled"] == 0, stats
    for stuck in ("stuck-1", "stuck-2"):
        info = q.inspect(stuck)
        assert info is not None and info.state == "failed" and (info.error or "").startswith("timeout"), info


@pytest.mark.slow
def test_a_worker_whose_slots_keep_turning_zombie_gives_up_after_five_restarts(
    worker: Callable[..., Proc], execlog: ExecutionLog, make_queue: Callable[..., Queue]
) -> None:
    """The supervisor's rule: 0.25 s doubling per restart within a minute, the sixth exit is the last."""
    q = make_queue()
    q.enqueue(["stuck-1"], max_attempts=20)
    w = worker(CONCURRENCY=1, JOB_TIMEOUT_SECONDS=0.5, RETRY_BACKOFF_SECONDS=0)
    assert w.wait(120) == 4, w.log()
    log = w.log()
    waits = re.findall(r"restarting this worker \(pid \d+\) in ([\d.]+)s", log)
    assert waits == ["0.25", "0.50", "1.00", "2.00", "4.00"], log
    assert "its slots became zombies again after 5 restarts within 60s: giving up (exit code 4)" in log
    assert execlog.starts()["stuck-1"] == 6
    info = q.inspect("stuck-1")  # failed by its timeouts, retried: never lost
    assert info is not None and info.state == "todos" and info.attempts == 6, info


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["threads", "async"])
def test_sigterm_never_runs_a_finished_job_again(
    worker: Callable[..., Proc], execlog: ExecutionLog, make_queue: Callable[..., Queue], *, kind: str
) -> None:
    q = make_queue()
    jobs = [f"sleep-0.3-{n}" for n in range(30)]
    q.enqueue(jobs)
    settings: dict[str, Any] = {"CLAIM_BATCH": 5, "CONCURRENCY": 5, "JOB_HANDLER": HANDLERS[kind]}
    settings["SHUTDOWN_GRACE_SECONDS"] = 0.2
    first = worker(name="first", **settings)
    wait_until(lambda: sum(execlog.ends().values()) >= 7, 30, "some jobs finished")
    signalled = time.time()
    first.signal(signal.SIGTERM)
    assert first.wait(30) == 0, first.log()
    assert q.stats()["in_progress"] == 0
    # Jobs finished before the grace ended were acked, even those unacked at the signal: never run
    # again. One still running then is handed back and runs again, even if it returned while exiting.
    grace_over = signalled + 0.2
    finished = {i for event, i, _, at in execlog.events() if event == "end" and at < grace_over}
    assert len(finished) >= 7
    settings["SHUTDOWN_GRACE_SECONDS"] = 20
    worker(name="second", **settings)
    wait_until(lambda: q.stats()["done"] == 30, 60, "every job done")
    starts = execlog.starts()
    assert all(starts[i] == 1 for i in finished), {i: starts[i] for i in finished if starts[i] != 1}
    assert set(execlog.ends()) == set(jobs)
