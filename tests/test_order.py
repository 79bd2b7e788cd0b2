"""The claim order: highest priority first, then first in, first out; where retried, released, swept
and scheduled jobs join the line; priorities through the API and the CLI."""

from __future__ import annotations

import io
import json
import random
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from setqueue import FailOutcome, Queue
from setqueue.runtime.cli import main
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import wait_until, wait_until_due, wait_until_leases_expire


def claim_all(q: Queue, batch: int) -> list[str]:
    order: list[str] = []
    while leases := q.claim(batch):
        order += [lease.id for lease in leases]
    return order


def test_one_claimer_takes_a_thousand_jobs_in_the_order_they_were_pushed(queue: Queue) -> None:
    # Random ids, so neither names nor hashes order them; uneven pushes, several in one millisecond.
    ids = [uuid.uuid4().hex for _ in range(1000)]
    start = 0
    for size in (1, 7, 500, 42, 450):
        assert queue.enqueue(ids[start : start + size]) == size
        start += size
    assert claim_all(queue, 10) == ids


def test_the_same_id_twice_in_one_push_keeps_its_first_place(queue: Queue) -> None:
    assert queue.enqueue(["b", "a", "b", "c", "a"]) == 3
    assert claim_all(queue, 10) == ["b", "a", "c"]


def test_no_job_is_claimed_while_one_of_a_higher_priority_waits(queue: Queue) -> None:
    rng = random.Random(15)
    waiting: list[tuple[int, int, str]] = []  # (-priority, push number, id): the order the rule says
    pushed = 0
    for _ in range(300):
        if rng.random() < 0.6 or not waiting:
            priority = rng.randint(-10, 10)
            job_id = f"job-{pushed}"
            assert queue.enqueue([job_id], priority=priority) == 1
            waiting.append((-priority, pushed, job_id))
            pushed += 1
        else:
            [lease] = queue.claim(1)
            expected = min(waiting)
            assert (lease.id, lease.priority) == (expected[2], -expected[0])
            waiting.remove(expected)
            assert queue.ack(lease)
    assert claim_all(queue, 7) == [job_id for *_, job_id in sorted(waiting)]


def test_priority_bounds_are_checked_before_anything_is_written(queue: Queue) -> None:
    for bad in (11, -11, 1.5, True, "1"):
        with pytest.raises((ValueError, TypeError), match="priority"):
            queue.enqueue(["x"], priority=bad)  # type: ignore[arg-type]
    assert queue.inspect("x") is None


def test_a_retry_goes_to_the_back_and_a_released_job_keeps_its_place(queue: Queue) -> None:
    queue.enqueue(["a", "b", "c"])
    [a] = queue.claim(1)
    assert queue.fail(a, "boom") is FailOutcome.RETRIED  # its fault: to the back of the line
    [b] = queue.claim(1)
    assert queue.release([b]) == [FailOutcome.RELEASED]  # not its fault: its old place
    assert claim_all(queue, 10) == ["b", "c", "a"]


def test_a_job_whose_lease_was_lost_keeps_its_place(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(lease_seconds=0.2)
    q.enqueue(["a", "b", "c"], priority=3)
    q.enqueue(["d"], priority=3)
    [lease] = q.claim(1)
    assert lease.id == "a"
    wait_until_leases_expire(q, [lease])
    assert q.sweep().requeued == ["a"]
    leases = q.claim(10)
    assert [(lease.id, lease.priority) for lease in leases] == [("a", 3), ("b", 3), ("c", 3), ("d", 3)]
    assert leases[0].attempt == 2


def test_a_job_with_a_priority_keeps_it_through_backoff_and_the_dead_letter_set(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(max_attempts=2)
    q.enqueue(["low"], priority=-5)
    q.enqueue(["high"], priority=5)
    [high] = q.claim(1)
    assert q.fail(high, "later", delay=0.1) is FailOutcome.RETRIED
    info = q.inspect("high")
    assert info is not None and (info.state, info.priority) == ("scheduled", 5)
    wait_until_due(q, ["high"])
    [high] = q.claim(1)  # due again: ahead of the lower priority that waited all along
    assert (high.id, high.priority) == ("high", 5)
    assert q.fail(high, "boom") is FailOutcome.DEAD
    info = q.inspect("high")
    assert info is not None and (info.state, info.priority) == ("failed", 5)
    assert q.requeue_failed(["high"]) == 1
    assert [(lease.id, lease.priority) for lease in q.claim(10)] == [("high", 5), ("low", -5)]


def test_due_jobs_join_the_line_in_due_time_order_with_their_priority(queue: Queue) -> None:
    queue.enqueue(["x"], delay=0.3)
    queue.enqueue(["y"], delay=0.15)
    queue.enqueue(["urgent"], delay=0.2, priority=1)
    queue.enqueue(["now"])
    wait_until_due(queue, ["x", "y", "urgent"])
    assert claim_all(queue, 10) == ["urgent", "now", "y", "x"]


def test_inspect_and_stats_show_priorities(queue: Queue) -> None:
    queue.enqueue(["a"], priority=7)
    queue.enqueue(["b", "c"])
    queue.enqueue(["d"], priority=-2, delay=60)
    infos = {i: queue.inspect(i) for i in "abcd"}
    assert {i: (info.state, info.priority) for i, info in infos.items() if info} == {
        "a": ("todos", 7),
        "b": ("todos", 0),
        "c": ("todos", 0),
        "d": ("scheduled", -2),
    }
    [a] = queue.claim(1)
    info = queue.inspect("a")
    assert a.id == "a" and info is not None and (info.state, info.priority) == ("in_progress", 7)
    assert queue.stats()["todos_by_priority"] == {0: 2}


def test_the_cli_pushes_with_a_priority_in_the_order_given(
    redis_url: str, queue_name: str, queue: Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    def cli(*argv: str, stdin: str = "") -> tuple[int, str]:
        out = io.StringIO()
        code = main(["--redis-url", redis_url, "--queue", queue_name, *argv], stdin=io.StringIO(stdin), out=out)
        return code, out.getvalue()

    assert cli("push", "--priority", "-3", "slow")[0] == 0
    assert cli("push", "--priority", "4", "fast")[0] == 0
    assert cli("push", stdin="b\tpayload-b\na\nc\tpayload-c\nd\n")[0] == 0  # mixed lines, in order
    assert [(lease.id, lease.priority) for lease in queue.claim(10)] == [
        ("fast", 4),
        ("b", 0),
        ("a", 0),
        ("c", 0),
        ("d", 0),
        ("slow", -3),
    ]
    assert cli("push", "--priority", "2", "x") == (0, "1 new, 0 already known\n")
    code, out = cli("stats", "--json")
    assert code == 0 and json.loads(out)["todos_by_priority"] == {"2": 1}
    code, out = cli("stats")
    assert code == 0 and re.search(r"^    priority +2 +1$", out, re.M), out
    code, out = cli("inspect", "x")
    assert code == 0 and json.loads(out)["priority"] == 2
    assert cli("push", "--priority", "11", "y")[0] == 2
    assert "--priority" in capsys.readouterr().err and queue.inspect("y") is None


def logged_worker(tmp_path: Path, execlog: ExecutionLog, url: str, queue: str, name: str, **settings: int) -> Proc:
    env = {"REDIS_URL": url, "QUEUE_NAME": queue, "EXEC_LOG": str(execlog.path)}
    return Proc.start("worker", tmp_path, name=name, JOB_HANDLER="tests.support.jobs:handle", **env, **settings)


@pytest.mark.slow
def test_one_worker_runs_a_thousand_jobs_in_the_order_they_were_pushed(
    procs: list[Proc], tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    """The real worker, one slot: its claims (CLAIM_BATCH prefetched) run in line order."""
    execlog = ExecutionLog(tmp_path / "executions.log")
    q = Queue.from_url(redis_url, name=queue_name)
    ids = [f"job-{uuid.uuid4().hex[:8]}" for _ in range(1000)]
    for start in range(0, 1000, 100):
        q.enqueue(ids[start : start + 100])
    procs.append(logged_worker(tmp_path, execlog, redis_url, queue_name, "worker", CONCURRENCY=1, CLAIM_BATCH=50))
    wait_until(lambda: q.stats()["done"] == 1000, 120, "a thousand jobs done")
    started = [job_id for event, job_id, _, _ in execlog.events() if event == "start"]
    assert started == ids
    q.close()


@pytest.mark.slow
def test_no_job_waits_longer_than_the_backlog_ahead_of_it_takes_to_drain(
    procs: list[Proc], tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    """Three workers drain a backlog while new jobs keep coming. FIFO: a job waits only for what was
    queued ahead of it, never more than the initial backlog, so no newcomer waits longer than that
    backlog took to drain; and none is overtaken by more than the workers hold at once (a random draw
    would let hundreds overtake). Waits run from the push, timed here, to the handler's start."""
    execlog = ExecutionLog(tmp_path / "executions.log")
    q = Queue.from_url(redis_url, name=queue_name)
    backlog = [f"sleep-0.01-b{n}" for n in range(600)]
    pushed_at = dict.fromkeys(backlog, time.time())
    q.enqueue(backlog)
    for n in range(3):
        procs.append(logged_worker(tmp_path, execlog, redis_url, queue_name, f"w{n}", CONCURRENCY=2, CLAIM_BATCH=10))
    # Newcomers at a steady pace until the backlog is gone, and a little after.
    deadline = time.monotonic() + 120
    n = 0
    while q.stats()["todos"] > 0 or n < 50:
        assert time.monotonic() < deadline, "the backlog never drained"
        job_id = f"sleep-0.01-n{n}"
        pushed_at[job_id] = time.time()
        q.enqueue([job_id])
        n += 1
        time.sleep(0.02)  # the inflow's pace (a load, not a wait)
    wait_until(lambda: q.stats()["done"] == len(pushed_at), 60, "every job done")
    started = {job_id: at for event, job_id, _, at in execlog.events() if event == "start"}
    assert set(started) == set(pushed_at) and set(execlog.starts().values()) == {1}
    waits = {job_id: started[job_id] - pushed_at[job_id] for job_id in pushed_at}
    drain = max(waits[job_id] for job_id in backlog)  # when the last of the backlog started
    newcomers = [job_id for job_id in pushed_at if job_id not in set(backlog)]
    assert max(waits[job_id] for job_id in newcomers) <= drain, (drain, sorted(waits.values())[-5:])
    in_flight = 3 * (2 + 10)  # workers x (CONCURRENCY + CLAIM_BATCH)
    pushed = list(pushed_at)  # in push order
    overtaken = [sum(1 for later in pushed[i + 1 :] if started[later] < started[job]) for i, job in enumerate(pushed)]
    assert max(overtaken) <= in_flight, max(overtaken)
    q.close()
