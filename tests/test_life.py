"""A job's whole life: results, cancel, history and progress, on real worker processes whose runs are
counted from the handler's side (tests/support/jobs.py's execution log)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import JobFailed, Queue, ResultGone, UnknownJob, open_queue
from setqueue.runtime.cli import main as cli_main
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import wait_for_redis_clock, wait_until


class CountingConnection(redis.Connection):
    """Counts the calls sent to Redis (a pipeline is one; a new connection's HELLO and CLIENT SETINFO are not)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        first = command[0] if isinstance(command, list) and command else command
        if not (isinstance(first, bytes) and (b"HELLO" in first[:24] or b"CLIENT" in first[:24])):
            CountingConnection.sent += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


@pytest.fixture
def counted(redis_url: str, queue_name: str) -> Iterator[Queue]:
    pool = redis.ConnectionPool.from_url(redis_url, decode_responses=True, connection_class=CountingConnection)
    queue = Queue(redis.Redis(connection_pool=pool), queue_name)
    CountingConnection.sent = 0
    yield queue
    queue.close()


class Workers:
    """Real workers on this test's queue (conftest's start_worker), their runs in one execution log."""

    def __init__(self, start: Callable[..., Proc], tmp_path: Path, redis_url: str, queue_name: str) -> None:
        self.start_worker, self.redis_url, self.queue_name = start, redis_url, queue_name
        self.log = ExecutionLog(tmp_path / "exec.log")

    def start(self, **settings: Any) -> Proc:
        return self.start_worker(self.queue_name, **settings)

    def cli(self, *argv: str) -> tuple[int, str]:
        out = io.StringIO()
        return cli_main(["--redis-url", self.redis_url, "--queue", self.queue_name, *argv], out=out), out.getvalue()


@pytest.fixture
def workers(start_worker: Callable[..., Proc], tmp_path: Path, redis_url: str, queue_name: str) -> Workers:
    return Workers(start_worker, tmp_path, redis_url, queue_name)


# -- results


def test_a_producer_gets_the_results_of_a_thousand_jobs_without_polling(workers: Workers, counted: Queue) -> None:
    ids = [f"value-{n}" for n in range(1000)]
    counted.enqueue(ids)
    workers.start(CONCURRENCY=20, CLAIM_BATCH=50)
    sent_before = CountingConnection.sent
    values = counted.results(ids, timeout=120)
    assert [values[job_id]["id"] for job_id in ids] == ids  # every value, each once, for its own job
    assert workers.log.starts() == dict.fromkeys(ids, 1)
    # Subscribe, look once, then one look per batch of acks published: bounded by acks, not time waited.
    assert CountingConnection.sent - sent_before <= 2 + 1000 // 10, CountingConnection.sent - sent_before


def test_waiting_on_a_slow_job_costs_a_few_calls_however_long_it_takes(workers: Workers, counted: Queue) -> None:
    counted.enqueue(["sleep-1.5-a"])
    workers.start()
    before = CountingConnection.sent
    assert counted.result("sleep-1.5-a", timeout=30) is None  # the handler returned nothing
    assert CountingConnection.sent - before <= 4  # subscribe, look, look when it ended (and unsubscribe)


def test_a_failed_a_gone_and_an_unknown_result_each_say_so(workers: Workers, queue: Queue) -> None:
    queue.enqueue(["fail-1"], max_attempts=1)
    queue.enqueue(["value-1"])
    workers.start(RESULT_TTL_SECONDS=0.5)
    with pytest.raises(JobFailed) as failed:
        queue.result("fail-1", timeout=30)
    assert failed.value.state == "failed" and failed.value.error == "ValueError('job fail-1 fails, as its name says')"
    assert failed.value.traceback is not None and "raise ValueError" in failed.value.traceback
    assert queue.result("value-1", timeout=30)["id"] == "value-1"
    wait_for_redis_clock(queue.redis, 0.5)
    queue.sweep()  # drops results past their time
    with pytest.raises(ResultGone):
        queue.result("value-1")
    with pytest.raises(UnknownJob):
        queue.result("never-enqueued")
    assert queue.stats()["results_kept"] == 0


def test_a_result_that_cannot_be_kept_fails_its_job_once_with_the_reason(workers: Workers, queue: Queue) -> None:
    queue.enqueue(["big-200-a", "odd-a", "value-a"])
    workers.start(RESULT_MAX_BYTES=100)
    wait_until(lambda: queue.stats()["done"] + queue.stats()["failed"] == 3, 30, "every job ended")
    big, odd = queue.inspect("big-200-a"), queue.inspect("odd-a")
    assert big is not None and big.state == "failed" and big.attempts == 1
    assert big.error == "result: the result is 203 bytes, more than result_max_bytes (100)"
    assert odd is not None and odd.state == "failed" and odd.error is not None
    assert odd.error.startswith("result: the result is neither bytes nor JSON-serialisable")
    assert queue.result("value-a")["id"] == "value-a"
    assert not queue.redis.hexists(queue.keys.results, "big-200-a")  # nothing half-written
    assert workers.log.starts() == {"big-200-a": 1, "odd-a": 1, "value-a": 1}


def test_results_of_bytes_and_from_async_code_and_other_kinds_of_queue(workers: Workers) -> None:
    redis_url, queue_name = workers.redis_url, workers.queue_name
    sharded = open_queue(redis_url, queue_name, shards=3)
    sharded.enqueue([f"value-{n}" for n in range(6)])
    workers.start(QUEUE_SHARDS=3)
    assert sharded.results([f"value-{n}" for n in range(6)], timeout=30)["value-5"]["id"] == "value-5"
    assert asyncio.run(sharded.result_async("value-2", timeout=30))["id"] == "value-2"
    plain = Queue.from_url(redis_url, f"{queue_name}-b")
    plain.enqueue(["bytes"])
    [lease] = plain.claim()
    assert plain.ack(lease, b"\x00\xffraw")
    assert plain.result("bytes") == b"\x00\xffraw"


# -- cancel


@pytest.mark.parametrize("handler", ["tests.support.jobs:handle", "tests.support.jobs:handle_async"])
def test_a_running_job_is_stopped_within_two_seconds_and_never_retried(
    workers: Workers, queue: Queue, handler: str
) -> None:
    execlog = workers.log
    queue.enqueue(["spin-1", "sleep-0-after"])
    worker = workers.start(JOB_HANDLER=handler, CONCURRENCY=1, CLAIM_BATCH=1)
    wait_until(lambda: execlog.starts()["spin-1"] == 1, 30, "the job running")
    assert queue.cancel("spin-1") == "in_progress"
    wait_until(lambda: "cancelled" in [event for event, *_ in execlog.events()], 2, "the run stopped")
    wait_until(lambda: execlog.starts()["sleep-0-after"] == 1, 30, "the slot free again")
    info = queue.inspect("spin-1")
    assert info is not None and info.state == "cancelled" and execlog.starts()["spin-1"] == 1
    assert [entry.kind for entry in info.history] == ["cancelled"]
    assert worker.metric('setqueue_jobs_cancelled_total{where="running"}') == 1
    assert queue.cancel("spin-1") == "cancelled"  # again: nothing changes
    with pytest.raises(JobFailed, match="cancelled"):
        queue.result("spin-1")


def test_a_queued_or_scheduled_job_cancelled_never_starts(workers: Workers, queue: Queue) -> None:
    queue.enqueue(["sleep-0-a", "sleep-0-b"])
    queue.enqueue(["sleep-0-later"], delay=0.2)
    assert (queue.cancel("sleep-0-a"), queue.cancel("sleep-0-later")) == ("todos", "scheduled")
    workers.start()
    wait_until(lambda: queue.stats()["done"] == 1, 30, "the one left done")
    wait_for_redis_clock(queue.redis, 0.3)
    assert queue.claim() == []  # the scheduled one never came due into the line
    assert set(workers.log.starts()) == {"sleep-0-b"}
    assert queue.stats()["cancelled"] == 2
    assert queue.enqueue(["sleep-0-a"]) == 0  # a cancelled id is known, as a done one is


def test_a_late_ack_or_fail_of_a_cancelled_attempt_changes_nothing(queue: Queue) -> None:
    queue.enqueue(["a", "b"])
    leases = queue.claim(2)
    assert queue.cancel("a") == "in_progress"
    assert not queue.ack(leases[0], "late")
    assert str(queue.fail(leases[0], "late")) == "stale"
    assert not leases[0].progress(0.9)
    assert queue.ack(leases[1])  # the claim's other job is untouched
    info = queue.inspect("a")
    assert info is not None and (info.state, info.result_kept) == ("cancelled", False)
    assert queue.stats()["cancelled"] == 1 and queue.stats()["done"] == 1


def test_cancelling_an_ended_or_unknown_job_says_so_and_changes_nothing(
    workers: Workers, queue: Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.enqueue(["a"])
    queue.ack(queue.claim()[0])
    assert workers.cli("cancel", "a") == (0, "a had ended (done): nothing changed\n")
    assert workers.cli("cancel", "zzz")[0] == 1
    assert "not found" in capsys.readouterr().err
    assert workers.cli("cancel", "bad\nid")[0] == 2
    assert queue.inspect("a") is not None and queue.inspect("a").state == "done"  # type: ignore[union-attr]


# -- history


def test_a_job_whose_worker_was_killed_says_lease_lost_with_that_workers_pid(workers: Workers, queue: Queue) -> None:
    execlog = workers.log
    queue.enqueue(["sleep-30-a"])
    worker = workers.start(LEASE_SECONDS=1)
    wait_until(lambda: execlog.starts()["sleep-30-a"] == 1, 30, "the job running")
    pid = worker.process.pid
    worker.signal(signal.SIGKILL)
    worker.wait(10)
    [lease_token] = [queue.redis.hget(queue.keys.owners, "sleep-30-a")]
    wait_until(lambda: not queue.redis.keys(queue.keys.prefix + "lock:*"), 10, "the lease to run out", 0.05)
    assert queue.sweep().requeued == ["sleep-30-a"]
    [entry] = queue.history("sleep-30-a")
    assert entry.kind == "lease lost" and entry.worker.endswith(f":{pid}") and "swept by" in entry.detail
    assert str(lease_token).endswith(f":{pid}")


def test_a_retried_job_shows_each_failure_with_its_reason(workers: Workers, queue: Queue) -> None:
    queue.enqueue(["fail-x"], max_attempts=3)
    worker = workers.start(RETRY_BACKOFF_SECONDS=0)
    wait_until(lambda: queue.stats()["failed"] == 1, 30, "the job dead-lettered")
    history = queue.history("fail-x")
    assert [entry.kind for entry in history] == ["failed"] * 3
    assert all("ValueError('job fail-x fails, as its name says')" in entry.detail for entry in history)
    assert [e.detail.rsplit("; ", 1)[1] for e in history] == ["retried in 0s", "retried in 0s", "dead-lettered"]
    assert all(entry.worker.endswith(f":{worker.process.pid}") for entry in history)
    code, out = workers.cli("inspect", "fail-x")
    assert code == 0 and [entry["kind"] for entry in json.loads(out)["history"]] == ["failed"] * 3


def test_the_happy_path_writes_no_history(queue: Queue) -> None:
    queue.enqueue(["a"])
    queue.ack(queue.claim()[0])
    assert queue.history("a") == [] and not queue.redis.exists(queue.keys.history)


def test_a_history_keeps_its_last_ten_lines(make_queue: Any) -> None:
    queue = make_queue(max_attempts=100)
    queue.enqueue(["a"])
    for n in range(12):
        [lease] = queue.claim()
        queue.fail(lease, f"failure {n}", delay=0)
    history = queue.history("a")
    assert (
        len(history) == 10 and history[0].detail.startswith("failure 2") and history[-1].detail.startswith("failure 11")
    )


def test_requeued_dead_letters_and_hand_backs_are_in_the_history(queue: Queue) -> None:
    queue.enqueue(["a", "b"])
    [a, b] = queue.claim(2)
    queue.fail(a, "no", retry=False)
    queue.release([b])
    assert queue.requeue_failed(["a"]) == 1
    assert [e.kind for e in queue.history("a")] == ["failed", "requeued"]
    assert [e.kind for e in queue.history("b")] == ["handed back"]
    assert queue.history("a")[1].worker.endswith(f":{os.getpid()}")


# -- progress


def test_a_running_handler_reports_its_progress(workers: Workers, queue: Queue) -> None:
    queue.enqueue(["progress-1"])
    workers.start()
    wait_until(lambda: queue.redis.hexists(queue.keys.progress, "progress-1"), 30, "a report")
    info = queue.inspect("progress-1")
    assert info is not None and info.progress is not None
    assert (info.progress.fraction, info.progress.message) == (0.5, "halfway")
    _, out = workers.cli("inspect", "progress-1")
    assert json.loads(out)["progress"]["message"] == "halfway"
    assert queue.cancel("progress-1") == "in_progress"


# -- the command line


def test_setqueue_result_waits_and_says_how_it_ended(
    workers: Workers, queue: Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    queue.enqueue(["value-1", "sleep-30-slow"])
    queue.enqueue(["fail-1"], max_attempts=1)
    assert workers.cli("result", "value-1")[0] == 124  # not ended, and no wait
    workers.start()
    code, out = workers.cli("result", "value-1", "--wait", "30s")
    assert code == 0 and json.loads(out)["id"] == "value-1"
    assert workers.cli("result", "fail-1", "--wait", "30")[0] == 4
    assert workers.cli("result", "sleep-30-slow", "--wait", "0.2")[0] == 124
    assert workers.cli("result", "nope")[0] == 1
    capsys.readouterr()
    for bad in (["--wait", "-1"], ["--wait", "soon"]):
        assert workers.cli("result", "value-1", *bad)[0] == 2
        assert len(capsys.readouterr().err.splitlines()) == 1


def test_results_reach_a_waiter_in_another_thread_as_they_end(queue: Queue) -> None:
    queue.enqueue(["a"])
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(queue.result("a", timeout=30)))
    waiter.start()
    [lease] = queue.claim()
    assert queue.ack(lease, {"answer": 42})
    waiter.join(30)
    assert got == [{"answer": 42}]
