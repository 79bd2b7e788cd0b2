"""Dependencies as the user sees them (docs/guide.md#dependencies): the CLI's options and inspect, the
worker's and cleaner's metrics of releases (the console's pages: tests/test_console.py)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable

import pytest
import redis
from prometheus_client import generate_latest

from cleaner.service import CleanerService
from setqueue import Lease, PermanentJobError, Queue
from setqueue.runtime.cli import main
from setqueue.runtime.settings import CleanerSettings, WorkerSettings
from tests.support.procs import base_env
from tests.support.waits import wait_until
from worker.service import WorkerService

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run the CLI in-process against the test queue: (exit code, stdout, stderr)."""

    def run(*argv: str, queue: str = queue_name) -> tuple[int, str, str]:
        out = io.StringIO()
        code = main(["--redis-url", redis_url, "--queue", queue, *argv], stdin=io.StringIO(""), out=out)
        return code, out.getvalue(), capsys.readouterr().err

    return run


def key_snapshot(client: redis.Redis, *queues: str) -> dict[str, object]:
    """Every key of ``queues`` (and of queues whose names start with theirs) with its type and value:
    what "nothing written" compares. Not the whole server: other tests' workers may still be leaving."""
    snapshot: dict[str, object] = {}
    for queue in queues:
        for key in sorted(client.scan_iter(match=f"setqueue:{{{queue}*", count=1000)):
            snapshot[key] = (client.type(key), client.dump(key))
    return snapshot


def test_push_and_send_wait_for_their_dependencies(cli: Cli, queue: Queue, queue_name: str) -> None:
    queue.enqueue(["a:1", "b"])
    other = f"{queue_name}-payments"
    assert cli("push", "p", queue=other)[0] == 0
    # An id with a colon is an id of the same queue; a job of another queue is --depends-on-in QUEUE ID.
    code, out, _ = cli("push", "c", "--depends-on", "a:1", "--depends-on-in", other, "p")
    assert (code, out) == (0, "1 new, 0 already known\n")
    code, out, _ = cli("send", "report", "--id", "r", "--depends-on", "c", "--if-dependency-fails", "run")
    assert (code, out) == (0, "r new\n")
    assert queue.stats()["waiting"] == 2
    code, out, _ = cli("inspect", "c")
    info = json.loads(out)
    assert code == 0 and info["state"] == "waiting" and info["if_dependency_fails"] == "fail"
    assert info["depends_on"] == [
        {"queue": queue_name, "id": "a:1", "state": "todos"},
        {"queue": other, "id": "p", "state": "todos"},
    ]
    assert info["dependents"] == [{"queue": queue_name, "id": "r", "state": "waiting"}]
    assert info["waiting_on"] == {
        "total": 2, "done": 0, "failed": 0, "cancelled": 0, "deleted": 0, "unknown": 0, "ended": 0
    }  # fmt: skip
    info = json.loads(cli("inspect", "r")[1])
    assert info["if_dependency_fails"] == "run" and info["task"]["name"] == "report"
    info = json.loads(cli("inspect", "b")[1])
    plain = (info["depends_on"], info["dependents"], info["waiting_on"], info["if_dependency_fails"])
    assert plain == ([], [], None, None)
    code, out, _ = cli("stats")
    assert code == 0 and any(line.split() == ["waiting", "2"] for line in out.splitlines())


@pytest.mark.parametrize(
    "flags",
    [
        ["--depends-on", "nope"],
        ["--depends-on", "a", "--depends-on", "nope"],
        ["--depends-on-in", "elsewhere", "a"],  # "a" is known in the test queue, not there
        ["--depends-on", "a", "--if-dependency-fails", "run", "--depends-on-in", "elsewhere", "nope"],
    ],
)
def test_an_unknown_dependency_is_one_line_exit_2_and_nothing_written(
    cli: Cli, queue: Queue, client: redis.Redis, flags: list[str]
) -> None:
    queue.enqueue(["a"])
    before = key_snapshot(client, queue.name, "elsewhere")
    for command in (["push", "x"], ["send", "t", "--id", "x"]):
        code, out, err = cli(*command, *flags)
        assert (code, out) == (2, "")
        assert err.startswith("setqueue: unknown dependency") and len(err.strip().splitlines()) == 1, err
        assert "nope" in err or "elsewhere" in err
        assert key_snapshot(client, queue.name, "elsewhere") == before


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--if-dependency-fails", "run"], "--if-dependency-fails goes with --depends-on"),
        (["--depends-on", "a\nb"], "bad --depends-on"),
        (["--depends-on-in", "a b", "x"], "bad --depends-on-in"),
    ],
)
def test_bad_dependency_options_are_usage_errors(cli: Cli, queue: Queue, flags: list[str], says: str) -> None:
    code, out, err = cli("push", "x", *flags)
    assert (code, out) == (2, "") and err.startswith(f"setqueue: {says}") and len(err.strip().splitlines()) == 1
    assert queue.inspect("x") is None


def test_the_worker_counts_releases_and_dependency_failures(redis_url: str, queue_name: str, queue: Queue) -> None:
    def handler(lease: Lease) -> None:
        if lease.id == "bad":
            raise PermanentJobError("no")

    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0, IDLE_WAIT_SECONDS=0.05)
    service = WorkerService(WorkerSettings.from_env(env), handler=handler)
    exported = service.metrics.registry.get_sample_value
    names = ("setqueue_dependents_released_total", "setqueue_dependency_failures_total")
    # Every series from the start, 0 until something counts.
    assert [exported(name, {"queue": queue_name}) for name in names] == [0, 0]
    queue.enqueue(["first", "bad"])
    queue.enqueue(["then"], depends_on=["first"])  # released by first's ack
    queue.enqueue(["after-bad"], depends_on=["bad", "first"])  # failed by bad's dead letter
    queue.enqueue(["anyway"], depends_on=["bad"], if_dependency_fails="run")  # released all the same
    thread = threading.Thread(target=service.run)
    thread.start()
    try:
        wait_until(lambda: queue.stats()["done"] == 3 and queue.stats()["failed"] == 2, 30, "every job ended")
    finally:
        service.request_stop()
        thread.join(30)
    assert queue.stats()["waiting"] == 0
    assert [exported(name, {"queue": queue_name}) for name in names] == [2, 1]


def test_the_cleaner_exports_waiting_jobs_and_its_releases(redis_url: str, queue_name: str, queue: Queue) -> None:
    queue.enqueue(["a"])
    queue.enqueue(["b", "c"], depends_on=["a"])
    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0)
    cleaner = CleanerService(CleanerSettings.from_env(env))
    try:
        cleaner.update_depth()
        exported = cleaner.metrics.registry.get_sample_value
        assert exported("setqueue_queue_depth", {"queue": queue_name, "state": "waiting"}) == 2
        text = generate_latest(cleaner.metrics.registry).decode()
        for name in ("setqueue_dependents_released_total", "setqueue_dependency_failures_total"):
            assert f'{name}{{queue="{queue_name}"}} 0.0' in text
    finally:
        cleaner.close()
