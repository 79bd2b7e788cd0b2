"""What a job's record keeps and says, as a newcomer porting a real app expects it (issue 35): whether a
timeout is retried, when the job was first enqueued as against when it is due, and its payload once it
is done. On a real redis-server, with workers as processes where a worker decides."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from setqueue import Queue
from setqueue.jobs import job_options, parse_job_options, parse_retry_timeouts, parse_trace_parent
from setqueue.runtime.cli import main as cli_main
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import wait_until

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
