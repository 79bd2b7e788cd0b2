"""Tasks by name: declared without Redis, sent typed by task or by name, served by a real worker."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import setqueue
import setqueue.aio
from setqueue import JobFailed, Tasks
from setqueue.jobs import ENVELOPE_VERSION, PermanentJobError, TaskCall, read_envelope
from setqueue.runtime.cli import main as cli_main
from setqueue.tasks import new_job_id
from tests.support import REPO_ROOT
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.tasks_app import add, greet, slow, tasks
from tests.support.waits import wait_until

StartWorker = Callable[..., Proc]
REGISTRY = "tests.support.tasks_app:tasks"


def keys_and_values(client: redis.Redis, name: str) -> dict[str, Any]:
    """Every key of the queue with its dump: what a refused send must leave unchanged."""
    return {key: client.dump(key) for key in client.scan_iter(match=f"setqueue:{{{name}*")}


def test_declaring_needs_no_redis_and_a_task_is_still_its_function() -> None:
    registry = Tasks()

    @registry.task
    def double(x: int) -> int:
        return 2 * x

    @registry.task(name="triple", max_attempts=3, timeout=5, priority=2)
    def triple(x: int) -> int:
        return 3 * x

    assert double(4) == 8 and triple(2) == 6
    assert registry.names == [
        f"{__name__}.test_declaring_needs_no_redis_and_a_task_is_still_its_function.<locals>.double",
        "triple",
    ]
    assert (triple.defaults.max_attempts, triple.defaults.timeout, triple.defaults.priority) == (3, 5, 2)
    later = triple.options(delay=60, priority=-1)
    assert (later.defaults.delay, later.defaults.priority, later.defaults.max_attempts) == (60, -1, 3)
    with pytest.raises(ValueError, match="declared twice"):
        registry.task(name="triple")(lambda x: x)
    with pytest.raises(ValueError, match="if_exists"):
        triple.options(if_exists="maybe")
    with pytest.raises(ValueError, match="task name"):
        registry.task(name="two words")(lambda x: x)


def test_ids_sort_by_time() -> None:
    first, second = new_job_id(), new_job_id()
    assert len(first) == len(second) and first[:13] <= second[:13]


def test_bad_calls_are_refused_naming_the_task_and_nothing_is_written(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    q.send(add, 1, 2)  # the queue exists
    before = keys_and_values(client, queue_name)
    bad: list[tuple[Any, tuple[Any, ...], dict[str, Any], str]] = [
        (add, (1,), {}, r"task add: missing a required argument: 'b'"),
        (add, (1, 2, 3), {}, r"task add: too many positional arguments"),
        (add, (1, 2), {"c": 3}, r"task add: got an unexpected keyword argument 'c'"),
        (add, (1, {2}), {}, r"task add: argument 2 is not JSON"),
        (greet, ("x",), {"punctuation": float("nan")}, r"task greet: punctuation is not JSON"),
        ("add", (object(),), {}, r"task add: argument 1 is not JSON"),
    ]
    for task, args, kwargs, message in bad:
        with pytest.raises(TypeError, match=message):
            q.send(task, *args, **kwargs)
    with pytest.raises(ValueError, match="task name"):
        q.send("bad\nname", 1)
    with pytest.raises(ValueError, match="payload_max_bytes"):
        q.send("add", "x" * 2_000_000)
    assert keys_and_values(client, queue_name) == before
    q.close()


def test_send_by_task_and_by_name_sync_and_async_results_come_back(
    start_worker: StartWorker, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    q = setqueue.open_queue(redis_url, queue_name)
    by_task = q.send(add, 2, 3)
    by_name = q.send("greet", "ada", punctuation="?")
    assert by_task.created and by_task.task == "add" and by_name.task == "greet"
    assert q.result(by_task, timeout=30) == 5
    assert q.result(by_name.id, timeout=30) == "hello ada?"

    async def produce() -> tuple[int, str]:
        async with setqueue.aio.open_queue(redis_url, queue_name) as aq:
            summed = await aq.send(add, 20, 22)
            greeted = await aq.send(greet, "bob")
            return await aq.result(summed, timeout=30), await aq.result(greeted, timeout=30)

    assert asyncio.run(produce()) == (42, "hello bob!")
    q.close()


def test_an_own_id_sent_twice_runs_once(
    start_worker: StartWorker, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    first = q.send(add.options(id="order-7"), 1, 1)
    again = q.send(add.options(id="order-7"), 5, 5)
    assert (first.id, first.created, again.id, again.created) == ("order-7", True, "order-7", False)
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    assert q.result("order-7", timeout=30) == 2  # the first call's arguments
    log = ExecutionLog(tmp_path / "exec.log")
    assert log.starts()["order-7"] == 1
    q.close()


def test_an_unknown_task_fails_at_once_naming_it_while_others_go_on(
    start_worker: StartWorker, redis_url: str, queue_name: str
) -> None:
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    q = setqueue.open_queue(redis_url, queue_name, max_attempts=5)
    unknown = q.send("charge_card", "o-1", 500)
    fine = q.send(add, 1, 2)
    with pytest.raises(JobFailed) as failed:
        q.result(unknown, timeout=30)
    assert "unknown task 'charge_card'" in str(
        failed.value.error
    ) and "add, flaky, greet, patient, report, slow, square, step, typo" in str(failed.value.error)
    info = q.inspect(unknown.id)
    assert info is not None and info.attempts == 1  # not retried
    assert q.result(fine, timeout=30) == 3
    misfit = q.send("add", 1, 2, 3)  # by name: only JSON is checked at send; the worker refuses the call
    with pytest.raises(JobFailed, match="does not fit"):
        q.result(misfit, timeout=30)
    assert q.inspect(misfit.id).attempts == 1  # type: ignore[union-attr]
    q.close()


def test_a_raw_envelope_enqueued_by_any_producer_runs(
    start_worker: StartWorker, redis_url: str, queue_name: str
) -> None:
    """The documented wire format is the contract for producers in other languages."""
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    q = setqueue.open_queue(redis_url, queue_name)
    call = f'{{"task": "add", "args": [40], "kwargs": {{"b": 2}}, "v": {ENVELOPE_VERSION}}}'
    assert q.enqueue({"raw-1": call}) == 1
    assert q.result("raw-1", timeout=30) == 42
    assert q.enqueue({"raw-2": "not a task call"}) == 1
    with pytest.raises(JobFailed, match="not a task call"):
        q.result("raw-2", timeout=30)
    q.close()


def test_per_task_max_attempts_and_timeout_are_honoured(
    start_worker: StartWorker, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    start_worker(queue_name, JOB_HANDLER=REGISTRY, JOB_TIMEOUT_SECONDS="30", RETRY_BACKOFF_SECONDS="0")
    q = setqueue.open_queue(redis_url, queue_name, max_attempts=5, retry_backoff_seconds=0)
    flaky = q.send(tasks["flaky"], "boom")  # its own max_attempts (2) over the queue's (5)
    timed = q.send(slow, 5)
    with pytest.raises(JobFailed):
        q.result(flaky, timeout=30)
    with pytest.raises(JobFailed, match="timeout"):
        q.result(timed, timeout=30)
    log = ExecutionLog(tmp_path / "exec.log")
    wait_until(lambda: log.starts()[flaky.id] == 2, 10, "two attempts")
    assert log.starts()[flaky.id] == 2 and log.starts()[timed.id] == 1
    q.close()


def test_mypy_checks_a_send_against_the_task_signature(tmp_path: Path) -> None:
    snippet = tmp_path / "producer.py"
    snippet.write_text(
        "from setqueue import Tasks, open_queue\n"
        "tasks = Tasks()\n"
        "@tasks.task\n"
        "def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
        "@tasks.task\n"
        "async def greet(name: str) -> str:\n"
        "    return name\n"
        "q = open_queue('redis://localhost')\n"
        "sent = q.send(add, 1, 2)\n"
        "reveal_type(q.result(sent))\n"
        "reveal_type(q.result(q.send(greet, 'x')))\n"
        "q.send(add, 1, 'two')\n"
        "q.send(add, 1)\n"
        "q.send('add', 1, 'two')\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--no-incremental", str(snippet)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        check=False,
    )
    out = [line.split(": ", 1)[1] for line in run.stdout.splitlines() if line.startswith(str(snippet))]
    assert 'note: Revealed type is "int"' in out or 'note: Revealed type is "builtins.int"' in out, run.stdout
    assert 'note: Revealed type is "str"' in out or 'note: Revealed type is "builtins.str"' in out, run.stdout
    errors = [line for line in out if line.startswith("error:")]
    # The two calls that do not fit add's signature, and only those: by name, nothing to check but JSON.
    assert len(errors) == 2, run.stdout
    assert '"send" of "Queue" matches argument types "Task[[int, int], int]", "int", "str"' in errors[0], errors
    assert '"send" of "Queue" matches argument types "Task[[int, int], int]", "int"' in errors[1], errors


def test_inspect_the_cli_and_the_console_show_the_task_and_its_arguments(
    start_console: Callable[..., Any], redis_url: str, queue_name: str
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    sent = q.send(greet.options(id="hi-1"), "ada", punctuation="?")
    info = q.inspect(sent.id)
    assert info is not None and info.task is not None
    assert (info.task.name, info.task.args, info.task.kwargs) == ("greet", ["ada"], {"punctuation": "?"})
    assert q.enqueue({"plain": "just text"}) == 1
    assert q.inspect("plain").task is None  # type: ignore[union-attr]
    out = io.StringIO()
    assert cli_main(["--redis-url", redis_url, "--queue", queue_name, "inspect", "hi-1"], out=out) == 0
    assert json.loads(out.getvalue())["task"] == {"name": "greet", "args": ["ada"], "kwargs": {"punctuation": "?"}}
    page = start_console(QUEUE_NAME=queue_name).client().get(f"/queues/{queue_name}/job?id=hi-1")
    assert page.status == 200
    assert '<code>greet</code>(<code>"ada"</code>, punctuation=<code>"?"</code>)' in page.body
    q.close()


def test_a_task_says_whether_its_timeouts_are_retried(redis_url: str, queue_name: str) -> None:
    registry = Tasks()

    @registry.task(name="resize", timeout=5, retry_timeouts=False)
    def resize(path: str) -> str:
        return path

    q = setqueue.open_queue(redis_url, queue_name)
    own = q.send(resize, "a.jpg")
    sent_over = q.send(resize.options(retry_timeouts=True), "b.jpg")
    by_name = q.send("resize", "c.jpg")  # by name: the worker's RETRY_TIMEOUTS
    policies = [q.inspect(s.id).retry_timeouts for s in (own, sent_over, by_name)]  # type: ignore[union-attr]
    assert policies == [False, True, None]
    q.close()


def test_setqueue_send_calls_a_task_by_name(
    start_worker: StartWorker, redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def send(*argv: str) -> tuple[int, str, str]:
        out = io.StringIO()
        code = cli_main(["--redis-url", redis_url, "--queue", queue_name, "send", *argv], out=out)
        return code, out.getvalue(), capsys.readouterr().err

    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    code, printed, _ = send("add", "2", "3")
    assert code == 0 and printed.endswith(" new\n")
    q = setqueue.open_queue(redis_url, queue_name)
    assert q.result(printed.split()[0], timeout=30) == 5
    assert send("greet", '"ada"', "--kw", 'punctuation="?"', "--id", "hi-2")[:2] == (0, "hi-2 new\n")
    assert send("greet", '"bob"', "--id", "hi-2")[:2] == (0, "hi-2 already known\n")
    assert q.result("hi-2", timeout=30) == "hello ada?"
    assert send("greet", '"eve"', "--id", "hi-2", "--if-exists", "rerun")[:2] == (0, "hi-2 new\n")
    q.close()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["bad\nname", "1"], "cannot send 'bad\\nname': a task name is 1 to 200 printable characters"),
        (["x" * 201], "a task name is 1 to 200"),
        (["add", "1", "--if-exists", "maybe"], "argument --if-exists: invalid choice: 'maybe'"),
        (["add", "ada"], "ARG 1 'ada' is not JSON (a string needs its quotes: '\"ada\"')"),
        (["add", "--kw", "b"], "--kw 'b': give NAME=JSON"),
        (["add", '"' + "x" * 2000 + '"'], "more than payload_max_bytes (1,000)"),
        (["add", "1", "--priority", "11"], "bad --priority"),
    ],
)
def test_bad_send_input_is_one_line_exit_2_and_writes_nothing(
    argv: list[str], said: str, redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "setqueue", "--redis-url", redis_url, "--queue", queue_name, "send", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        env={**os.environ, "PAYLOAD_MAX_BYTES": "1000"},
    )
    assert run.returncode == 2, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and said in run.stderr, run.stderr
    assert list(client.scan_iter(match=f"setqueue:{{{queue_name}*")) == []


def test_a_tasks_own_retry_delays_over_the_workers(start_worker: StartWorker, redis_url: str, queue_name: str) -> None:
    start_worker(queue_name, JOB_HANDLER=REGISTRY, RETRY_BACKOFF_SECONDS="0")
    q = setqueue.open_queue(redis_url, queue_name, retry_backoff_seconds=0)
    fast, slow = q.send(tasks["flaky"], "no backoff"), q.send(tasks["patient"], "backs off")
    wait_until(lambda: q.inspect(slow.id).state == "scheduled", 30, "patient's retry scheduled")  # type: ignore[union-attr]
    info = q.inspect(slow.id)
    assert info is not None and info.due_at is not None
    assert info.due_at - time.time() > 250  # drawn from 300 to 600 s: the task's own base, not the worker's 0
    with pytest.raises(JobFailed):
        q.result(fast, timeout=30)  # flaky: retried at once, the worker's backoff, then dead-lettered
    q.close()


def test_a_type_error_inside_a_task_is_retried_a_misfit_call_is_not(
    start_worker: StartWorker, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    start_worker(queue_name, JOB_HANDLER=REGISTRY, RETRY_BACKOFF_SECONDS="0")
    q = setqueue.open_queue(redis_url, queue_name)
    inside, misfit = q.send(tasks["typo"], 1), q.send("typo", 1, 2)
    for sent in (inside, misfit):
        with pytest.raises(JobFailed):
            q.result(sent, timeout=30)
    log = ExecutionLog(tmp_path / "exec.log")
    assert (log.starts()[inside.id], log.starts()[misfit.id]) == (2, 0)
    assert "does not fit" in str(q.inspect(misfit.id).error)  # type: ignore[union-attr]
    q.close()


@pytest.mark.parametrize(
    ("payload", "read"),
    [
        (None, None),
        ("", None),
        ("plain text", None),
        ("[1, 2]", None),
        (' {"task": "x"}', None),  # a task call's payload starts with its object
        ('{"a": 1}', None),  # no task key
        ('{"task": "x", "extra": 1}', None),  # a key the envelope does not have
        ('{"task": "x"', None),  # broken JSON
        ('{"task": "x"} more', None),  # something after the object
        ('{"task": "x"} \n', TaskCall("x", [], {})),  # white space after it is JSON's
        ('{"task":"x","args":[1,{"a":[2]}],"kwargs":{"k":null},"v":1}', TaskCall("x", [1, {"a": [2]}], {"k": None})),
    ],
)
def test_the_envelope_reader_takes_exactly_the_documented_objects(payload: str | None, read: TaskCall | None) -> None:
    assert read_envelope(payload) == read


@pytest.mark.parametrize(
    "payload",
    ['{"task": "x", "v": 2}', '{"task": 1}', '{"task": "x", "args": {}}', '{"task": "x", "kwargs": []}'],
)
def test_a_malformed_task_call_fails_for_good(payload: str) -> None:
    with pytest.raises(PermanentJobError):
        read_envelope(payload)
