"""Every queue operation and its edge cases, against a real redis-server."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from setqueue import FailOutcome, Lease, Queue, QueueKeys
from setqueue.limits import LIMIT_STATS
from tests.support import queue_members
from tests.support.waits import wait_for_redis_clock

EMPTY = {
    **dict.fromkeys(("todos", "in_progress", "done", "failed", "scheduled", "cancelled", "waiting", "results_kept"), 0),
    "oldest_pending_age_seconds": 0.0,
    "todos_by_priority": {},
    **dict.fromkeys(LIMIT_STATS, 0),
}


def members(client: redis.Redis, q: Queue) -> dict[str, set[str]]:
    return {state: set(ids) for state, ids in queue_members(client, q.keys).items() if state != "scheduled"}


def test_key_layout_is_the_documented_one(queue: Queue, client: redis.Redis, queue_name: str) -> None:
    queue.enqueue({"a": "payload-a"})
    queue.enqueue(["b", "c"])
    p = f"setqueue:{{{queue_name}}}:"
    assert client.type(p + "todos") == "zset"
    assert client.type(p + "pending") == "zset"
    assert client.get(p + "seq") == "3"  # places 1, 2, 3 given out
    leases = {lease.id: lease for lease in queue.claim(3)}
    lease = leases["a"]
    assert client.type(p + "in_progress") == "zset"
    # One lease for the whole claim: its lock counts the claim's jobs still held.
    assert {other.token for other in leases.values()} == {lease.token}
    assert client.hget(p + "owners", "a") == lease.token
    assert client.get(p + "lock:" + lease.token) == "3"
    assert 0 < client.pttl(p + "lock:" + lease.token) <= 30_000
    assert client.hget(p + "payloads", "a") == "payload-a"
    queue.ack(lease)
    assert client.sismember(p + "done", "a")
    assert client.get(p + "lock:" + lease.token) == "2"
    queue.ack_many([leases["b"], leases["c"]])
    assert not client.exists(p + "lock:" + lease.token)
    # Every key of the queue shares the prefix (and so the Cluster hash tag).
    assert all(key.startswith(p) for key in client.scan_iter(match=f"*{queue_name}*"))


def test_enqueue_counts_only_new_ids(queue: Queue) -> None:
    assert queue.enqueue(["a", "b"]) == 2
    assert queue.enqueue(["a", "b", "c", "c"]) == 1
    assert queue.enqueue([]) == 0
    assert queue.stats()["todos"] == 3


def test_enqueue_does_not_re_add_ids_in_progress_done_or_failed(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(max_attempts=1)
    q.enqueue(["busy", "finished", "dead"])
    leases = {lease.id: lease for lease in q.claim(3)}
    q.ack(leases["finished"])
    assert q.fail(leases["dead"], "boom") is FailOutcome.DEAD
    assert q.enqueue(["busy", "finished", "dead"]) == 0
    assert q.stats() | {"oldest_pending_age_seconds": 0} == EMPTY | {"in_progress": 1, "done": 1, "failed": 1}


def test_enqueue_batches_larger_than_one_script_call(queue: Queue) -> None:
    ids = [f"job-{i}" for i in range(1234)]
    assert queue.enqueue(ids) == 1234
    assert queue.enqueue(ids) == 0
    assert queue.stats()["todos"] == 1234


def test_enqueue_rejects_bad_ids_and_changes_nothing(queue: Queue) -> None:
    for bad in ["", "a\nb", "x" * 2000]:
        with pytest.raises(ValueError):
            queue.enqueue(["fine", bad])
    with pytest.raises(TypeError):
        queue.enqueue([42])  # type: ignore[list-item]
    assert queue.stats()["todos"] == 0


def test_claim_returns_leases_with_payload_attempt_and_wait(queue: Queue) -> None:
    queue.enqueue({"x": '{"n": 1}'})
    [lease] = queue.claim(5)
    assert lease.id == "x"
    assert lease.attempt == 1
    assert lease.payload == '{"n": 1}'
    assert len(lease.token) >= 16
    assert lease.enqueued_at is not None
    assert lease.queue_wait_seconds is not None and lease.queue_wait_seconds >= 0
    assert queue.claim(5) == []


def test_claim_takes_at_most_count_and_each_id_once(queue: Queue) -> None:
    queue.enqueue([str(i) for i in range(50)])
    first = queue.claim(20)
    second = queue.claim(100)
    assert len(first) == 20
    assert len(second) == 30
    assert {lease.id for lease in first} | {lease.id for lease in second} == {str(i) for i in range(50)}
    assert queue.stats()["in_progress"] == 50


def test_claim_rejects_count_below_one(queue: Queue) -> None:
    with pytest.raises(ValueError):
        queue.claim(0)


def test_renew_extends_only_the_owners_lock(make_queue: Callable[..., Queue], client: redis.Redis) -> None:
    q = make_queue(lease_seconds=1)
    q.enqueue(["a"])
    [lease] = q.claim()
    client.pexpire(q.keys.lock(lease.token), 100)
    assert q.renew(lease)
    assert client.pttl(q.keys.lock(lease.token)) > 500
    forged = Lease("a", "not-the-token", 1, None, None, 0.0)
    assert not q.renew(forged)
    assert not client.exists(q.keys.lock("not-the-token"))
    q.ack(lease)
    assert not q.renew(lease)  # acked: no longer ours, even if the claim's lock still stood


def test_renew_never_recreates_an_expired_lock(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    client.delete(queue.keys.lock(lease.token))
    assert not queue.renew(lease)
    assert not client.exists(queue.keys.lock(lease.token))


def test_ack_moves_to_done_and_cleans_up(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue({"a": "p"})
    [lease] = queue.claim()
    [result] = queue.ack_many([lease])
    assert result.acked
    assert result.end_to_end_seconds is not None and result.end_to_end_seconds >= 0
    assert members(client, queue)["done"] == {"a"}
    k = queue.keys
    assert not client.exists(k.lock(lease.token))
    assert client.hget(k.owners, "a") is None
    assert client.hget(k.payloads, "a") == "p"  # kept with the done job (payload_keep_bytes)
    assert client.hget(k.attempts, "a") is None
    assert client.zscore(k.pending, "a") is None


def test_a_finished_job_keeps_its_attempts_and_times_while_retained(
    make_queue: Callable[..., Queue], client: redis.Redis
) -> None:
    q = make_queue(max_attempts=2, done_max_count=1)
    q.enqueue(["ok", "bad"])
    wait_for_redis_clock(client, 0.01)
    leases = {lease.id: lease for lease in q.claim(2)}
    assert q.fail(leases["ok"], "first try fails") is FailOutcome.RETRIED
    assert q.fail(leases["bad"], "first try fails") is FailOutcome.RETRIED
    leases = {lease.id: lease for lease in q.claim(2)}
    assert q.ack(leases["ok"])
    assert q.fail(leases["bad"], "second try fails") is FailOutcome.DEAD
    for job_id, state in (("ok", "done"), ("bad", "failed")):
        info = q.inspect(job_id)
        assert info is not None and info.state == state
        assert info.attempts == 2, info
        assert info.enqueued_at is not None and info.finished_at is not None
        assert info.enqueued_at < info.finished_at
    # Trimmed from done by the retention, it is forgotten: enqueued again it starts afresh. ("next" is
    # done a millisecond later: in the same one, the retention would drop the id first in byte order.)
    q.enqueue(["next"])
    wait_for_redis_clock(client, 0.002)
    q.ack(q.claim()[0])
    assert q.inspect("ok") is None
    assert client.hget(q.keys.finished, "ok") is None
    assert q.enqueue(["ok"]) == 1
    assert q.claim()[0].attempt == 1


def test_a_job_finished_without_kept_history_shows_attempts_as_unknown(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue(["old"])
    queue.ack(queue.claim()[0])
    client.hdel(queue.keys.finished, "old")  # as an id acked before finished records were kept
    info = queue.inspect("old")
    assert info is not None and info.attempts is None and info.enqueued_at is None and info.finished_at is None


def test_ack_after_lock_expiry_succeeds_while_nobody_else_claimed(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    client.delete(queue.keys.lock(lease.token))  # the lease ran out, no cleaner came by yet
    assert queue.ack(lease)
    assert not client.exists(queue.keys.lock(lease.token))  # not re-created by the ack
    assert members(client, queue)["done"] == {"a"}


def test_double_ack_is_refused_the_second_time(queue: Queue) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    assert queue.ack(lease)
    assert not queue.ack(lease)
    assert queue.stats()["done"] == 1


def test_ack_many_reports_each_lease(queue: Queue) -> None:
    queue.enqueue(["a", "b"])
    leases = queue.claim(2)
    forged = Lease(leases[0].id, "forged", 1, None, None, 0.0)
    results = queue.ack_many([forged, *leases])
    assert [r.acked for r in results] == [False, True, True]
    assert queue.ack_many([]) == []


def test_fail_retries_until_max_attempts_then_dead_letters(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(max_attempts=3)
    q.enqueue({"a": "data"})
    outcomes = []
    for attempt in (1, 2, 3):
        [lease] = q.claim()
        assert lease.attempt == attempt
        outcomes.append(q.fail(lease, reason=f"boom {attempt}"))
    assert outcomes == [FailOutcome.RETRIED, FailOutcome.RETRIED, FailOutcome.DEAD]
    info = q.inspect("a")
    assert info is not None
    assert info.state == "failed" and info.error == "boom 3" and info.attempts == 3 and info.payload == "data"
    assert q.claim() == []


def test_fail_without_retry_dead_letters_at_once(queue: Queue) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    assert queue.fail(lease, "bad input", retry=False) is FailOutcome.DEAD
    assert queue.stats()["failed"] == 1


def test_double_fail_is_a_no_op(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    assert queue.fail(lease, "first") is FailOutcome.RETRIED
    assert queue.fail(lease, "second") is FailOutcome.STALE
    assert members(client, queue)["todos"] == {"a"}
    assert client.hget(queue.keys.attempts, "a") == "1"
    assert client.hget(queue.keys.errors, "a") == "first"


def test_release_hands_jobs_back_without_using_an_attempt(queue: Queue) -> None:
    queue.enqueue(["a", "b"])
    leases = queue.claim(2)
    assert queue.release(leases) == [FailOutcome.RELEASED] * 2
    assert queue.stats()["todos"] == 2
    assert {lease.attempt for lease in queue.claim(2)} == {1}
    assert queue.release([]) == []


def test_sweep_requeues_only_expired_claims(make_queue: Callable[..., Queue], client: redis.Redis) -> None:
    q = make_queue(max_attempts=5)
    q.enqueue(["a", "b"])
    [live], [dead] = q.claim(), q.claim()  # two claims, two leases
    client.delete(q.keys.lock(dead.token))
    result = q.sweep()
    assert result.requeued == [dead.id] and result.dead_lettered == [] and result.total == 1
    assert members(client, q)["todos"] == {dead.id}
    assert q.ack(live)
    assert not q.ack(dead)  # back in todos: its old lease is stale
    assert q.sweep().total == 0


def test_sweep_dead_letters_past_max_attempts(make_queue: Callable[..., Queue], client: redis.Redis) -> None:
    q = make_queue(max_attempts=2)
    q.enqueue(["a"])
    for _ in range(2):
        [lease] = q.claim()
        client.delete(q.keys.lock(lease.token))
        result = q.sweep()
    assert result.dead_lettered == ["a"]
    info = q.inspect("a")
    assert info is not None and info.state == "failed" and info.error is not None and "lease expired" in info.error


def test_sweep_covers_a_large_in_progress_set_over_several_calls(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue([str(i) for i in range(1200)])
    tokens = {lease.token for _ in range(3) for lease in queue.claim(500)}
    client.delete(*(queue.keys.lock(token) for token in tokens))
    total = 0
    for _ in range(20):
        total += queue.sweep(limit=300).total
        if total == 1200:
            break
    assert total == 1200
    assert queue.stats()["todos"] == 1200


def test_done_is_trimmed_by_count(make_queue: Callable[..., Queue], client: redis.Redis) -> None:
    q = make_queue(done_max_count=5)
    q.enqueue([f"j{i}" for i in range(8)])
    for lease in sorted(q.claim(8), key=lambda lease: lease.id):
        q.ack(lease)
        wait_for_redis_clock(client, 0.002)  # distinct done times, so "oldest" is well defined
    done = members(client, q)["done"]
    assert len(done) == 5
    assert client.zcard(q.keys.done_log) == 5
    # A trimmed id is forgotten: enqueued again, it is a new job.
    forgotten = sorted({f"j{i}" for i in range(8)} - done)
    assert q.enqueue(forgotten) == 3


def test_done_is_trimmed_by_age_on_sweep(make_queue: Callable[..., Queue], client: redis.Redis) -> None:
    q = make_queue(done_max_age_seconds=0.2)
    q.enqueue(["old"])
    q.ack(q.claim()[0])
    wait_for_redis_clock(client, 0.2)
    q.enqueue(["new"])
    q.ack(q.claim()[0])
    assert q.sweep().done_trimmed == 1
    assert members(client, q)["done"] == {"new"}


def test_stats(queue: Queue) -> None:
    assert queue.stats() == EMPTY
    queue.enqueue(["a", "b", "c"])
    queue.enqueue(["urgent"], priority=10)
    queue.enqueue(["later"], priority=-10)
    wait_for_redis_clock(queue.redis, 0.05)
    queue.claim()
    stats = queue.stats()
    assert (stats["todos"], stats["in_progress"]) == (4, 1)
    assert stats["todos_by_priority"] == {0: 3, -10: 1}
    assert stats["oldest_pending_age_seconds"] >= 0.05


def test_inspect(queue: Queue) -> None:
    assert queue.inspect("nope") is None
    queue.enqueue({"a": "p"})
    info = queue.inspect("a")
    assert info is not None and info.state == "todos" and info.attempts == 0 and info.lock_token is None
    [lease] = queue.claim()
    info = queue.inspect("a")
    assert info is not None and info.state == "in_progress" and info.lock_token == lease.token
    assert info.lock_ttl_seconds is not None and 0 < info.lock_ttl_seconds <= 30
    queue.ack(lease)
    info = queue.inspect("a")
    assert info is not None and info.state == "done" and info.done_at is not None
    assert info.attempts == 1 and info.enqueued_at is not None and info.finished_at == info.done_at


def test_requeue_failed(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(max_attempts=1)
    q.enqueue(["a", "b", "c"])
    for lease in q.claim(3):
        q.fail(lease, "boom")
    assert q.requeue_failed(["a", "not-failed"]) == 1
    assert q.requeue_failed() == 2
    assert q.stats()["todos"] == 3
    assert {lease.attempt for lease in q.claim(3)} == {1}


def test_delete_from_any_state(queue: Queue, client: redis.Redis) -> None:
    queue.enqueue(["a", "b"])
    [lease] = [lease for lease in queue.claim(2) if lease.id == "a"]
    assert queue.delete("a") == "in_progress"
    assert client.get(queue.keys.lock(lease.token)) == "1"  # the claim holds one job less
    assert not queue.ack(lease)  # the worker still running it finds its lease stale
    assert queue.delete("a") is None
    assert queue.delete("b") == "in_progress"
    assert not client.exists(queue.keys.lock(lease.token))
    assert queue.stats()["in_progress"] == 0


def test_nothing_is_left_behind_when_jobs_leave(make_queue: Callable[..., Queue], client: redis.Redis) -> None:
    q = make_queue(done_max_count=1, max_attempts=1)
    q.enqueue({"a": "pa", "b": "pb", "c": "pc"})
    leases = {lease.id: lease for lease in q.claim(3)}
    q.ack(leases["a"])
    q.ack(leases["b"])  # trims "a" out of done
    q.fail(leases["c"], "x")
    q.delete("c")
    q.delete("b")
    leftovers = [key for key in client.scan_iter(match=q.keys.prefix + "*") if ":req:" not in key]
    assert leftovers == [] or all(client.type(k) != "hash" or client.hlen(k) == 0 for k in leftovers)
    assert not [k for k in leftovers if ":lock:" in k]


def test_queue_rejects_bad_options(client: redis.Redis) -> None:
    for options in ({"lease_seconds": 0}, {"max_attempts": 0}, {"done_max_count": -1}):
        with pytest.raises(ValueError):
            Queue(client, "q", **options)  # type: ignore[arg-type]
    for name in ("", "a{b}", "with space"):
        with pytest.raises(ValueError):
            QueueKeys(name)


def test_wait_for_work_wakes_on_enqueue(queue: Queue) -> None:
    assert not queue.wait_for_work(0.05)
    queue.enqueue(["a"])
    assert queue.wait_for_work(1.0)
