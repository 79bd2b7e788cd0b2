"""The `setqueue` command: every subcommand, its output and its exit codes."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from setqueue import Queue
from setqueue.runtime.cli import main
from tests.support import REPO_ROOT, free_port
from tests.support.procs import base_env

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run the CLI in-process against the test queue: (exit code, stdout, stderr)."""

    def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
        out = io.StringIO()
        code = main(["--redis-url", redis_url, "--queue", queue_name, *argv], stdin=io.StringIO(stdin), out=out)
        return code, out.getvalue(), capsys.readouterr().err

    return run


@pytest.fixture
def no_worker(queue_name: str) -> str:
    """What push says on stderr here, where no worker serves the test queue."""
    return (
        f"setqueue: warning: no live worker serves queue '{queue_name}': its jobs wait until one does "
        "(a typo? setqueue doctor lists the queues with work and no worker)\n"
    )


def test_push_ids_and_stdin(cli: Cli, queue: Queue, no_worker: str) -> None:
    assert cli("push", "a", "b") == (0, "2 new, 0 already known\n", no_worker)
    assert cli("push", stdin="b\n\nc\n  d  \n") == (0, "2 new, 1 already known\n", no_worker)
    assert cli("push", "-", stdin="e\n") == (0, "1 new, 0 already known\n", no_worker)
    assert queue.stats()["todos"] == 5


def test_push_rejects_a_bad_id(cli: Cli) -> None:
    code, out, err = cli("push", "x" * 2000)
    assert code == 2 and out == "" and err.startswith("setqueue: bad job id")


def test_stats_text_and_json(cli: Cli, queue: Queue) -> None:
    queue.enqueue(["a", "b", "c"])
    lease = queue.claim(1)[0]
    queue.ack(lease)
    code, out, _ = cli("stats")
    assert code == 0
    assert "todos" in out and "done" in out and "oldest pending" in out
    code, out, _ = cli("stats", "--json")
    assert code == 0
    stats = json.loads(out)
    assert stats["todos"] == 2 and stats["done"] == 1 and stats["in_progress"] == 0 and stats["failed"] == 0


def test_inspect(cli: Cli, queue: Queue) -> None:
    queue.enqueue({"job-1": "payload"})
    code, out, _ = cli("inspect", "job-1")
    assert code == 0
    info = json.loads(out)
    assert info["id"] == "job-1" and info["state"] == "todos" and info["payload"] == "payload"
    code, out, err = cli("inspect", "nope")
    assert code == 1 and out == "" and "not found" in err and len(err.splitlines()) == 1


def test_requeue_failed(cli: Cli, queue: Queue) -> None:
    queue.enqueue(["a", "b", "c"])
    for lease in queue.claim(3):
        queue.fail(lease, "boom", retry=False)
    assert cli("requeue-failed", "a") == (0, "requeued 1\n", "")
    code, out, err = cli("requeue-failed", "a", "zzz")
    assert (code, out) == (0, "requeued 0\n") and "not in failed" in err
    assert cli("requeue-failed") == (0, "requeued 2\n", "")
    stats = queue.stats()
    assert stats["todos"] == 3 and stats["failed"] == 0


def test_delete(cli: Cli, queue: Queue) -> None:
    queue.enqueue(["a"])
    assert cli("delete", "a") == (0, "deleted a (was in todos)\n", "")
    code, out, err = cli("delete", "a")
    assert code == 1 and out == "" and "not found" in err
    assert queue.stats()["todos"] == 0


def test_bad_url_and_queue_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--redis-url", "not-a-url", "stats"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "REDIS_URL" in err
    assert main(["--queue", "a b", "stats"]) == 2
    assert "QUEUE_NAME" in capsys.readouterr().err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["frobnicate"], ["inspect"], ["stats", "--watch", "x"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    capsys.readouterr()


def run_cli(*argv: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "setqueue", *argv],
        check=False,
        env=env,
        cwd=REPO_ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unreachable_redis_exits_3_without_traceback() -> None:
    env = base_env(REDIS_URL=f"redis://:secret@127.0.0.1:{free_port()}/0")
    result = run_cli("stats", env=env)
    assert result.returncode == 3
    assert result.stderr.startswith("setqueue: cannot reach Redis at redis://:***@127.0.0.1")
    assert len(result.stderr.strip().splitlines()) == 1 and "secret" not in result.stderr


def test_python_m_setqueue_reads_the_environment(redis_url: str, queue_name: str) -> None:
    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name)
    result = run_cli("push", env=env, stdin="x\ny\n")
    assert (result.returncode, result.stdout) == (0, "2 new, 0 already known\n"), result.stderr
    result = run_cli("stats", "--json", env=env)
    assert json.loads(result.stdout)["todos"] == 2


def test_stats_watch_until_ctrl_c(redis_url: str, queue_name: str, queue: Queue) -> None:
    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "setqueue", "stats", "--json", "--watch", "0.1"],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    queue.enqueue(["new"])
    deadline = time.monotonic() + 30
    while json.loads(proc.stdout.readline())["todos"] != first["todos"] + 1:
        assert time.monotonic() < deadline
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)  # read both pipes to the end: a full pipe would hold its exit
    assert proc.returncode == 0
    assert "Traceback" not in err


def test_push_with_a_payload(cli: Cli, queue: Queue, no_worker: str) -> None:
    pushed = cli("push", "job-1", "--payload", '{"to": "ann@example.com"}')
    assert pushed == (0, "1 new, 0 already known\n", no_worker)
    info = queue.inspect("job-1")
    assert info is not None and info.payload == '{"to": "ann@example.com"}'
    code, _, err = cli("push", "a", "b", "--payload", "x")
    assert code == 2 and "--payload goes with exactly one ID" in err


def test_push_reads_tab_separated_payloads_from_stdin(cli: Cli, queue: Queue, no_worker: str) -> None:
    pushed = cli("push", stdin='a\tfirst payload\nb\n\nc\t{"n": 1}\twith a tab\n')
    assert pushed == (0, "3 new, 0 already known\n", no_worker)
    payloads = {i: getattr(queue.inspect(i), "payload", "?") for i in "abc"}
    assert payloads == {"a": "first payload", "b": None, "c": '{"n": 1}\twith a tab'}


def test_push_reads_json_lines(cli: Cli, queue: Queue, no_worker: str) -> None:
    lines = '{"id": "a", "payload": "text"}\n{"id": "b", "payload": {"n": 1}}\n{"id": "c"}\n'
    assert cli("push", "--jsonl", stdin=lines) == (0, "3 new, 0 already known\n", no_worker)
    payloads = {i: getattr(queue.inspect(i), "payload", "?") for i in "abc"}
    assert payloads == {"a": "text", "b": '{"n":1}', "c": None}


@pytest.mark.parametrize(
    ("flags", "stdin", "line"),
    [
        (["--jsonl"], '{"id": "a"}\nnot json\n', 2),
        (["--jsonl"], '{"id": "a"}\n\n{"payload": "no id"}\n', 3),
        (["--jsonl"], '{"id": "a", "colour": "red"}\n', 1),
        ([], "a\tok\n" + "x" * 2000 + "\tpayload\n", 2),
    ],
)
def test_a_bad_push_line_names_its_number_and_writes_nothing(
    cli: Cli, queue: Queue, flags: list[str], stdin: str, line: int
) -> None:
    code, out, err = cli("push", *flags, stdin=stdin)
    assert code == 2 and out == ""
    assert err.startswith(f"setqueue: line {line}: ") and len(err.strip().splitlines()) == 1
    assert queue.stats()["todos"] == 0


def test_requeue_failed_says_it_resets_attempts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["requeue-failed", "--help"])
    assert "attempt count reset" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "attempt count reset" in " ".join(capsys.readouterr().out.split())


def test_push_with_a_delay_or_at_a_time_schedules(cli: Cli, queue: Queue) -> None:
    assert cli("push", "a", "--delay", "15m")[0] == 0
    assert cli("push", "b", "--at", "2999-12-01T09:00:00Z")[0] == 0
    assert cli("push", "c", "--at", "2001-01-01T00:00:00+02:00")[0] == 0  # in the past: now
    stats = queue.stats()
    assert (stats["scheduled"], stats["todos"]) == (2, 1)
    info = queue.inspect("a")
    assert info is not None and info.state == "scheduled" and info.due_at is not None
    code, out, _ = cli("inspect", "b")
    assert code == 0 and json.loads(out)["state"] == "scheduled"
    assert cli("delete", "a") == (0, "deleted a (was in scheduled)\n", "")


@pytest.mark.parametrize(
    "flags",
    [
        ["--delay", "soon"],
        ["--delay=-5m"],
        ["--delay", "nan"],
        ["--delay", "inf"],
        ["--at", "tomorrow"],
        ["--at", "2026-12-01T09:00:00"],  # no zone: ambiguous
        ["--delay", "1m", "--at", "2026-12-01T09:00:00Z"],
    ],
)
def test_a_bad_delay_or_time_is_one_line_exit_2_and_nothing_written(
    cli: Cli, queue: Queue, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code, _, err = cli("push", "x", *flags)
    except SystemExit as exc:  # argparse refuses --delay with --at itself
        code, err = int(str(exc.code)), capsys.readouterr().err
    assert code == 2
    # Our own errors are one line; argparse's (both flags given) print the usage above the line.
    last = err.strip().splitlines()[-1]
    assert "--delay" in last or "--at" in last
    assert queue.inspect("x") is None
