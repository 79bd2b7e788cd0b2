"""Waiting on conditions, never for a fixed time; a timeout fails with what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import redis

from setqueue import JobQueue, Lease

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def redis_clock(client: redis.Redis) -> float:
    """TIME, the queue's only clock, in Unix seconds."""
    seconds, micros = client.time()
    return float(seconds) + micros / 1_000_000


def wait_for_redis_clock(client: redis.Redis, seconds: float, timeout: float = 10) -> None:
    """Until the Redis clock has moved ``seconds`` on."""
    until = redis_clock(client) + seconds
    wait_until(lambda: redis_clock(client) >= until, timeout, f"the Redis clock {seconds}s on", interval=0.002)


def wait_until_leases_expire(queue: JobQueue, leases: Iterable[Lease], timeout: float = 10) -> None:
    """Until each lease's claim lock is gone (ran out by the Redis clock)."""
    tokens = {lease.token for lease in leases}
    locks = [(shard.redis, shard.keys.lock(token)) for shard in queue.shards for token in tokens]
    wait_until(lambda: not any(client.exists(lock) for client, lock in locks), timeout, "the leases to run out", 0.01)


def wait_until_due(queue: JobQueue, job_ids: Iterable[str], timeout: float = 10) -> None:
    """Until the Redis clock reaches these scheduled jobs' due times."""
    due = []
    for job_id in job_ids:
        info = queue.inspect(job_id)
        assert info is not None and info.due_at is not None, f"{job_id} is not scheduled: {info}"
        due.append(info.due_at)
    wait_until(lambda: redis_clock(queue.redis) >= max(due), timeout, f"{list(job_ids)} to be due", 0.01)
