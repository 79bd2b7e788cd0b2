"""Several queues served as one (QueueGroup): strict priority in list order, each lease naming its
queue, every call reaching the queue of its lease."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cleaner.service import CleanerService
from setqueue import FailOutcome, Lease, MoveTo, Queue, open_queue
from setqueue.factory import QueueGroup, ShardedQueue
from setqueue.runtime.settings import CleanerSettings, WorkerSettings
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc, base_env
from tests.support.waits import wait_until
from worker.service import WorkerService


@pytest.fixture
def two(queue_name: str, redis_url: str) -> Iterator[QueueGroup]:
    urgent = Queue.from_url(redis_url, f"{queue_name}-urgent", max_attempts=2, retry_backoff_seconds=0)
    bulk = Queue.from_url(redis_url, f"{queue_name}-bulk", max_attempts=2, retry_backoff_seconds=0)
    group = QueueGroup([urgent, bulk])
    yield group
    group.close()


def test_strict_priority_in_list_order(two: QueueGroup) -> None:
    urgent, bulk = two.queues
    bulk.enqueue([f"b{n}" for n in range(5)])
    urgent.enqueue(["u0", "u1"])
    assert [(lease.id, lease.queue) for lease in two.claim(3)] == [
        ("u0", urgent.name),
        ("u1", urgent.name),
        ("b0", bulk.name),
    ]
    urgent.enqueue(["u2"])
    assert [lease.id for lease in two.claim(1)] == ["u2"]  # a later queue waits while an earlier has work
    assert [lease.id for lease in two.claim(10)] == ["b1", "b2", "b3", "b4"]


def test_every_call_reaches_the_queue_of_its_lease(two: QueueGroup) -> None:
    urgent, bulk = two.queues
    urgent.enqueue(["same-id", "u"])
    bulk.enqueue(["same-id", "b"])  # one id in two queues: two jobs
    leases = two.claim(4)
    assert sorted((lease.queue, lease.id) for lease in leases) == sorted(
        [(urgent.name, "same-id"), (urgent.name, "u"), (bulk.name, "same-id"), (bulk.name, "b")]
    )
    assert all(two.renew_many(leases))
    assert [r.acked for r in two.ack_many(leases[:2])] == [True, True]
    assert two.fail(leases[2], "boom", retry=False) is FailOutcome.DEAD
    assert two.release(leases[3:]) == [FailOutcome.RELEASED]
    stats = two.stats()
    assert stats["queues"][urgent.name]["done"] == 2 and stats["queues"][bulk.name]["failed"] == 1
    assert (stats["done"], stats["failed"], stats["todos"]) == (2, 1, 1)


def test_an_idle_worker_wakes_for_any_of_its_queues(two: QueueGroup, redis_url: str) -> None:
    for member in two.queues:
        producer = Queue.from_url(redis_url, member.name)
        started = time.monotonic()
        producer.enqueue(["wake"])
        assert two.wait_for_work(5) and time.monotonic() - started < 2
        producer.close()


def test_a_group_may_hold_a_sharded_queue(redis_url: str, queue_name: str) -> None:
    sharded = open_queue(redis_url, f"{queue_name}-big", shards=3)
    plain = open_queue(redis_url, f"{queue_name}-small")
    group = QueueGroup([plain, sharded])
    sharded.enqueue([f"s{n}" for n in range(9)])
    leases = group.claim(20)
    assert len(leases) == 9 and {lease.queue for lease in leases} == {sharded.name}
    assert all(r.acked for r in group.ack_many(leases))
    assert group.stats()["queues"][sharded.name]["done"] == 9


@pytest.mark.parametrize("names", [["a"], ["a", "a"]])
def test_a_group_needs_two_different_queues(redis_url: str, queue_name: str, names: list[str]) -> None:
    with pytest.raises(ValueError, match="two or more different"):
        QueueGroup([Queue.from_url(redis_url, f"{queue_name}-{n}") for n in names])


@pytest.mark.slow
def test_one_worker_serves_two_queues_first_things_first(
    procs: list[Proc], tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    """QUEUE_NAME=<urgent>,<bulk>: every urgent job runs before any bulk one."""
    execlog = ExecutionLog(tmp_path / "executions.log")
    urgent, bulk = f"{queue_name}-urgent", f"{queue_name}-bulk"
    group = open_queue(redis_url, [urgent, bulk])
    assert isinstance(group, QueueGroup)
    group.member(bulk).enqueue([f"b{n}" for n in range(10)])  # queued first, served last
    group.member(urgent).enqueue([f"u{n}" for n in range(5)])
    logged = {"EXEC_LOG": str(execlog.path), "JOB_HANDLER": "tests.support.jobs:handle"}
    queues = f"{urgent},{bulk}"
    procs.append(
        Proc.start("worker", tmp_path, REDIS_URL=redis_url, QUEUE_NAME=queues, CONCURRENCY=1, CLAIM_BATCH=2, **logged)
    )
    wait_until(lambda: group.stats()["done"] == 15, 60, "every job done")
    started = [job_id for event, job_id, _, _ in execlog.events() if event == "start"]
    assert started == [f"u{n}" for n in range(5)] + [f"b{n}" for n in range(10)]
    group.close()


@pytest.mark.slow
def test_workers_and_a_cleaner_drain_a_sharded_queue_once_each(
    procs: list[Proc], tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    execlog = ExecutionLog(tmp_path / "executions.log")
    sharded = open_queue(redis_url, queue_name, shards=4)
    assert isinstance(sharded, ShardedQueue)
    ids = [f"job-{n}" for n in range(400)]
    sharded.enqueue(ids)
    assert all(s["todos"] > 50 for s in sharded.stats()["shards"])
    settings: dict[str, Any] = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "QUEUE_SHARDS": 4}
    logged = {"EXEC_LOG": str(execlog.path), "JOB_HANDLER": "tests.support.jobs:handle"}
    procs += [Proc.start("worker", tmp_path, name=f"w{n}", **logged, **settings) for n in range(2)]
    procs.append(Proc.start("cleaner", tmp_path, SWEEP_INTERVAL=0.2, **settings))
    wait_until(lambda: sharded.stats()["done"] == 400, 60, "every job done")
    assert execlog.starts() == dict.fromkeys(ids, 1)
    sharded.close()


def test_a_handler_moves_a_job_to_another_queue(redis_url: str, queue_name: str) -> None:
    inbox, review = f"{queue_name}-inbox", f"{queue_name}-review"

    def handler(lease: Lease) -> None:
        if lease.queue == inbox and lease.id.startswith("suspicious"):
            raise MoveTo(review, priority=3)

    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=inbox, METRICS_PORT=0, IDLE_WAIT_SECONDS=0.05)
    service = WorkerService(WorkerSettings.from_env(env), handler=handler)
    source = service.queue.shards[0]
    source.enqueue({"fine": "a", "suspicious-1": "b"})
    thread = threading.Thread(target=service.run)
    thread.start()
    try:
        wait_until(lambda: source.stats()["done"] == 2, 30, "both jobs finished in the inbox")
    finally:
        service.request_stop()
        thread.join(30)
    moved = Queue.from_url(redis_url, review).inspect("suspicious-1")
    assert moved is not None and (moved.state, moved.payload, moved.priority) == ("todos", "b", 3)
    assert Queue.from_url(redis_url, review).inspect("fine") is None


def test_a_cleaner_of_several_queues_creates_periodic_runs_in_the_first(redis_url: str, queue_name: str) -> None:
    names = f"{queue_name}-a,{queue_name}-b"
    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=names, METRICS_PORT=0, SCHEDULES="tick=* * * * *")
    cleaner = CleanerService(CleanerSettings.from_env(env))
    first, second = (Queue.from_url(redis_url, n) for n in names.split(","))
    try:
        now = time.time()
        cleaner.create_periodic_runs(now)  # first seen: the slot is recorded, nothing runs
        [run] = cleaner.create_periodic_runs(now + 60)
        assert first.stats()["todos"] == 1 and second.stats()["todos"] == 0
        info = first.inspect(run)
        assert info is not None and info.state == "todos"
    finally:
        cleaner.close()
        first.close()
        second.close()


@pytest.mark.parametrize(
    ("setting", "extra"),
    [
        ("SCHEDULES", {"QUEUE_SHARDS": "3", "SCHEDULES": "tick=* * * * *"}),
        ("AUDIT", {"QUEUE_SHARDS": "3", "AUDIT": "true"}),
        ("AUDIT", {"QUEUE_NAME": "{q}-1,{q}-2", "AUDIT": "true"}),
    ],
)
def test_what_needs_one_unsharded_queue_is_refused_with_one_line_and_exit_2(
    redis_url: str, queue_name: str, client: redis.Redis, tmp_path: Path, *, setting: str, extra: dict[str, str]
) -> None:
    given = {key: value.replace("{q}", queue_name) for key, value in extra.items()}
    env = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "METRICS_PORT": "0", **given}
    cleaner = Proc.start("cleaner", tmp_path, **env)
    assert cleaner.wait(30) == 2
    [line] = cleaner.log().strip().splitlines()
    assert f"invalid setting {setting}: needs" in line
    assert not list(client.scan_iter(match=f"setqueue:{{{queue_name}*"))
