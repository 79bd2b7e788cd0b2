"""The registry of live workers: records that expire, an index that is trimmed, real workers that
register what they hold and leave."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import redis

from setqueue import Queue
from setqueue.keys import QueueKeys
from setqueue.registry import INDEX_KEEP_MS, WorkerRecord, all_live_workers, beat, leave, live_workers
from tests.support.procs import Proc
from tests.support.waits import wait_until


def record(worker_id: str, queues: list[str], **changes: object) -> WorkerRecord:
    fields: dict[str, object] = {
        "id": worker_id,
        "host": "h",
        "pid": 1,
        "queues": queues,
        "slots": 4,
        "busy": 1,
        "held": [[queues[0], "job-1"]],
        "held_count": 1,
        "started_at": time.time() - 5,
        "seen_at": time.time(),
        **changes,
    }
    return WorkerRecord(**fields)  # type: ignore[arg-type]


def test_a_record_lives_three_beats_and_the_index_is_trimmed(client: redis.Redis, queue_name: str) -> None:
    other = f"{queue_name}-b"
    beat(client, [queue_name, other], record("w-1", [queue_name, other]), ttl_ms=300)
    beat(client, [queue_name], record("w-2", [queue_name]), ttl_ms=60_000)
    found = live_workers(client, queue_name)
    assert {r.id for r in found} == {"w-1", "w-2"}
    assert found[0].held == [[queue_name, "job-1"]] and found[0].ttl_seconds is not None
    assert [r.id for r in all_live_workers(client, [queue_name, other])] == ["w-1", "w-2"]  # each once
    wait_until(lambda: {r.id for r in live_workers(client, queue_name)} == {"w-2"}, 10, "w-1's record to expire")
    keys = QueueKeys(queue_name)
    assert client.zscore(keys.workers, "w-1") is not None  # the index still names it, until trimmed
    old = record("w-3", [queue_name], seen_at=time.time() + INDEX_KEEP_MS / 1000 + 5)
    beat(client, [queue_name], old, ttl_ms=60_000)
    assert client.zscore(keys.workers, "w-1") is None, "a beat trims index entries an hour old"
    leave(client, [queue_name], "w-2")
    assert {r.id for r in live_workers(client, queue_name)} == {"w-3"}
    assert not client.exists(keys.worker("w-2"))


def test_a_record_of_another_version_is_skipped(client: redis.Redis, queue_name: str) -> None:
    keys = QueueKeys(queue_name)
    client.set(keys.worker("odd"), "not json", px=60_000)
    client.zadd(keys.workers, {"odd": 1})
    assert live_workers(client, queue_name) == []


def test_a_worker_registers_what_it_holds_and_leaves_on_sigterm(
    start_worker: Callable[..., Proc], redis_url: str, client: redis.Redis, queue_name: str
) -> None:
    queue = Queue.from_url(redis_url, queue_name)
    queue.enqueue(["sleep-30-1", "sleep-30-2", "sleep-30-3"])
    settings = {"CONCURRENCY": 2, "CLAIM_BATCH": 3, "WORKER_HEARTBEAT_SECONDS": 0.2, "SHUTDOWN_GRACE_SECONDS": 0}
    worker = start_worker(queue_name, **settings)

    def busy() -> WorkerRecord | None:
        found = live_workers(client, queue_name)
        return found[0] if found and found[0].busy == 2 else None

    seen = wait_until(busy, 20, "the worker's record with both slots busy")
    assert seen is not None
    assert seen.pid == worker.process.pid and seen.slots == 2 and seen.queues == [queue_name]
    assert seen.held_count == 3 and sorted(job for _, job in seen.held) == ["sleep-30-1", "sleep-30-2", "sleep-30-3"]
    assert seen.heartbeat_seconds == 0.2 and seen.handler == "tests.support.jobs:handle"
    worker.signal(signal.SIGTERM)
    worker.wait(30)
    assert live_workers(client, queue_name) == []
    assert not client.exists(QueueKeys(queue_name).worker(seen.id)), "a clean stop removes its record at once"


def test_heartbeat_zero_registers_nothing(
    tmp_path: Path, procs: list[Proc], redis_url: str, client: redis.Redis, queue: Queue
) -> None:
    queue.enqueue(["a"])
    procs.append(Proc.start("worker", tmp_path, REDIS_URL=redis_url, QUEUE_NAME=queue.name, WORKER_HEARTBEAT_SECONDS=0))
    wait_until(lambda: queue.stats()["done"] == 1, 20, "the job to be done")
    assert not client.exists(queue.keys.workers)
