"""Dependencies as the user sees them (docs/guide.md#dependencies): the CLI's options and inspect, the
worker's and cleaner's metrics of releases (the console's pages: tests/test_console.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
import redis

from setqueue import Queue
from setqueue.runtime.cli import main

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run the CLI in-process against the test queue: (exit code, stdout, stderr)."""

    def run(*argv: str, queue: str = queue_name) -> tuple[int, str, str]:
        out = io.StringIO()
        code = main(["--redis-url", redis_url, "--queue", queue, *argv], stdin=io.StringIO(""), out=out)
        return code, out.getvalue(), capsys.readouterr().err

    return run


def key_snapshot(client: redis.Redis) -> dict[str, object]:
    """Every key of the test server with its type and value: what "nothing written" compares."""
    snapshot: dict[str, object] = {}
    for key in sorted(client.scan_iter(count=1000)):
        kind = client.type(key)
        snapshot[key] = (kind, client.dump(key))
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
    before = key_snapshot(client)
    for command in (["push", "x"], ["send", "t", "--id", "x"]):
        code, out, err = cli(*command, *flags)
        assert (code, out) == (2, "")
        assert err.startswith("setqueue: unknown dependency") and len(err.strip().splitlines()) == 1, err
        assert "nope" in err or "elsewhere" in err
        assert key_snapshot(client) == before


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
