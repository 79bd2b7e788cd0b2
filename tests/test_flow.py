"""Flow control in the queue itself, on a real Redis: pause and resume, the queue's rate, job groups
with turns, concurrency and rates, and every way a grouped job leaves or rejoins its line. The
services' side (real workers counting starts) is tests/test_flow_services.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from setqueue import FailOutcome, Queue
from setqueue.flow import GroupLimits, Rate
from tests.support.waits import redis_clock, wait_until


def held_reasons(queue: Queue) -> list[str]:
    """Collect what flow control tells the queue's claims it held back."""
    seen: list[str] = []
    queue.on_held = lambda _name, reason: seen.append(reason)
    return seen


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def group_invariant(queue: Queue) -> None:
    """Every group with jobs waiting is in exactly one of ready, resting and full; none without;
    group_running counts each group's jobs in progress; grouped and group_lines hold the same ids."""
    r, k = queue.redis, queue.keys
    lines: Counter[str] = Counter()
    ids_in_lines = set()
    for member in r.zrange(k.group_lines, 0, -1):
        group, _rank, job_id = _text(member).split("\0")
        lines[group] += 1
        ids_in_lines.add(job_id)
    assert ids_in_lines == {_text(m) for m in r.zrange(k.grouped, 0, -1)}
    ready = {_text(g) for g in r.zrange(k.groups_ready, 0, -1)} - {""}
    resting = {_text(g) for g in r.zrange(k.groups_resting, 0, -1)}
    full = {_text(g) for g in r.smembers(k.groups_full)}  # type: ignore[union-attr]
    assert not (ready & resting or ready & full or resting & full), (ready, resting, full)
    assert ready | resting | full == set(lines), (ready, resting, full, lines)
    running: Counter[str] = Counter()
    for running_id in r.zrange(k.in_progress, 0, -1):
        of = r.hget(k.group_of, _text(running_id))
        if of is not None:
            running[_text(of)] += 1
    assert {_text(g): int(n) for g, n in r.hgetall(k.group_running).items()} == dict(running)  # type: ignore[union-attr]


# -- pause and resume ------------------------------------------------------------------------------


def test_a_paused_queue_gives_no_job_and_a_resumed_one_does(queue: Queue) -> None:
    held = held_reasons(queue)
    queue.enqueue(["a", "b"])
    assert queue.pause() is True
    assert queue.pause() is False  # already paused
    assert queue.claim(10) == []
    assert held == ["paused"]
    assert queue.next_due is None  # no time to wait for: a resume wakes the workers
    assert queue.stats()["paused"] == 1
    assert queue.limits().paused
    # Enqueue and the running jobs' acks go on while paused.
    assert queue.enqueue(["c"]) == 1
    assert queue.resume() is True
    assert queue.redis.llen(queue.keys.wake) > 0  # the idle workers are woken
    assert [lease.id for lease in queue.claim(10)] == ["a", "b", "c"]
    assert queue.stats()["paused"] == 0


def test_running_jobs_finish_while_paused(queue: Queue) -> None:
    queue.enqueue(["a"])
    lease = queue.claim()[0]
    queue.pause()
    assert queue.ack(lease)
    assert queue.stats()["done"] == 1


def test_a_scheduled_job_comes_due_while_paused_and_waits(queue: Queue) -> None:
    queue.pause()
    queue.enqueue(["later"], delay=0.05)
    now = redis_clock(queue.redis)
    wait_until(lambda: redis_clock(queue.redis) > now + 0.06, 5, "the job to be due")
    assert queue.claim() == []
    assert queue.stats()["todos"] == 1  # promoted into the line, not started
    queue.resume()
    assert [lease.id for lease in queue.claim()] == ["later"]


# -- the queue's rate ------------------------------------------------------------------------------


def test_a_rate_lets_its_burst_start_then_says_when_more_can(queue: Queue) -> None:
    held = held_reasons(queue)
    queue.enqueue([f"j{i}" for i in range(20)])
    queue.set_rate("10/s", burst=3)
    assert queue.limits().rate == Rate(10, 1000, 3)
    first = queue.claim(10)
    assert len(first) == 3
    assert held == ["rate"]
    assert queue.flow_limited
    # The next batch: 100 ms a job, 3 jobs (the burst) from empty: about 300 ms.
    assert queue.next_due is not None and 0.2 <= queue.next_due <= 0.31
    assert queue.claim(10) == []
    start = redis_clock(queue.redis)
    wait_until(lambda: redis_clock(queue.redis) >= start + 0.1, 5, "a tenth of a second")
    assert len(queue.claim(10)) >= 1


def test_removing_the_rate_lets_everything_through(queue: Queue) -> None:
    queue.enqueue([f"j{i}" for i in range(20)])
    queue.set_rate("1/min", burst=1)
    assert len(queue.claim(10)) == 1
    assert queue.claim(10) == []
    queue.set_rate(None)
    assert queue.limits().rate is None
    assert len(queue.claim(10)) == 10
    assert not queue.flow_limited


def test_rate_text_is_checked_before_anything_is_written(queue: Queue) -> None:
    for bad in ("0/s", "abc", "-1/s", "10/0s", "5/fortnight", "2000000/s", "1/s ; DROP", ""):
        with pytest.raises(ValueError):
            queue.set_rate(bad)
    with pytest.raises(ValueError):
        queue.set_rate("10/s", burst=0)
    assert not queue.redis.exists(queue.keys.flow)


# -- groups take turns -----------------------------------------------------------------------------


def test_groups_take_turns_so_a_small_one_is_not_starved(queue: Queue) -> None:
    queue.enqueue([f"a{i}" for i in range(200)], group="A")
    queue.enqueue([f"b{i}" for i in range(5)], group="B")
    taken: list[str] = []
    for _ in range(5):
        taken += [lease.id for lease in queue.claim(4)]
    # Each claim shares its jobs between the groups at the front of their line.
    assert [job_id for job_id in taken if job_id.startswith("b")] == [f"b{i}" for i in range(5)]
    assert taken.index("b4") < 12
    group_invariant(queue)


def test_within_a_group_priority_then_first_in_first_out(queue: Queue) -> None:
    queue.enqueue(["low1", "low2"], group="g", priority=-1)
    queue.enqueue(["mid1", "mid2"], group="g")
    queue.enqueue(["high"], group="g", priority=5)
    leases = queue.claim(5)
    assert [lease.id for lease in leases] == ["high", "mid1", "mid2", "low1", "low2"]
    assert [lease.priority for lease in leases] == [5, 0, 0, -1, -1]


def test_jobs_without_a_group_take_a_turn_too(queue: Queue) -> None:
    queue.enqueue([f"a{i}" for i in range(50)], group="A")
    queue.enqueue([f"plain{i}" for i in range(50)])
    first = [lease.id for lease in queue.claim(10)]
    assert sum(job_id.startswith("plain") for job_id in first) == 5
    assert sum(job_id.startswith("a") for job_id in first) == 5
    group_invariant(queue)


def test_a_group_at_its_concurrency_waits_for_one_of_its_jobs_to_end(queue: Queue) -> None:
    held = held_reasons(queue)
    queue.set_group_limits(concurrency=2)
    queue.enqueue([f"a{i}" for i in range(10)], group="A")
    leases = queue.claim(10)
    assert [lease.id for lease in leases] == ["a0", "a1"]
    assert held == ["group"]
    assert queue.claim(10) == []
    assert queue.next_due is None  # nothing to wait for but an ack, which wakes a worker
    group_invariant(queue)
    assert queue.ack(leases[0])
    assert queue.redis.llen(queue.keys.wake) > 0
    assert [lease.id for lease in queue.claim(10)] == ["a2"]
    group_invariant(queue)


def test_a_group_of_its_own_limits_and_the_default_for_the_others(queue: Queue) -> None:
    queue.set_group_limits(concurrency=1)
    queue.set_group_limits("big", concurrency=3)
    queue.enqueue([f"big{i}" for i in range(10)], group="big")
    queue.enqueue([f"small{i}" for i in range(10)], group="small")
    taken = Counter(lease.id.rstrip("0123456789") for lease in queue.claim(20))
    assert taken == {"big": 3, "small": 1}
    limits = queue.limits()
    assert limits.group_default == GroupLimits(1, None)
    assert limits.groups == {"big": GroupLimits(3, None)}
    queue.set_group_limits("big")  # back to the default
    assert queue.limits().groups == {}


def test_a_group_rate_rests_the_group_and_says_until_when(queue: Queue) -> None:
    queue.set_group_limits(rate="2/s", burst=2)
    queue.enqueue([f"a{i}" for i in range(10)], group="A")
    queue.enqueue([f"b{i}" for i in range(10)], group="B")
    taken = Counter(lease.id[0] for lease in queue.claim(20))
    assert taken == {"a": 2, "b": 2}
    assert queue.claim(20) == []
    assert queue.next_due is not None and 0.3 <= queue.next_due <= 0.51  # a job every 500 ms
    group_invariant(queue)
    assert {g.name: g.state for g in queue.groups()} == {"A": "resting", "B": "resting"}
    start = redis_clock(queue.redis)
    wait_until(lambda: redis_clock(queue.redis) >= start + 0.5, 5, "half a second")
    assert Counter(lease.id[0] for lease in queue.claim(20)) == {"a": 1, "b": 1}


def test_changing_the_limits_sends_groups_set_aside_back_to_their_turn(queue: Queue) -> None:
    queue.set_group_limits(concurrency=1)
    queue.enqueue([f"a{i}" for i in range(5)], group="A")
    assert len(queue.claim(5)) == 1
    assert queue.claim(5) == []
    assert queue.groups()[0].state == "full"
    queue.set_group_limits(concurrency=3)
    assert queue.groups()[0].state == "ready"
    assert len(queue.claim(5)) == 2
    group_invariant(queue)


# -- a grouped job leaving and rejoining its line ----------------------------------------------------


def test_a_retried_released_swept_or_requeued_job_goes_back_to_its_group(
    make_queue: Callable[..., Queue],
) -> None:
    queue = make_queue(max_attempts=2, lease_seconds=0.05)
    queue.set_group_limits(concurrency=1)
    queue.enqueue(["x"], group="g")
    lease = queue.claim()[0]
    assert queue.fail(lease, "boom") is FailOutcome.RETRIED
    group_invariant(queue)
    lease = queue.claim()[0]
    assert queue.release([lease]) == [FailOutcome.RELEASED]
    group_invariant(queue)
    lease = queue.claim()[0]
    assert queue.stats()["groups_running"] == 1
    wait_until(lambda: not queue.redis.exists(queue.keys.lock(lease.token)), 5, "the lease to expire")
    assert queue.sweep().dead_lettered == ["x"]  # its second attempt: dead-lettered
    group_invariant(queue)
    assert queue.requeue_failed(["x"]) == 1
    assert queue.inspect("x") is not None and queue.inspect("x").group == "g"  # type: ignore[union-attr]
    group_invariant(queue)
    lease = queue.claim()[0]
    assert queue.ack(lease)
    assert queue.inspect("x").group is None  # type: ignore[union-attr]
    group_invariant(queue)
    assert queue.groups() == []


def test_cancel_and_delete_take_a_grouped_job_out_of_its_line(queue: Queue) -> None:
    queue.set_group_limits(concurrency=1)
    queue.enqueue(["a1", "a2", "a3"], group="A")
    running = queue.claim()[0]
    assert queue.cancel("a2") == "todos"
    group_invariant(queue)
    assert queue.cancel(running.id) == "in_progress"  # frees the group's slot: a3 may start
    group_invariant(queue)
    assert [lease.id for lease in queue.claim()] == ["a3"]
    assert queue.delete("a3") == "in_progress"
    group_invariant(queue)
    assert queue.groups() == []
    assert queue.stats()["todos"] == 0


def test_a_grouped_id_is_known_like_any_other(queue: Queue) -> None:
    assert queue.enqueue(["same"], group="g") == 1
    assert queue.enqueue(["same"]) == 0
    assert queue.enqueue(["same"], group="h") == 0
    info = queue.inspect("same")
    assert info is not None and info.state == "todos" and info.group == "g"
    assert queue.stats()["todos"] == 1 and queue.stats()["grouped_waiting"] == 1


def test_a_delayed_grouped_job_joins_its_group_when_due(queue: Queue) -> None:
    queue.enqueue(["later"], group="g", delay=0.05)
    assert queue.claim() == []
    wait_until(lambda: queue.next_due is not None and queue.due_in() is not None and queue.due_in() <= 0, 5, "due")  # type: ignore[operator]
    wait_until(lambda: bool(queue.claim()), 5, "the job to be claimed")
    assert queue.stats()["groups_running"] == 1


def test_group_names_are_checked_before_anything_is_written(queue: Queue, client: redis.Redis) -> None:
    for bad in ("", "a{b}", "two words", "line\nbreak", "nul\0", "x" * 1025, "tab\t"):
        with pytest.raises(ValueError):
            queue.enqueue(["j"], group=bad)
        with pytest.raises(ValueError):
            queue.set_group_limits(bad, concurrency=1)
    for concurrency in (0, -1, 10**9):
        with pytest.raises(ValueError):
            queue.set_group_limits(concurrency=concurrency)
    assert client.keys(f"setqueue:{{{queue.name}}}:*") == []


def test_a_thousand_groups_one_job_each_are_claimed_fairly(queue: Queue) -> None:
    for g in range(1000):
        queue.enqueue([f"g{g}-1", f"g{g}-2"], group=f"g{g}")
    first = [lease.id for lease in queue.claim(500)] + [lease.id for lease in queue.claim(500)]
    # One turn each before any group's second job.
    assert sorted(first) == sorted(f"g{g}-1" for g in range(1000))
    group_invariant(queue)
