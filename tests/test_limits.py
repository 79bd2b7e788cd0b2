"""Limits in the queue itself: pause, rates, job groups and their turns and limits, and every
way a grouped job leaves or rejoins its line. The services' side is tests/test_limits_services.py."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from setqueue import FailOutcome, Queue
from setqueue.limits import GroupLimits, Limits, Rate
from setqueue.runtime.cli import main as cli
from tests.support.limits import check_groups
from tests.support.waits import redis_clock, wait_until


def check(queue: Queue) -> None:
    check_groups(queue.redis, queue.keys)


def held_reasons(queue: Queue) -> list[str]:
    seen: list[str] = []
    queue.on_held = lambda _name, reason: seen.append(reason)
    return seen


# -- pause and resume


def test_a_paused_queue_gives_no_job_and_a_resumed_one_does(queue: Queue) -> None:
    held = held_reasons(queue)
    queue.enqueue(["a", "b"])
    assert queue.pause() is True
    assert queue.pause() is False  # already paused
    assert queue.claim(10) == []
    assert held == ["paused"]
    assert queue.core.next_due is None  # no time to wait for: a resume wakes the workers
    assert queue.stats()["paused"] == 1
    assert queue.limits().paused
    assert queue.enqueue(["c"]) == 1  # enqueue goes on while paused
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


# -- the queue's rate


def test_a_rate_lets_its_burst_start_then_says_when_more_can(queue: Queue) -> None:
    held = held_reasons(queue)
    queue.enqueue([f"j{i}" for i in range(20)])
    queue.set_rate("10/s", burst=3)
    assert queue.limits().rate == Rate(10, 1000, 3)
    first = queue.claim(10)
    assert len(first) == 3
    assert held == ["rate"]
    assert queue.limited
    # The burst refills at 100 ms a job: about 300 ms.
    assert queue.core.next_due is not None and 0.2 <= queue.core.next_due <= 0.31
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
    assert not queue.limited


def test_rate_text_is_checked_before_anything_is_written(queue: Queue) -> None:
    for bad in ("0/s", "abc", "-1/s", "10/0s", "5/fortnight", "2000000/s", "1/s ; DROP", ""):
        with pytest.raises(ValueError):
            queue.set_rate(bad)
    with pytest.raises(ValueError):
        queue.set_rate("10/s", burst=0)
    assert not queue.redis.exists(queue.keys.limits)


# -- groups take turns


def test_groups_take_turns_so_a_small_one_is_not_starved(queue: Queue) -> None:
    queue.enqueue([f"a{i}" for i in range(200)], group="A")
    queue.enqueue([f"b{i}" for i in range(5)], group="B")
    taken: list[str] = []
    for _ in range(5):
        taken += [lease.id for lease in queue.claim(4)]
    # A turn is at most 4 jobs of a group (TURN in claim.lua).
    assert taken[:13] == ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3", "a4", "a5", "a6", "a7", "b4"]
    check(queue)


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
    check(queue)


def test_a_group_at_its_concurrency_waits_for_one_of_its_jobs_to_end(queue: Queue) -> None:
    held = held_reasons(queue)
    queue.set_group_limits(concurrency=2)
    queue.enqueue([f"a{i}" for i in range(10)], group="A")
    leases = queue.claim(10)
    assert [lease.id for lease in leases] == ["a0", "a1"]
    assert held == ["group"]
    assert queue.claim(10) == []
    assert queue.core.next_due is None  # nothing to wait for but an ack, which wakes a worker
    check(queue)
    assert queue.ack(leases[0])
    assert queue.redis.llen(queue.keys.wake) > 0
    assert [lease.id for lease in queue.claim(10)] == ["a2"]
    check(queue)


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
    assert queue.core.next_due is not None and 0.3 <= queue.core.next_due <= 0.51  # a job every 500 ms
    check(queue)
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
    check(queue)


# -- a grouped job leaving and rejoining its line


def test_a_retried_released_swept_or_requeued_job_goes_back_to_its_group(
    make_queue: Callable[..., Queue],
) -> None:
    queue = make_queue(max_attempts=2, lease_seconds=0.05)
    queue.set_group_limits(concurrency=1)
    queue.enqueue(["x"], group="g")
    lease = queue.claim()[0]
    assert queue.fail(lease, "boom") is FailOutcome.RETRIED
    check(queue)
    lease = queue.claim()[0]
    assert queue.release([lease]) == [FailOutcome.RELEASED]
    check(queue)
    lease = queue.claim()[0]
    assert queue.stats()["groups_running"] == 1
    wait_until(lambda: not queue.redis.exists(queue.keys.lock(lease.token)), 5, "the lease to expire")
    assert queue.sweep().dead_lettered == ["x"]  # its second attempt: dead-lettered
    check(queue)
    assert queue.requeue_failed(["x"]) == 1
    assert queue.inspect("x") is not None and queue.inspect("x").group == "g"  # type: ignore[union-attr]
    check(queue)
    lease = queue.claim()[0]
    assert queue.ack(lease)
    assert queue.inspect("x").group is None  # type: ignore[union-attr]
    check(queue)
    assert queue.groups() == []


def test_cancel_and_delete_take_a_grouped_job_out_of_its_line(queue: Queue) -> None:
    queue.set_group_limits(concurrency=1)
    queue.enqueue(["a1", "a2", "a3"], group="A")
    running = queue.claim()[0]
    assert queue.cancel("a2") == "todos"
    check(queue)
    assert queue.cancel(running.id) == "in_progress"  # frees the group's slot: a3 may start
    check(queue)
    assert [lease.id for lease in queue.claim()] == ["a3"]
    assert queue.delete("a3") == "in_progress"
    check(queue)
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
    wait_until(lambda: queue.core.next_due is not None and queue.due_in() is not None and queue.due_in() <= 0, 5, "due")  # type: ignore[operator]
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


def test_a_thousand_groups_take_turns_of_at_most_four_jobs(queue: Queue) -> None:
    for g in range(1000):
        queue.enqueue([f"g{g}-{n}" for n in range(10)], group=f"g{g}")
    first: list[str] = []
    for _ in range(8):  # 4,000 jobs: a turn for every group
        first += [lease.id for lease in queue.claim(500)]
    per_group = Counter(job_id.split("-")[0] for job_id in first)
    assert per_group == {f"g{g}": 4 for g in range(1000)}
    assert [job_id for job_id in first if job_id.startswith("g7-")] == ["g7-0", "g7-1", "g7-2", "g7-3"]
    check(queue)


# -- the command line


def run_cli(redis_url: str, queue: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli(["--redis-url", redis_url, "--queue", queue, *args], out=out)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ["limit", "--rate", "0/s"],
        ["limit", "--rate", "abc"],
        ["limit", "--rate=-5/s"],
        ["limit", "--rate", "99999999999/s"],
        ["limit", "--rate", "10/s", "--burst", "0"],
        ["limit", "--burst", "3"],  # no rate to give it to
        ["limit", "--group-concurrency", "0"],
        ["limit", "--group-concurrency", "-1"],
        ["limit", "--group-concurrency", "many"],
        ["limit", "--group-rate", "1/fortnight"],
        ["limit", "--group", "a{b}", "--group-concurrency", "1"],
        ["limit", "--group", "line\nbreak", "--group-concurrency", "1"],
        ["limit", "--group", "x" * 1025, "--group-concurrency", "1"],
        ["limit", "--group", "g"],  # nothing to change
        ["limit", "--group", "g", "--rate", "5/s"],  # the queue's rate is not a group's
        ["limit", "--clear"],
        ["push", "--group", "a b", "job"],
        ["push", "--group", "", "job"],
        ["groups", "--most", "0"],
    ],
)
def test_bad_limits_input_is_one_line_exit_2_and_writes_nothing(
    redis_url: str, queue: Queue, client: redis.Redis, args: list[str]
) -> None:
    queue.enqueue(["known"])  # the queue exists: only the value is wrong
    before = sorted(client.keys(f"setqueue:{{{queue.name}}}:*"))
    code, out, err = run_cli(redis_url, queue.name, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert sorted(client.keys(f"setqueue:{{{queue.name}}}:*")) == before
    assert not client.exists(queue.keys.limits, queue.keys.group_limits)


@pytest.mark.parametrize(
    "args", [["pause"], ["resume"], ["limit", "--rate", "5/s"], ["limit", "--group-concurrency", "2"]]
)
def test_limits_for_a_queue_redis_does_not_know_are_refused(
    redis_url: str, client: redis.Redis, args: list[str]
) -> None:
    code, _out, err = run_cli(redis_url, "no-such-queue-xyz", *args)
    assert code == 2
    assert "no jobs and no limits" in err
    assert client.keys("setqueue:{no-such-queue-xyz}:*") == []


def test_the_cli_shows_and_changes_the_limits(redis_url: str, queue: Queue) -> None:
    def run(*args: str) -> tuple[int, str, str]:
        return run_cli(redis_url, queue.name, *args)

    queue.enqueue(["known"])
    assert run("limit", "--rate", "100/s", "--burst", "20")[0] == 0
    assert run("limit", "--group-concurrency", "2")[0] == 0
    assert run("limit", "--group", "big", "--group-rate", "5/s")[0] == 0
    code, out, _ = run("limit", "--json")
    assert code == 0
    assert json.loads(out) == {
        "queue": queue.name,
        "paused": False,
        "rate": "100/s (burst 20)",
        "group_default": {"concurrency": 2, "rate": None},
        "groups": {"big": {"concurrency": 2, "rate": "5/s (burst 1)"}},
    }
    # A burst alone changes the rate in force; --clear drops a group's own.
    assert run("limit", "--burst", "5")[0] == 0
    assert queue.limits().rate == Rate(100, 1000, 5)
    assert run("limit", "--rate", "off", "--group-concurrency", "off")[0] == 0
    assert run("limit", "--group", "big", "--clear")[0] == 0
    assert queue.limits() == Limits()
    assert "paused" in run("pause")[1]
    assert "paused already" in run("pause")[1]
    assert "paused (setqueue resume" in run("stats")[1]


def test_the_cli_lists_groups(redis_url: str, queue: Queue) -> None:
    def run(*args: str) -> tuple[int, str, str]:
        return run_cli(redis_url, queue.name, *args)

    assert run("push", "--group", "tenant-1", "a", "b")[0] == 0
    assert run("push", "--group", "tenant-2", "c")[0] == 0
    queue.claim()
    code, out, _ = run("groups")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["group", "waiting", "running", "state", "limits"]
    assert {line.split()[0]: line.split()[1:4] for line in lines[1:]} == {
        "tenant-1": ["1", "1", "ready"],
        "tenant-2": ["1", "0", "ready"],
    }
    code, out, _ = run("groups", "--json")
    assert [json.loads(line)["name"] for line in out.splitlines()] == ["tenant-2", "tenant-1"]
    assert "groups: 2 with jobs waiting" in run("stats")[1]


def test_a_burst_given_beside_a_rate_object_is_its_burst_for_the_queue_and_a_group(queue: Queue) -> None:
    assert Rate.given(None, 5) is None and Rate.given("10/s") == Rate(10, 1000, 1)
    assert Rate.given("10/s", 4) == Rate.given(Rate(10, 1000, 1), 4) == Rate(10, 1000, 4)
    queue.set_rate(Rate(10, 1000, 1), burst=4)
    queue.set_group_limits("g", rate=Rate(10, 1000, 1), burst=4)
    limits = queue.limits()
    assert limits.rate == limits.groups["g"].rate == Rate(10, 1000, 4)
