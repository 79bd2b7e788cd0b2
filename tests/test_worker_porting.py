"""What a newcomer porting a real app still trips on (issue 35), on real processes and a real redis-server;
runs counted from the handler's side (tests.support.jobs logs `start|end <id> <pid> <time>`)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from setqueue import Lease, PayloadError, PermanentJobError, Queue
from tests.support import REPO_ROOT
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc, base_env
from tests.support.waits import wait_until

HANDLERS = {"threads": "tests.support.jobs:handle", "async": "tests.support.jobs:handle_async"}
# A log record's first line (the text format): "<time> <LEVEL> <service> <logger>: <message>".
RECORD = re.compile(r"^\d{4}-\d\d-\d\dT\S+ [A-Z]+ ", re.M)


def push(redis_url: str, queue_name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``setqueue push ...`` as a user types it."""
    command = [sys.executable, "-m", "setqueue", "--redis-url", redis_url, "--queue", queue_name, "push", *argv]
    return subprocess.run(
        command, env=base_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def records(log: str, job_id: str) -> list[str]:
    """The log records (each with its continuation lines) that name ``job_id``."""
    starts = [m.start() for m in RECORD.finditer(log)] + [len(log)]
    chunks = [log[a:b] for a, b in itertools.pairwise(starts)]
    return [chunk for chunk in chunks if re.search(rf"\b{re.escape(job_id)}\b", chunk)]


# -- 9. noise in logs


# OpenTelemetry blocked, as when it is not installed (tests/test_tracing.py), then the worker as usual.
WITHOUT_OTEL = """import runpy, sys
sys.modules["opentelemetry"] = None
runpy.run_module("worker", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("otel", ["no SDK", "not installed"])
def test_a_handlers_traceback_starts_at_the_handler(
    procs: list[Proc], tmp_path: Path, redis_url: str, queue_name: str, queue: Queue, *, otel: str
) -> None:
    """No frame of the worker's own (its slot, setqueue/otel.py's span wrapper) above the handler's, in the
    log or in what inspect keeps, whether OpenTelemetry is installed with no SDK or not at all."""
    module = "worker"
    settings = {"JOB_HANDLER": "tests.support.jobs:handle", "EXEC_LOG": str(tmp_path / "exec.log")}
    if otel == "not installed":
        (tmp_path / "worker_without_otel.py").write_text(WITHOUT_OTEL)
        module, settings["PYTHONPATH"] = "worker_without_otel", os.pathsep.join([str(tmp_path), *sys.path])
    queue.enqueue(["fail-1"], max_attempts=1)
    worker = Proc.start(module, tmp_path, REDIS_URL=redis_url, QUEUE_NAME=queue_name, **settings)
    procs.append(worker)
    wait_until(lambda: queue.stats()["failed"] == 1, 30, "the job dead-lettered")
    info = queue.inspect("fail-1")
    assert info is not None and info.traceback is not None
    [record] = [r for r in records(worker.log(), "fail-1") if "Traceback" in r]
    for traceback in (info.traceback, record):
        frames = re.findall(r'^  File "([^"]+)", line \d+, in (\w+)$', traceback, re.M)
        assert frames == [(str(REPO_ROOT / "tests" / "support" / "jobs.py"), "handle")], traceback


def test_a_permanent_job_error_is_logged_once(
    start_worker: Callable[..., Proc], tmp_path: Path, queue_name: str, queue: Queue
) -> None:
    """One record a failure: its traceback the first time, the dead letter's line for a repeat."""
    execlog = ExecutionLog(tmp_path / "exec.log")
    queue.enqueue(["permanent-1"])
    worker = start_worker(queue_name, MAX_ATTEMPTS=5)
    wait_until(lambda: queue.stats()["failed"] == 1, 30, "the first dead-lettered")
    queue.enqueue(["permanent-2"])
    wait_until(lambda: queue.stats()["failed"] == 2, 30, "the second dead-lettered")
    assert execlog.starts() == {"permanent-1": 1, "permanent-2": 1}
    log = worker.log()
    [first] = records(log, "permanent-1")
    assert "job permanent-1 (attempt 1) failed, dead: Traceback" in first, first
    assert first.rstrip().endswith("setqueue.jobs.PermanentJobError: job permanent-1 can never succeed"), first
    [second] = records(log, "permanent-2")  # like the first within the minute: no second traceback
    assert "job permanent-2 dead-lettered after attempt 1: PermanentJobError(" in second, second
    assert "Traceback" not in second


# -- 1. a payload that is not JSON


def test_the_payload_error_is_permanent_and_still_a_value_error() -> None:
    for payload, says in (
        ("{order_id: 'o9'}", "its payload is not JSON: Expecting property name"),
        (None, "no payload"),
    ):
        lease = Lease("charge-bad", "token", 1, payload, None, 0.0)
        with pytest.raises(PayloadError, match=says) as raised:
            lease.json()
        assert isinstance(raised.value, PermanentJobError) and isinstance(raised.value, ValueError)
        assert raised.value.job_id == "charge-bad" and "'charge-bad'" in str(raised.value)
    assert Lease("ok", "token", 1, '{"n": 1}', None, 0.0).json() == {"n": 1}


@pytest.mark.parametrize("kind", ["threads", "async"])
def test_a_payload_that_is_not_json_fails_at_once_with_the_reason(
    start_worker: Callable[..., Proc], tmp_path: Path, redis_url: str, queue_name: str, queue: Queue, *, kind: str
) -> None:
    """Whether the handler calls lease.json() or json.loads(lease.payload): one run, then failed."""
    execlog = ExecutionLog(tmp_path / "exec.log")
    for job_id in ("json-o9", "loads-o9"):
        pushed = push(redis_url, queue_name, job_id, "--payload", "{order_id: 'o9'}")
        assert (pushed.returncode, pushed.stdout) == (0, "1 new, 0 already known\n"), pushed.stderr
    assert push(redis_url, queue_name, "json-good", "--payload", '{"order_id": "o9"}').returncode == 0
    worker = start_worker(queue_name, JOB_HANDLER=HANDLERS[kind], MAX_ATTEMPTS=5, RETRY_BACKOFF_SECONDS=0)
    wait_until(lambda: queue.stats()["failed"] == 2 and queue.stats()["done"] == 1, 30, "two failed, one done")
    assert execlog.starts() == {"json-o9": 1, "loads-o9": 1, "json-good": 1}
    assert queue.result("json-good") == {"order_id": "o9"}
    by_json, by_loads = queue.inspect("json-o9"), queue.inspect("loads-o9")
    assert by_json is not None and by_json.attempts == 1
    assert by_json.error == (
        "PayloadError(\"job 'json-o9': its payload is not JSON: "
        'Expecting property name enclosed in double quotes: line 1 column 2 (char 1)")'
    )
    assert by_loads is not None and by_loads.attempts == 1
    assert by_loads.error == (
        "JSONDecodeError('Expecting property name enclosed in double quotes: line 1 column 2 (char 1)')"
    )
    assert worker.metric("setqueue_jobs_retried_total") == 0
    assert worker.metric("setqueue_jobs_dead_lettered_total") == 2


def test_a_reply_that_is_not_json_this_time_is_still_retried(
    start_worker: Callable[..., Proc], tmp_path: Path, queue_name: str, queue: Queue
) -> None:
    """A JSONDecodeError of anything but the job's payload (an upstream's error page) may pass: retried."""
    execlog = ExecutionLog(tmp_path / "exec.log")
    queue.enqueue({"reply-1": '{"order_id": "o9"}'}, max_attempts=3)
    start_worker(queue_name, RETRY_BACKOFF_SECONDS=0)
    wait_until(lambda: queue.stats()["failed"] == 1, 30, "the job dead-lettered")
    assert execlog.starts() == {"reply-1": 3}
    info = queue.inspect("reply-1")
    assert info is not None and info.attempts == 3 and (info.error or "").startswith("JSONDecodeError(")
