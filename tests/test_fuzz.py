"""Fuzzing every setting and `setqueue` argument: a service starts (and exits 0 on SIGTERM) or exits 2
or 3 with one line, never a traceback; a refused input writes nothing."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from setqueue.runtime.cli import main as cli_main
from setqueue.runtime.service import load_settings
from setqueue.runtime.settings import (
    DEMO_HANDLER,
    SETTINGS,
    CleanerSettings,
    CommonSettings,
    ConsoleSettings,
    CreatorSettings,
    Setting,
    WorkerSettings,
)
from tests.support import REPO_ROOT, RedisServer, free_port
from tests.support.procs import base_env

SERVICE_SETTINGS: dict[str, type[CommonSettings]] = {
    "creator": CreatorSettings,
    "worker": WorkerSettings,
    "cleaner": CleanerSettings,
    "console": ConsoleSettings,
}

# What a hurried user types and what breaks parsers: edge numbers, blanks, other scripts' digits, lone
# surrogates (undecodable bytes), long text, URLs and paths.
EDGES = st.sampled_from(
    [
        "", " ", "0", "-0", "1", "-1", "0.5", "1e3", "1e308", "-1e308", "1e-320", "inf", "-inf", "nan", "NaN",
        "9" * 400, "0x10", "1_000", "\uff11\uff12", "٣", "true", "no", "None", "null", "[]", "{}", "a,b", "x\ty", "é",
        "\udcff", "redis://", "redis://:@/", "unix://", "rediss://h:99999/0", "redis://h:6379/-1",
        "redis://h/0?socket_timeout=abc", "@/nonexistent/file", "* * * *", "a=* * * * *", "../..", "%s%n",
        "auto", "AUTO", "2",
    ]
)  # fmt: skip
TEXT = st.text(st.characters(exclude_categories=["Cc"]), max_size=40) | st.text(max_size=8).filter(
    lambda t: "\0" not in t
)
NUMBERS = st.one_of(
    st.integers().map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr), st.decimals().map(str)
)
VALUES = st.one_of(EDGES, TEXT, NUMBERS)


def safe(setting: Setting, value: str) -> str:
    """JOB_HANDLER imports the module it names: keep fuzzed names away from real modules."""
    return f"nosuchmodule_{value}" if setting.name == "JOB_HANDLER" else value


def affordable(setting: Setting, value: str) -> str:
    """PROCESSES over 2 runs as 2: the supervisor does the same for any N, 256 would only load the machine."""
    if setting.name != "PROCESSES":
        return value
    try:
        return "2" if setting.parse(value) > 2 else value
    except ValueError:
        return value


def readers(setting: Setting) -> list[str]:
    return list(SERVICE_SETTINGS) if setting.services == "all" else setting.services.split(",")


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=VALUES)
def test_any_value_of_any_setting_parses_or_is_one_line_naming_it(setting: Setting, value: str) -> None:
    value = safe(setting, value)
    for service in readers(setting):
        stderr = io.StringIO()
        env = {"JOB_HANDLER": DEMO_HANDLER, setting.name: value}  # a worker needs its handler named
        loaded = load_settings(SERVICE_SETTINGS[service], service, env, stderr=stderr)
        lines = stderr.getvalue().splitlines()
        if loaded is None:
            assert len(lines) == 1 and setting.name in lines[0], (service, value, lines)
        else:
            assert lines == [], lines


@pytest.fixture(scope="module")
def fuzz_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


def queue_keys(client: redis.Redis, queue: str) -> list[str]:
    return sorted(client.scan_iter(match=f"setqueue:{{{queue}}}:*"))  # type: ignore[arg-type]


@st.composite
def service_and_setting(draw: st.DrawFn) -> tuple[str, Setting, str]:
    setting = draw(st.sampled_from(SETTINGS))
    service = draw(st.sampled_from(readers(setting)))
    return service, setting, affordable(setting, safe(setting, draw(VALUES)))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=service_and_setting())
def test_a_service_given_any_value_starts_or_exits_2_or_3_with_one_line(
    fuzz_redis: RedisServer, case: tuple[str, Setting, str]
) -> None:
    service, setting, value = case
    queue = f"fuzz-{uuid.uuid4().hex[:8]}"
    env = base_env(REDIS_URL=fuzz_redis.url, QUEUE_NAME=queue, METRICS_PORT=0, CREATE_TOTAL=5, CONSOLE_PORT=free_port())
    try:
        # A lone surrogate outside U+DC80..U+DCFF (undecodable bytes) has no bytes at all.
        env[setting.name] = value.encode("utf-8", "surrogateescape").decode("utf-8", "surrogateescape")
        process = subprocess.Popen(
            [sys.executable, "-m", service],
            env=env,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
    except ValueError:  # an environment cannot hold this value
        return
    try:
        _, stderr = process.communicate(timeout=4)
    except subprocess.TimeoutExpired:  # it started: a stop request must end it cleanly
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, (setting.name, value, stderr[-2000:])
    assert "Traceback" not in stderr, (setting.name, value, stderr[-2000:])
    assert process.returncode in (0, 2, 3), (setting.name, value, process.returncode, stderr[-2000:])
    if process.returncode != 0:
        refusals = [line for line in stderr.splitlines() if line.startswith(f"setqueue-{service}: ")]
        assert len(refusals) == 1, (setting.name, value, stderr)
        client = redis.Redis(port=fuzz_redis.port, decode_responses=True)
        assert queue_keys(client, queue) == [], (setting.name, value)
        client.close()


COMMANDS = ["push", "stats", "inspect", "requeue-failed", "delete", "schedules", "doctor", "acl-rule"]
COMMANDS += ["cancel", "result"]
# --redis-url and --queue are fuzzed with the settings (REDIS_URL, QUEUE_NAME: the same checks).
OPTIONS = ["--payload", "--jsonl", "--delay", "--at", "--priority", "--shards", "--wait-replicas", "--json"]
OPTIONS += ["--watch", "--help", "-", "add", "remove", "--max-attempts", "--timeout", "--wait"]


def run(argv: list[str], stdin: str) -> int:
    try:
        return cli_main(argv, stdin=io.StringIO(stdin), out=io.StringIO())
    except SystemExit as exit_:  # argparse's own exit (--help prints and exits 0)
        return exit_.code if isinstance(exit_.code, int) else 2


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[list[str], str]:
    argv = draw(st.lists(st.sampled_from(COMMANDS), max_size=1))
    argv += draw(st.lists(st.sampled_from(OPTIONS) | VALUES, max_size=4))
    stdin = draw(st.text(max_size=60))
    return argv, stdin


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=command_lines())
def test_any_command_line_is_a_result_or_one_line_and_a_refusal_writes_nothing(
    redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str], case: tuple[list[str], str]
) -> None:
    argv, stdin = case
    if "--watch" in argv:  # it runs until Ctrl-C
        return
    queue = f"cli-{uuid.uuid4().hex[:8]}"
    full = ["--redis-url", redis_url, "--queue", queue, *argv]
    code = run(full, stdin)
    err = capsys.readouterr().err
    assert code in (0, 1, 2, 3), (argv, code, err)
    assert "Traceback" not in err, (argv, err)
    if code != 0:
        assert len(err.strip().splitlines()) == 1, (argv, err)
    # 1 is an answer (no such id); an unconfirmed write (no replica here) was applied by the master.
    if code in (2, 3) and "replica(s) confirmed the write" not in err:
        assert queue_keys(client, queue) == [], (argv, err)


# Every place a command line takes an id, a name or a value (X).
SLOTS = [
    ["push", "X"],
    ["push", "X", "--payload", "p"],
    ["push", "a", "--payload", "X"],
    ["push", "a", "--delay", "X"],
    ["push", "a", "--at", "X"],
    ["push", "a", "--timeout", "X"],
    ["inspect", "X"],
    ["delete", "X"],
    ["cancel", "X"],
    ["result", "X"],
    ["result", "a", "--wait", "X"],
    ["requeue-failed", "X"],
    ["schedules", "add", "X", "* * * * *"],
    ["schedules", "add", "tick", "X"],
    ["schedules", "remove", "X"],
    ["acl-rule", "X"],
    ["--queue", "X", "stats"],
    ["--shards", "X", "stats"],
    ["--wait-replicas", "X", "stats"],
    ["--redis-url", "X", "stats"],
]
# Any bytes (Python decodes non-UTF-8 ones to lone surrogates, os.fsdecode), any text, the edges above.
ARGUMENTS = st.binary(min_size=1, max_size=24).filter(lambda b: b"\0" not in b).map(os.fsdecode) | VALUES


@pytest.mark.parametrize("slot", SLOTS, ids=" ".join)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=ARGUMENTS)
def test_any_bytes_in_any_argument_is_a_result_or_one_line(
    redis_url: str, client: redis.Redis, capsys: pytest.CaptureFixture[str], slot: list[str], value: str
) -> None:
    queue = f"cli-{uuid.uuid4().hex[:8]}"
    argv = [value if word == "X" else word for word in slot]
    full = ["--redis-url", redis_url, "--queue", queue, *argv] if slot[0] != "--redis-url" else argv
    code = run(full, "")
    err = capsys.readouterr().err
    assert code in (0, 1, 2, 3), (argv, code, err)
    if code != 0:
        assert len(err.strip().splitlines()) == 1, (argv, err)
    if code in (2, 3):
        assert queue_keys(client, queue) == [], (argv, err)


UNDECODABLE = b"job-\xff\xfe"


@pytest.mark.parametrize(
    "argv",
    [
        [b"inspect", UNDECODABLE],
        [b"delete", UNDECODABLE],
        [b"cancel", UNDECODABLE],
        [b"result", UNDECODABLE],
        [b"push", UNDECODABLE],
        [b"schedules", b"remove", UNDECODABLE],
        [b"--queue", UNDECODABLE, b"stats"],
    ],
    ids=lambda argv: b" ".join(argv).decode(errors="replace"),
)
def test_undecodable_bytes_on_a_real_command_line_are_one_line_and_exit_2(redis_url: str, argv: list[bytes]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "setqueue", "--redis-url", redis_url, *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "UTF-8" in err, err


@pytest.mark.parametrize("service", list(SERVICE_SETTINGS))
def test_a_queue_name_of_undecodable_bytes_stops_a_service_with_one_line(fuzz_redis: RedisServer, service: str) -> None:
    env = {k.encode(): v.encode() for k, v in base_env(REDIS_URL=fuzz_redis.url, METRICS_PORT=0).items()}
    env[b"QUEUE_NAME"] = UNDECODABLE
    done = subprocess.run(
        [sys.executable, "-m", service], env=env, cwd=REPO_ROOT, capture_output=True, timeout=60, check=False
    )
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2 and len(err.splitlines()) == 1 and "QUEUE_NAME" in err, err
