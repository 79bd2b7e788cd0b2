"""Every race of the seed designs, as a regression test. Real processes where a process matters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

import redis

from setqueue import FailOutcome, Lease, Queue
from tests.support import REPO_ROOT
from tests.support.waits import wait_until, wait_until_leases_expire


def actor(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.actors", *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def test_no_cleaner_can_run_between_claim_and_lock(
    redis_url: str, queue_name: str, make_queue: Callable[..., Queue]
) -> None:
    """A cleaner between SMOVE and SETEX once requeued a just-claimed job; claim now moves and locks in
    one script: two processes sweep flat out while 2,000 jobs are claimed one by one, none requeued."""
    q = make_queue(lease_seconds=60)
    q.enqueue([f"j{i}" for i in range(2000)])
    sweepers = [actor("sweep", redis_url, queue_name, "4") for _ in range(2)]
    leases: list[Lease] = []
    while len(leases) < 2000:
        leases += q.claim(1)
    requeued = [json.loads(s.communicate(timeout=30)[0].splitlines()[-1]) for s in sweepers]
    assert requeued == [[], []]
    assert all(r.acked for r in q.ack_many(leases))
    assert q.stats()["done"] == 2000


def test_late_ack_after_another_worker_reclaimed_changes_nothing(
    make_queue: Callable[..., Queue], client: redis.Redis
) -> None:
    q = make_queue(lease_seconds=0.2)
    q.enqueue(["a"])
    [slow] = q.claim()
    wait_until_leases_expire(q, [slow])  # the slow worker's lease runs out ...
    assert q.sweep().requeued == ["a"]  # ... the cleaner requeues ...
    [fast] = q.claim()  # ... and another worker claims the job.
    assert fast.attempt == 2 and fast.token != slow.token
    ttl_before = client.pttl(q.keys.lock(fast.token))
    assert not q.renew(slow)
    assert not q.ack(slow)
    assert q.fail(slow, "late") is FailOutcome.STALE
    assert not client.exists(q.keys.lock(slow.token))  # not re-created by the late calls
    assert client.get(q.keys.lock(fast.token)) == "1"  # the new claim's lease is untouched
    assert client.pttl(q.keys.lock(fast.token)) <= ttl_before
    assert q.inspect("a").state == "in_progress"  # type: ignore[union-attr]
    assert q.ack(fast)


def test_late_ack_while_the_job_waits_in_todos_changes_nothing(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(lease_seconds=0.1)
    q.enqueue(["a"])
    [slow] = q.claim()
    wait_until_leases_expire(q, [slow])
    q.sweep()
    assert not q.ack(slow)
    assert q.stats()["todos"] == 1 and q.stats()["done"] == 0


def test_double_fail_counts_one_attempt(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(max_attempts=2)
    q.enqueue(["a"])
    [lease] = q.claim()
    assert q.fail(lease, "x") is FailOutcome.RETRIED
    assert q.fail(lease, "x") is FailOutcome.STALE  # would have dead-lettered if counted twice
    [again] = q.claim()
    assert again.attempt == 2


def test_enqueue_of_an_id_in_progress_does_not_duplicate_it(queue: Queue) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    assert queue.enqueue(["a"]) == 0
    assert queue.claim() == []
    assert queue.ack(lease)
    assert queue.enqueue(["a"]) == 0  # done is remembered (within the retention)


def test_a_killed_worker_s_jobs_come_back_after_its_lease(
    redis_url: str, queue_name: str, make_queue: Callable[..., Queue]
) -> None:
    q = make_queue(lease_seconds=0.5)
    q.enqueue([f"j{i}" for i in range(5)])
    holder = actor("hold", redis_url, queue_name, "3")
    assert holder.stdout is not None
    claimed = json.loads(holder.stdout.readline())
    held = {job_id for job_id, _ in claimed}
    assert len(held) == 3
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert q.sweep().total == 0  # the locks still stand: nothing is requeued early
    [token] = {token for _, token in claimed}
    wait_until(lambda: q.redis.exists(q.keys.lock(token)) == 0, 10, "the holder's lease to run out", 0.01)
    assert set(q.sweep().requeued) == held
    leases = q.claim(5)
    assert {lease.id for lease in leases if lease.attempt == 2} == held


def test_concurrent_cleaners_requeue_each_id_once(
    redis_url: str, queue_name: str, make_queue: Callable[..., Queue], client: redis.Redis
) -> None:
    q = make_queue(lease_seconds=30)
    ids = [f"j{i}" for i in range(3000)]
    q.enqueue(ids)
    tokens = []
    while leases := q.claim(500):
        tokens.append(leases[0].token)
    sweepers = [actor("sweep", redis_url, queue_name, "3") for _ in range(3)]
    for sweeper in sweepers:  # each has swept once: they are running; now the leases expire, all at once
        assert sweeper.stdout is not None and json.loads(sweeper.stdout.readline()) == "sweeping"
    client.delete(*(q.keys.lock(token) for token in tokens))
    requeued = [json.loads(s.communicate(timeout=30)[0].splitlines()[-1]) for s in sweepers]
    everything = [job_id for part in requeued for job_id in part]
    assert sorted(everything) == sorted(ids)  # each id requeued exactly once, by one cleaner
    assert q.stats()["todos"] == 3000


def test_after_release_and_reclaim_the_first_lease_stays_stale(
    make_queue: Callable[..., Queue], client: redis.Redis
) -> None:
    """Release gives an attempt back, so the attempt count cannot tell two claims apart: after lock
    expiry, ownership is by the owner's token."""
    q = make_queue()
    q.enqueue(["a"])
    [first] = q.claim()
    client.delete(q.keys.lock(first.token))
    assert q.release([first]) == [FailOutcome.RELEASED]
    [second] = q.claim()
    assert second.attempt == first.attempt == 1
    client.delete(q.keys.lock(second.token))  # the second lease runs out too
    assert not q.ack(first)
    assert q.fail(first, "late") is FailOutcome.STALE
    assert q.ack(second)


def test_results_never_calls_a_job_unknown_as_it_is_acked(make_queue: Callable[..., Queue]) -> None:
    """result() reads done, then pending: read apart, an ack landing between them made a job that
    had just ended look unknown. The reads are one snapshot: jobs acked ten at a time, flat out, while
    a producer waits for all of them."""
    q, acker = make_queue(lease_seconds=60), make_queue(lease_seconds=60)
    ids = [f"r{i}" for i in range(3000)]
    q.enqueue(ids)
    leases: list[Lease] = []
    while len(leases) < len(ids):
        leases += acker.claim(500)
    done = threading.Thread(target=lambda: [acker.ack_many(leases[n : n + 10]) for n in range(0, len(leases), 10)])
    done.start()
    try:
        assert q.results(ids, timeout=60) == dict.fromkeys(ids)
    finally:
        done.join()
