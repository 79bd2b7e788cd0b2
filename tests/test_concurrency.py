"""Real workers, two SIGKILLed mid-job, and a cleaner: every id ends in done, and a job ran twice only
when its lease was lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
import redis

from setqueue import Queue
from setqueue.limits import LIMIT_STATS
from tests.support import REPO_ROOT
from tests.support.actors import executions_key

JOBS = 1500


class Worker:
    def __init__(self, url: str, name: str, lease: float, job_seconds: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.actors", "work", url, name, str(lease), str(job_seconds)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        self.claimed: list[str] = []
        self.acked: dict[str, bool] = {}
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            if "claimed" in event:
                self.claimed.append(event["claimed"])
            else:
                self.acked[event["acked"]] = event["ok"]

    @property
    def holding(self) -> set[str]:
        return set(self.claimed) - set(self.acked)


@pytest.mark.slow
def test_killed_workers_lose_nothing(
    redis_url: str, queue_name: str, make_queue: Callable[..., Queue], client: redis.Redis
) -> None:
    q = make_queue(lease_seconds=1.0, max_attempts=100)
    q.enqueue([f"job-{i}" for i in range(JOBS)])
    # The doomed take 0.2 s a job, so a kill right after a claim lands mid-job; the survivors are fast.
    workers = [Worker(redis_url, queue_name, lease=1.0, job_seconds=t) for t in (0.2, 0.2, 0.002, 0.002)]
    doomed = workers[:2]
    requeued: list[str] = []
    try:
        deadline = time.monotonic() + 60
        for victim, threshold in zip(doomed, (JOBS // 4, JOBS // 2), strict=True):
            while q.stats()["done"] < threshold or not victim.holding:
                assert time.monotonic() < deadline, "the workers made no progress"
                time.sleep(0.005)
            victim.process.send_signal(signal.SIGKILL)  # mid-job: it holds a claimed, unacked job
            victim.process.wait()
            victim.reader.join(5)
        while True:  # the cleaner's part, in this process
            requeued += q.sweep().requeued
            stats = q.stats()
            if stats["done"] == JOBS:
                break
            assert time.monotonic() < deadline, f"jobs are stuck: {stats}"
            time.sleep(0.1)
    finally:
        for w in workers:
            if w.process.poll() is None:
                w.process.wait(30)
    zero = (
        "todos",
        "in_progress",
        "failed",
        "scheduled",
        "cancelled",
        "waiting",
        "results_kept",
        "oldest_pending_age_seconds",
    )
    expected = {**dict.fromkeys(zero, 0), "done": JOBS, "todos_by_priority": {}, **dict.fromkeys(LIMIT_STATS, 0)}
    assert q.stats() | {"oldest_pending_age_seconds": 0} == expected
    executions = {k: int(v) for k, v in client.hgetall(executions_key(q)).items()}  # type: ignore[union-attr]
    assert set(executions) == {f"job-{i}" for i in range(JOBS)}  # every job ran
    held_by_the_dead = {job for w in doomed for job in w.holding}
    assert held_by_the_dead & set(requeued), "no job of the killed workers came back through the cleaner"
    for job in held_by_the_dead - set(requeued):  # killed after its ack applied, before it said so
        assert executions[job] == 1
    duplicates = {job for job, n in executions.items() if n > 1}
    assert duplicates <= set(requeued)  # a job ran twice only if its lease was lost
    survivors_acks = [ok for w in workers[2:] for ok in w.acked.values()]
    assert all(survivors_acks)
