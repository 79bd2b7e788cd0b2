"""The scheduled state: delayed enqueue, retry backoff, RetryLater; times on the Redis clock."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from setqueue import FailOutcome, Lease, Queue, RetryLater
from setqueue.runtime.settings import WorkerSettings
from tests.support.procs import base_env
from tests.support.waits import wait_until
from worker.service import WorkerService


def redis_now(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return float(seconds) + micros / 1e6


def claim_one(q: Queue, timeout: float = 30) -> Lease:
    leases: list[Lease] = wait_until(lambda: q.claim(1), timeout, "a job to become claimable", interval=0.02)
    return leases[0]


def test_a_delayed_job_is_claimed_once_due_and_not_before(queue: Queue) -> None:
    assert queue.enqueue(["later"], delay=1.0) == 1
    info = queue.inspect("later")
    assert info is not None and info.state == "scheduled" and info.due_at is not None
    assert queue.stats()["scheduled"] == 1 and queue.stats()["todos"] == 0
    lease = claim_one(queue)  # no cleaner runs: claim itself promotes due jobs
    assert lease.id == "later"
    assert info.due_at <= lease.claimed_at < info.due_at + 1.0
    assert queue.stats()["scheduled"] == 0


def test_at_in_the_past_means_now_and_at_in_the_future_waits(queue: Queue) -> None:
    assert queue.enqueue(["now"], at=time.time() - 3600) == 1
    assert queue.stats()["todos"] == 1
    assert queue.enqueue({"tomorrow": "p"}, at=time.time() + 86400) == 1
    info = queue.inspect("tomorrow")
    assert info is not None and info.state == "scheduled" and info.payload == "p"
    assert [lease.id for lease in queue.claim(10)] == ["now"]


def test_a_scheduled_job_can_be_deleted_and_is_not_enqueued_twice(queue: Queue) -> None:
    queue.enqueue(["mail"], delay=3 * 86400)
    assert queue.enqueue(["mail"]) == 0
    assert queue.enqueue(["mail"], delay=5) == 0
    assert queue.delete("mail") == "scheduled"
    assert queue.inspect("mail") is None and queue.stats()["scheduled"] == 0


@pytest.mark.parametrize(
    "options", [{"delay": -1}, {"delay": math.nan}, {"delay": math.inf}, {"at": math.inf}, {"delay": 1, "at": 1}]
)
def test_bad_times_are_refused_before_anything_is_written(queue: Queue, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"delay|at"):
        queue.enqueue(["x"], **options)
    assert queue.inspect("x") is None


def test_retry_backoff_grows_within_its_window_and_caps(make_queue: Callable[..., Queue], client: redis.Redis) -> None:
    base, cap = 0.05, 0.5
    q = make_queue(max_attempts=10, retry_backoff_seconds=base, retry_backoff_max_seconds=cap)
    q.enqueue(["flaky"])
    for attempt in range(1, 7):
        lease = claim_one(q)
        assert lease.attempt == attempt
        before = redis_now(client)
        assert q.fail(lease, "still broken") is FailOutcome.RETRIED
        after = redis_now(client)
        info = q.inspect("flaky")
        assert info is not None and info.state == "scheduled" and info.due_at is not None
        d = min(cap, base * 2 ** (attempt - 1))
        assert before + d / 2 - 0.002 <= info.due_at <= after + d + 0.002, (attempt, info.due_at - before, d)


def test_fail_with_a_delay_and_an_expired_lease_requeues_at_once(
    make_queue: Callable[..., Queue], client: redis.Redis
) -> None:
    q = make_queue(retry_backoff_seconds=1)
    q.enqueue(["a", "b"])
    leases = {lease.id: lease for lease in q.claim(2)}
    before = redis_now(client)
    q.fail(leases["a"], "later please", delay=2)
    info = q.inspect("a")
    assert info is not None and info.due_at is not None and before + 2 - 0.002 <= info.due_at <= before + 2.5
    client.delete(q.keys.lock(leases["b"].token))  # b's worker died: its lease is gone
    assert q.sweep().requeued == ["b"]
    assert q.stats()["todos"] == 1  # at once: a lost lease is no failure, so no backoff


def test_a_handler_raising_retry_later_waits_that_long_and_an_idle_worker_wakes_for_it(
    redis_url: str, queue_name: str
) -> None:
    ran: list[tuple[str, int, float]] = []

    def handler(lease: Lease) -> None:
        ran.append((lease.id, lease.attempt, lease.claimed_at))
        if lease.attempt == 1:
            raise RetryLater(2)

    # Without waking for the due time the retry would wait IDLE_WAIT_SECONDS.
    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0, IDLE_WAIT_SECONDS=60)
    service = WorkerService(WorkerSettings.from_env(env), handler=handler)
    q = service.queue.shards[0]
    q.enqueue(["job"])
    thread = threading.Thread(target=service.run)
    thread.start()
    try:
        wait_until(lambda: q.stats()["done"] == 1, 30, "the retried job done")
        assert service.metrics.registry.get_sample_value("setqueue_jobs_scheduled_total", {"queue": queue_name}) == 1
    finally:
        service.request_stop()
        thread.join(30)
        service.close()
    (_, first, failed_at), (_, second, retried_at) = ran
    assert (first, second) == (1, 2)
    assert 2 <= retried_at - failed_at < 10
