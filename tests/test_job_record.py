"""What a job's record keeps and says, as a newcomer porting a real app expects it (issue 35): whether a
timeout is retried, when the job was first enqueued as against when it is due, and its payload once it
is done. On a real redis-server, with workers as processes where a worker decides."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from setqueue import FailOutcome, Queue
from setqueue.jobs import job_options, parse_job_options, parse_retry_timeouts, parse_trace_parent
from setqueue.runtime.cli import main as cli_main
from tests.support.console import StartConsole
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import redis_clock, wait_for_redis_clock, wait_until, wait_until_due

# -- a timeout: retried like any failure, or dead-lettered at once


def test_a_timeout_is_retried_or_dead_letters_at_once_as_the_job_or_the_worker_says(
    start_worker: Callable[..., Proc], tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    """A resize that always runs too long must not run MAX_ATTEMPTS times when its enqueue says so; the
    worker's RETRY_TIMEOUTS decides for a job that says nothing."""
    execlog = ExecutionLog(tmp_path / "exec.log")
    retrying, failing = Queue.from_url(redis_url, f"{queue_name}-r"), Queue.from_url(redis_url, f"{queue_name}-f")
    retrying.enqueue(["spin-resize"], retry_timeouts=False)
    retrying.enqueue(["spin-default"], max_attempts=2)
    failing.enqueue(["spin-default-off"])
    failing.enqueue(["spin-own-on"], retry_timeouts=True, max_attempts=2)
    common = {"JOB_TIMEOUT_SECONDS": 0.3, "MAX_ATTEMPTS": 5, "RETRY_BACKOFF_SECONDS": 0}
    start_worker(retrying.name, **common)
    start_worker(failing.name, RETRY_TIMEOUTS="false", **common)
    wait_until(lambda: retrying.stats()["failed"] == 2 and failing.stats()["failed"] == 2, 60, "four dead letters")

    assert execlog.starts() == {"spin-resize": 1, "spin-default": 2, "spin-default-off": 1, "spin-own-on": 2}
    said = {job_id: (retrying.inspect(job_id) or failing.inspect(job_id)) for job_id in execlog.starts()}
    errors = {job_id: info.error for job_id, info in said.items() if info is not None}
    assert errors == {
        "spin-resize": "timeout: the job ran longer than JOB_TIMEOUT_SECONDS (0.3s); not retried "
        "(its own retry_timeouts is off)",
        "spin-default": "timeout: the job ran longer than JOB_TIMEOUT_SECONDS (0.3s)",
        "spin-default-off": "timeout: the job ran longer than JOB_TIMEOUT_SECONDS (0.3s); not retried "
        "(RETRY_TIMEOUTS is off)",
        "spin-own-on": "timeout: the job ran longer than JOB_TIMEOUT_SECONDS (0.3s)",
    }
    assert {job_id: info.retry_timeouts for job_id, info in said.items() if info is not None} == {
        "spin-resize": False,
        "spin-default": None,
        "spin-default-off": None,
        "spin-own-on": True,
    }
    resize = said["spin-resize"]
    assert resize is not None and [(e.kind, e.detail.rpartition("; ")[2]) for e in resize.history] == [
        ("timed out", "dead-lettered")
    ]
    retrying.close()
    failing.close()


def test_push_says_whether_the_jobs_timeouts_are_retried(redis_url: str, queue_name: str, queue: Queue) -> None:
    def push(*argv: str) -> int:
        return cli_main(["--redis-url", redis_url, "--queue", queue_name, "push", *argv], out=io.StringIO())

    assert push("off", "--no-retry-timeouts", "--max-attempts", "3") == 0
    assert push("on", "--retry-timeouts") == 0 and push("plain") == 0
    shown = {job_id: queue.inspect(job_id) for job_id in ("off", "on", "plain")}
    assert {job_id: info.retry_timeouts for job_id, info in shown.items() if info is not None} == {
        "off": False,
        "on": True,
        "plain": None,
    }
    leases = {lease.id: lease for lease in queue.claim(3)}
    assert (leases["off"].retry_timeouts, leases["off"].max_attempts) == (False, 3)
    out = io.StringIO()
    assert cli_main(["--redis-url", redis_url, "--queue", queue_name, "inspect", "off"], out=out) == 0
    assert json.loads(out.getvalue())["retry_timeouts"] is False


def test_the_options_text_keeps_its_leading_parts_where_older_readers_look() -> None:
    """Lua reads the leading number, parse_job_options the first two parts, the traceparent the third."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert job_options(None, None, None, False) == "|||0"
    assert job_options(4, 2.5, parent, True) == f"4|2500|{parent}|1"
    assert job_options(4, None, None, True) == "4|||1"
    assert job_options(4, 2.5, parent) == f"4|2500|{parent}" and job_options(None, None) == ""
    for stored, read in (
        ("|||0", ((None, None), None, False)),
        (f"4|2500|{parent}|1", ((4, 2.5), parent, True)),
        (f"4|2500|{parent}", ((4, 2.5), parent, None)),
        ("4|2500", ((4, 2.5), None, None)),
    ):
        assert (parse_job_options(stored), parse_trace_parent(stored), parse_retry_timeouts(stored)) == read
    with pytest.raises(ValueError, match="retry_timeouts"):
        job_options(None, None, None, 1)  # type: ignore[arg-type]


# -- enqueued (the first enqueue) and due (when it may run), kept apart


def test_a_retry_after_a_backoff_keeps_when_the_job_was_first_enqueued(
    start_worker: Callable[..., Proc], tmp_path: Path, queue_name: str, queue: Queue, client: redis.Redis
) -> None:
    """The console showed "enqueued 21:10:24" for a job whose first attempt timed out at 21:10:09: the
    retry's due time had overwritten it."""
    execlog = ExecutionLog(tmp_path / "exec.log")
    before = redis_clock(client)
    queue.enqueue(["spin-resize"], max_attempts=2)
    start_worker(queue_name, JOB_TIMEOUT_SECONDS=0.3, RETRY_BACKOFF_SECONDS=1)
    wait_until(lambda: queue.stats()["failed"] == 1, 30, "the job dead-lettered after two timeouts")
    first_start = min(at for event, job_id, _, at in execlog.events() if event == "start")
    info = queue.inspect("spin-resize")
    assert info is not None and info.attempts == 2 and info.enqueued_at is not None and info.finished_at is not None
    assert before - 0.01 <= info.enqueued_at <= first_start, (before, info.enqueued_at, first_start)
    assert [entry.kind for entry in info.history] == ["timed out", "timed out"]
    assert not client.exists(queue.keys.enqueued), "kept past the job's end"


def test_enqueued_is_the_first_enqueue_and_due_when_it_may_run_in_every_state(
    queue: Queue, client: redis.Redis
) -> None:
    def times(job_id: str) -> tuple[str, float | None, float | None]:
        info = queue.inspect(job_id)
        assert info is not None
        return info.state, info.enqueued_at, info.due_at

    first = redis_clock(client)
    queue.enqueue(["plain"])
    queue.enqueue(["later"], delay=0.05)
    enqueued = times("plain")[1]
    assert enqueued is not None and first <= enqueued
    assert times("plain") == ("todos", enqueued, enqueued)  # due as soon as enqueued
    state, later_enqueued, later_due = times("later")
    assert state == "scheduled" and later_enqueued is not None and later_due == pytest.approx(later_enqueued + 0.05)

    # A retry after a backoff: due then, still enqueued first.
    [lease] = queue.claim(1)
    assert queue.fail(lease, "boom", delay=0.05) is FailOutcome.RETRIED
    state, kept, due = times("plain")
    assert state == "scheduled" and kept == enqueued and due is not None and due > enqueued
    wait_until_due(queue, ["plain", "later"])
    queue.sweep()  # promotes them: they join the line when due
    assert times("plain") == ("todos", enqueued, due)
    assert times("later") == ("todos", later_enqueued, later_due)
    leases = {lease.id: lease for lease in queue.claim(2)}
    assert times("plain") == ("in_progress", enqueued, due)
    assert queue.ack(leases["later"]) and times("later") == ("done", later_enqueued, None)

    # Dead-lettered, requeued (due now), cancelled: the first enqueue stays.
    assert queue.fail(leases["plain"], "again", retry=False) is FailOutcome.DEAD
    assert times("plain") == ("failed", enqueued, None)
    requeued_at = redis_clock(client)
    assert queue.requeue_failed(["plain"]) == 1
    state, kept, due = times("plain")
    assert (state, kept) == ("todos", enqueued) and due is not None and due >= requeued_at - 0.001
    assert queue.cancel("plain") == "todos" and times("plain") == ("cancelled", enqueued, None)
    assert not client.exists(queue.keys.enqueued), "kept past the jobs' end"


def test_a_job_enqueued_to_run_at_once_keeps_no_separate_enqueue_time(queue: Queue, client: redis.Redis) -> None:
    """Its pending score is its enqueue time: the happy path pays nothing for keeping it apart."""
    queue.enqueue([f"j{n}" for n in range(10)])
    leases = queue.claim(10)
    assert queue.fail(leases[0], "at once", delay=0) is FailOutcome.RETRIED
    assert not client.exists(queue.keys.enqueued)
    queue.ack_many(leases[1:])
    assert not client.exists(queue.keys.enqueued)


def test_inspect_and_the_console_show_enqueued_and_due_apart_and_the_timeout_policy(
    start_console: StartConsole, redis_url: str, queue_name: str, queue: Queue
) -> None:
    queue.enqueue(["order-7"], retry_timeouts=False)
    [lease] = queue.claim(1)
    queue.fail(lease, "timeout: the job ran longer than JOB_TIMEOUT_SECONDS (15s)", delay=0.3)
    wait_until_due(queue, ["order-7"])
    queue.sweep()
    info = queue.inspect("order-7")
    assert info is not None and info.enqueued_at is not None and info.due_at is not None
    assert info.due_at - info.enqueued_at >= 0.299  # (ms times, as floats)

    out = io.StringIO()
    assert cli_main(["--redis-url", redis_url, "--queue", queue_name, "inspect", "order-7"], out=out) == 0
    shown = json.loads(out.getvalue())
    assert (shown["enqueued_at"], shown["due_at"]) == (info.enqueued_at, info.due_at)
    assert shown["enqueued_at_utc"] < shown["due_at_utc"]

    console = start_console(QUEUE_NAME=queue_name).client()
    page = console.get(f"/queues/{queue_name}/job?id=order-7")
    assert page.status == 200
    for label, at in (("enqueued", info.enqueued_at), ("due", info.due_at)):
        assert f"<tr><th>{label}</th><td>{utc(at)} " in page.body, (label, utc(at))
    assert '<td id="retry-timeouts">dead-lettered at once (its own)</td>' in page.body
    # The line's "enqueued" column too: the first enqueue, not when it joined the line.
    assert f'title="{utc(info.enqueued_at)}"' in console.get(f"/queues/{queue_name}/jobs/todos").body


def utc(seconds: float) -> str:
    """As the console writes a time."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


# -- a done job's payload, kept for done's retention


def test_a_done_job_keeps_its_payload_while_done_keeps_its_id(
    start_worker: Callable[..., Proc], redis_url: str, queue_name: str, queue: Queue, client: redis.Redis
) -> None:
    """`inspect` of a done charge showed "payload": null: nobody could see what was charged."""
    charge = {"amount": 100, "to": "ann"}
    queue.enqueue({"charge-1": charge, "big-10-1": "x" * 1025, "fail-1": "y" * 2000}, max_attempts=1)
    worker = start_worker(queue_name, DONE_MAX_COUNT=3, PAYLOAD_KEEP_BYTES=1024)
    wait_until(lambda: queue.stats()["done"] == 2 and queue.stats()["failed"] == 1, 30, "two done, one dead")

    out = io.StringIO()
    assert cli_main(["--redis-url", redis_url, "--queue", queue_name, "inspect", "charge-1"], out=out) == 0
    shown = json.loads(out.getvalue())
    assert (shown["state"], json.loads(shown["payload"])) == ("done", charge)
    over = queue.inspect("big-10-1")  # over PAYLOAD_KEEP_BYTES: not kept
    assert over is not None and (over.state, over.payload) == ("done", None)
    dead = queue.inspect("fail-1")  # a dead letter keeps its payload whatever its size, for a requeue
    assert dead is not None and (dead.state, dead.payload) == ("failed", "y" * 2000)

    # Done's retention drops the id and its payload with it.
    queue.enqueue(["later-1", "later-2", "later-3"])
    wait_until(lambda: queue.inspect("charge-1") is None, 30, "charge-1 trimmed from done")
    assert set(client.hkeys(queue.keys.payloads)) == {"fail-1"}
    assert worker.alive()


def test_a_worker_with_payload_keep_bytes_0_keeps_none(
    start_worker: Callable[..., Proc], queue_name: str, queue: Queue, client: redis.Redis
) -> None:
    queue.enqueue({"charge-1": {"amount": 100}})
    start_worker(queue_name, PAYLOAD_KEEP_BYTES=0)
    wait_until(lambda: queue.stats()["done"] == 1, 30, "the job done")
    info = queue.inspect("charge-1")
    assert info is not None and info.payload is None and not client.exists(queue.keys.payloads)


def test_the_age_retention_drops_a_kept_payload_with_its_id(
    make_queue: Callable[..., Queue], client: redis.Redis
) -> None:
    q = make_queue(done_max_age_seconds=0.001)
    q.enqueue({"a": "payload-a"})
    q.ack(q.claim(1)[0])
    assert client.hget(q.keys.payloads, "a") == "payload-a"
    wait_for_redis_clock(client, 0.01)
    assert q.sweep().done_trimmed == 1
    assert q.inspect("a") is None and not client.exists(q.keys.payloads)
