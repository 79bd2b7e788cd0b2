"""What a newcomer trips on, each as it happened to one, on real processes and a real redis-server."""

from __future__ import annotations

import io
import json
import logging
import re
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from cleaner.service import CleanerService
from setqueue import FailOutcome, Lease, Queue, open_queue
from setqueue.runtime.cli import main as cli_main
from setqueue.runtime.logs import plural
from setqueue.runtime.periodic import add_schedule, latest_slot, redis_now
from setqueue.runtime.settings import DEMO_HANDLER, CleanerSettings
from tests.support import REPO_ROOT, RedisServer
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc, base_env
from tests.support.waits import wait_until
from worker.failures import FailureLog


def run_service(
    service: str, *args: str, cwd: Path = REPO_ROOT, **settings: object
) -> subprocess.CompletedProcess[str]:
    env = base_env(METRICS_PORT=0, **settings)
    if cwd != REPO_ROOT:
        env["PYTHONPATH"] = str(REPO_ROOT)
    command = [sys.executable, "-m", service, *args]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def cli(redis_url: str, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return cli_main(["--redis-url", redis_url, *argv], out=out), out.getvalue()


# -- 1. a worker with no handler named


def test_a_worker_without_a_job_handler_refuses_to_start_and_leaves_the_jobs(
    redis_url: str, queue_name: str, queue: Queue
) -> None:
    queue.enqueue({"important-payment": {"amount": 100}})
    result = run_service("worker", REDIS_URL=redis_url, QUEUE_NAME=queue_name, JOB_HANDLER="")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "JOB_HANDLER: is not set" in line and DEMO_HANDLER in line
    info = queue.inspect("important-payment")
    assert info is not None and (info.state, info.attempts) == ("todos", 0)


def test_the_compose_stack_names_the_demo_handler() -> None:
    compose = (REPO_ROOT / "docker-compose.yml").read_text()
    assert f'JOB_HANDLER: "${{JOB_HANDLER:-{DEMO_HANDLER}}}"' in compose


# -- 2. --help and --version


@pytest.mark.parametrize("service", ["worker", "creator", "cleaner"])
def test_help_and_version_print_and_touch_no_redis(service: str) -> None:
    unreachable = "redis://127.0.0.1:1/0"  # nothing listens: were it contacted, the service would wait
    helped = run_service(service, "--help", REDIS_URL=unreachable)
    assert helped.returncode == 0 and helped.stdout.startswith(f"usage: setqueue-{service}")
    assert "REDIS_URL" in helped.stdout and ("JOB_HANDLER" in helped.stdout) == (service == "worker")
    version = run_service(service, "--version", REDIS_URL=unreachable)
    assert (version.returncode, version.stdout) == (0, f"setqueue-{service} (setqueue 0.1.0)\n")
    wrong = run_service(service, "--concurrency", "5", REDIS_URL=unreachable)
    assert wrong.returncode == 2 and len(wrong.stderr.splitlines()) == 1 and "environment" in wrong.stderr


def test_the_command_line_says_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli_main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == "setqueue 0.1.0\n"


# -- 3. a missing password


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    server = RedisServer(args=["--requirepass", "right"]).start()
    yield server
    server.cleanup()


def connections(server: RedisServer) -> int:
    return int(redis.Redis(port=server.port, password="right").info("stats")["total_connections_received"])


def test_a_missing_password_is_said_at_once_without_retrying(
    locked_redis: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"redis://127.0.0.1:{locked_redis.port}/0"
    before = connections(locked_redis)
    assert cli(url, "stats") == (3, "")
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"setqueue: Redis at {url} requires a password: set it in --redis-url or REDIS_URL"
    worker = run_service("worker", REDIS_URL=url)
    assert worker.returncode == 3
    [line] = worker.stderr.splitlines()
    assert "requires a password: set it in REDIS_URL" in line
    # Each asked once (plus this count's own connection): no retry loop.
    assert connections(locked_redis) - before <= 4


# -- 4. errors keep their place


@pytest.mark.parametrize(
    ("module", "handler", "says"),
    [
        ("import json\n\ndata = json.loads('')\n\ndef handle(lease): pass\n", "handle", r"badmod\.py, line 3"),
        ("handle = 3\n", "handle", r"badmod:handle is not callable: it is 3"),
        (
            "def handle(lease, other): pass\n",
            "handle",
            r"badmod:handle\(lease, other\) cannot be called with one lease",
        ),
        ("def handle(lease): pass\n", "missing", r"module 'badmod' \(.*badmod\.py\) has no 'missing'"),
    ],
)
def test_a_bad_handler_module_is_one_line_with_its_place(tmp_path: Path, module: str, handler: str, says: str) -> None:
    (tmp_path / "badmod.py").write_text(module)
    result = run_service("worker", cwd=tmp_path, REDIS_URL="redis://127.0.0.1:1/0", JOB_HANDLER=f"badmod:{handler}")
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert re.search(says, line), line


def test_a_failing_handler_logs_its_traceback_once_and_inspect_shows_it(
    start_worker: Callable[..., Proc], redis_url: str, queue_name: str, queue: Queue
) -> None:
    queue.enqueue([f"fail-{n}" for n in range(6)], max_attempts=1)
    worker = start_worker(queue_name)
    wait_until(lambda: queue.stats()["failed"] == 6, 30, "six dead letters")
    log = worker.log()
    assert log.count("Traceback (most recent call last)") == 1, log  # the five like it are counted, not logged
    assert re.search(r"WARNING .*job fail-\d \(attempt 1\) failed, dead: Traceback", log)
    assert re.search(r'tests/support/jobs\.py", line \d+, in handle\n +raise ValueError', log)
    info = queue.inspect("fail-3")
    assert info is not None and info.error == "ValueError('job fail-3 fails, as its name says')"
    assert info.traceback is not None and "jobs.py" in info.traceback and "raise ValueError" in info.traceback
    code, out = cli(redis_url, "--queue", queue_name, "inspect", "fail-3")
    shown = json.loads(out)
    assert code == 0 and shown["traceback"] == info.traceback and shown["error"] == info.error


def test_the_same_failure_again_is_counted_then_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    failures = FailureLog(logging.getLogger("test.failures"), window=0.0)
    lease = Lease("job-1", "token", 1, None, None, 0.0)
    errors = []
    for _ in range(3):
        try:
            raise ValueError("the same")
        except ValueError as exc:
            errors.append(exc)
    quiet = FailureLog(logging.getLogger("test.failures"), window=3600)
    with caplog.at_level(logging.WARNING, "test.failures"):
        for error in errors:
            quiet.failed(lease, error, "retried")
        quiet.window = 0.0
        quiet.flush()
        failures.failed(lease, errors[0], "retried")
    lines = [r.getMessage() for r in caplog.records]
    assert sum("Traceback" in line for line in lines) == 2  # the first of each log's window
    assert any(line.startswith("2 more job failures like ValueError at ") for line in lines), lines


# -- 5. a lone string


def test_a_lone_string_is_never_enqueued_letter_by_letter(redis_url: str, queue_name: str, client: redis.Redis) -> None:
    for queue in (
        open_queue(redis_url, queue_name),
        open_queue(redis_url, f"{queue_name}-s", shards=3),
        open_queue(redis_url, [f"{queue_name}-a", f"{queue_name}-b"]),
    ):
        with pytest.raises(TypeError, match=r"not a str: enqueue\(\['single-id'\]\)"):
            queue.enqueue("single-id")
        with pytest.raises(TypeError, match="not a bytes"):
            queue.enqueue(b"single-id")  # type: ignore[arg-type]
    assert client.keys(f"setqueue:{{{queue_name}*") == []


# -- 6. a job's own options


def test_a_jobs_own_max_attempts_and_timeout_win_over_the_workers(
    start_worker: Callable[..., Proc], tmp_path: Path, queue_name: str, queue: Queue
) -> None:
    execlog = ExecutionLog(tmp_path / "exec.log")
    queue.enqueue(["fail-once"], max_attempts=1)
    queue.enqueue(["fail-thrice"], max_attempts=3)
    queue.enqueue(["sleep-30-a"], timeout=0.5, max_attempts=1)
    start_worker(queue_name, MAX_ATTEMPTS=5, JOB_TIMEOUT_SECONDS=300, RETRY_BACKOFF_SECONDS=0)
    wait_until(lambda: queue.stats()["failed"] == 3, 30, "three dead letters")
    assert execlog.starts() == {"fail-once": 1, "fail-thrice": 3, "sleep-30-a": 1}
    info = queue.inspect("sleep-30-a")
    assert info is not None and info.error == "timeout: the job ran longer than its own timeout (0.5s)"
    assert (info.max_attempts, info.timeout) == (1, 0.5)


def test_the_options_are_checked_before_anything_is_written(queue: Queue, client: redis.Redis) -> None:
    for options in ({"max_attempts": 0}, {"max_attempts": 1.5}, {"timeout": -1}, {"timeout": float("nan")}):
        with pytest.raises(ValueError, match=r"max_attempts|timeout"):
            queue.enqueue(["x"], **options)  # type: ignore[arg-type]
    assert client.keys(queue.keys.prefix + "*") == []


# -- 7. the queue list on the command line


def test_the_command_line_takes_the_queue_list_the_worker_takes(redis_url: str, queue_name: str) -> None:
    both = f"{queue_name}-hi,{queue_name}-lo"
    assert cli(redis_url, "--queue", both, "push", "a") == (0, "1 new, 0 already known\n")
    Queue.from_url(redis_url, f"{queue_name}-lo").enqueue(["b"])
    code, out = cli(redis_url, "--queue", both, "stats")
    assert (
        code == 0 and f"queue {queue_name}-hi\n  todos                  1" in out and f"queue {queue_name}-lo\n" in out
    )
    code, out = cli(redis_url, "--queue", both, "stats", "--json")
    stats = json.loads(out)
    assert stats["queue"] == both and stats["todos"] == 2 and set(stats["queues"]) == set(both.split(","))
    code, out = cli(redis_url, "--queue", both, "inspect", "b")
    assert code == 0 and json.loads(out)["queue"] == f"{queue_name}-lo"


# -- 8. a worker alone


def test_a_worker_alone_brings_back_a_killed_workers_jobs(
    start_worker: Callable[..., Proc], tmp_path: Path, redis_url: str, queue_name: str, queue: Queue
) -> None:
    """No cleaner runs: the next worker sweeps once nobody has for STANDIN_SWEEP_SECONDS, and says so."""
    execlog = ExecutionLog(tmp_path / "exec.log")
    queue.enqueue(["held-1", "held-2", "held-3", "free-1"])
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.support.actors", "hold", redis_url, queue_name, "3"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and len(json.loads(holder.stdout.readline())) == 3
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    worker = start_worker(queue_name, STANDIN_SWEEP_SECONDS=1)
    wait_until(lambda: queue.stats()["done"] == 4, 30, "every job done, the held ones too")
    assert set(execlog.starts()) == {"held-1", "held-2", "held-3", "free-1"}
    assert re.search(r"WARNING .*no cleaner has swept queue \S+ for \d+s: this worker swept it", worker.log())
    assert worker.metric("setqueue_standin_sweeps_total") >= 1


# -- 9. one package


def test_one_package_named_setqueue_carries_the_library_the_command_and_the_services(tmp_path: Path) -> None:
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO_ROOT)]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("*.whl")
    assert wheel.name == "setqueue-0.1.0-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("setqueue/queue.py", "setqueue/lua/claim.lua", "setqueue/runtime/cli.py", "worker/__main__.py"):
        assert needed in names, needed
    entry_points = zipfile.ZipFile(wheel).read("setqueue-0.1.0.dist-info/entry_points.txt").decode()
    for script in ("setqueue = ", "setqueue-worker = ", "setqueue-creator = ", "setqueue-cleaner = "):
        assert script in entry_points, script
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)], check=True
    )
    env = {**base_env(), "PYTHONPATH": str(site)}
    for module in ("worker", "setqueue"):
        run = subprocess.run(
            [sys.executable, "-m", module, "--version"], env=env, cwd="/", capture_output=True, text=True, check=True
        )
        assert "0.1.0" in run.stdout
    assert not (REPO_ROOT / "shared" / "pyproject.toml").exists()  # one package, one way to install


# -- 10. schedules in force


def test_schedules_in_force_live_in_redis(
    redis_url: str, queue_name: str, queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cleaner registers its SCHEDULES; the CLI lists them without SCHEDULES; the API adds one the cleaner runs."""
    env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0, SCHEDULES="report=0 * * * *")
    cleaner = CleanerService(CleanerSettings.from_env(env))
    try:
        assert cleaner.create_periodic_runs() == []  # registered; first seen
        monkeypatch.delenv("SCHEDULES", raising=False)
        code, out = cli(redis_url, "--queue", queue_name, "schedules", "--json")
        assert code == 0 and [json.loads(line)["name"] for line in out.splitlines()] == ["report"]
        add_schedule(queue, "tick", "* * * * *")
        now = redis_now(queue.redis)
        assert cleaner.create_periodic_runs(now) == []  # tick seen for the first time: its slot recorded
        queue.redis.hset(queue.keys.periodic, "tick", round((latest_slot("* * * * *", now) - 60) * 1000))
        [run] = cleaner.create_periodic_runs(now)
        assert run.startswith("tick@") and queue.inspect(run) is not None
        with pytest.raises(ValueError, match="fields"):
            add_schedule(queue, "bad", "* *")
    finally:
        cleaner.close()


# -- 11. smaller things


def test_inspect_shows_times_in_iso_8601(redis_url: str, queue_name: str, queue: Queue) -> None:
    queue.enqueue(["a"], delay=60)
    code, out = cli(redis_url, "--queue", queue_name, "inspect", "a")
    shown = json.loads(out)
    assert code == 0 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", shown["due_at_utc"])


def test_log_lines_count_in_words() -> None:
    assert (plural(1, "job"), plural(3, "job"), plural(0, "old id")) == ("1 job", "3 jobs", "0 old ids")


def test_payloads_are_text_bytes_or_json(queue: Queue) -> None:
    queue.enqueue({"text": "hello", "bytes": "café".encode(), "json": {"amount": 100, "to": ["ann"]}, "n": 7})
    leases = {lease.id: lease for lease in queue.claim(10)}
    assert leases["text"].payload == "hello" and leases["bytes"].payload == "café"
    assert leases["json"].json() == {"amount": 100, "to": ["ann"]} and leases["n"].json() == 7
    for bad, error in (
        ({"x": b"\xff\xfe"}, ValueError),
        ({"x": object()}, TypeError),
        ({"x": float("inf")}, TypeError),
    ):
        with pytest.raises(error):
            queue.enqueue(bad)
    assert queue.inspect("x") is None


def test_a_payload_too_large_is_refused_before_anything_is_sent(
    make_queue: Callable[..., Queue], redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = make_queue()
    with pytest.raises(
        ValueError, match=r"payload of 'big' is 2,097,152 bytes, more than payload_max_bytes \(1,048,576\)"
    ):
        queue.enqueue({"small": "ok", "big": "x" * 2 * 1024 * 1024})
    assert queue.stats()["todos"] == 0  # not even the small one
    monkeypatch.setenv("PAYLOAD_MAX_BYTES", "10")
    assert cli(redis_url, "--queue", queue_name, "push", "y", "--payload", "eleven byte") == (2, "")
    assert queue.inspect("y") is None
    assert queue.enqueue({"fine": "x" * 1024}) == 1


def test_a_jobs_own_max_attempts_holds_for_any_caller_of_fail(queue: Queue) -> None:
    queue.enqueue(["a"], max_attempts=1)
    [lease] = queue.claim()
    assert queue.fail(lease, "no") is FailOutcome.DEAD
