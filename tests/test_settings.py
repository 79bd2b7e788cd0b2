"""A bad setting stops a service before it touches Redis: one line on stderr naming it, exit code 2."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from setqueue.client import redact_url
from setqueue.runtime.logs import JsonFormatter, configure_logging
from setqueue.runtime.service import load_settings
from setqueue.runtime.settings import DEMO_HANDLER, CleanerSettings, CreatorSettings, SettingError, WorkerSettings
from tests.support import REPO_ROOT, RedisServer
from tests.support.procs import base_env

COMMON = {
    "REDIS_URL": ["not-a-url", "http://localhost:6379", "redis://localhost:notaport/0", "redis+sentinel://localhost"],
    "QUEUE_NAME": ["has space", "emails,emails", "emails,,reports"],
    "QUEUE_SHARDS": ["0", "-2", "5000", "many"],
    "METRICS_HOST": ["not a host!", ""],
    "LEASE_SECONDS": ["-1", "soon"],
    "MAX_ATTEMPTS": ["0"],
    "METRICS_PORT": ["99999"],
    "LOG_LEVEL": ["LOUD"],
    "LOG_FORMAT": ["xml"],
}
ONLY = {
    "creator": {"CREATE_RATE": ["abc", "-5"], "CREATE_BATCH": ["0"], "CREATE_FROM_STDIN": ["maybe"]},
    "worker": {
        "JOB_HANDLER": ["nope:nothing", "setqueue.runtime.demo:missing", "no-colon"],
        "CLAIM_BATCH": ["0"],
        "CONCURRENCY": ["0", "-3", "1e9", "inf", "lots"],
        "PROCESSES": ["0", "-1", "abc", "1e9", "", "257"],
        "JOB_TIMEOUT_SECONDS": ["-1", "inf", "nan", "1e300", "soon"],
        "FAIL_RATE": ["2"],
        "WORK_SECONDS": ["-1"],
        "SHUTDOWN_GRACE_SECONDS": ["x"],
    },
    "cleaner": {
        "SWEEP_INTERVAL": ["0"],
        "SWEEP_BATCH": ["many"],
        "SCHEDULES": [
            "report=61 * * * *",  # a bad cron expression
            "report=0 0 30 2 *",  # one that matches no date
            "report=* * * * * *",  # seconds: not supported
            "report 0 * * * *",  # not name=cron
            "a@b=0 * * * *",  # a name that is no job-id prefix
            "x=0 * * * *;x=5 * * * *",  # a name twice
            "@/no/such/schedules/file",
        ],
    },
}
CASES = [(s, n, v) for s in ONLY for n, values in (COMMON | ONLY[s]).items() for v in values]


def run_service(module: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module],
        check=False,
        env=env,
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def outcomes(redis_server: RedisServer) -> dict[tuple[str, str, str], tuple[str, subprocess.CompletedProcess[str]]]:
    """Every case run once, four processes at a time."""

    def one(case: tuple[str, str, str]) -> tuple[str, subprocess.CompletedProcess[str]]:
        service, name, value = case
        queue_name = f"test-{uuid.uuid4().hex[:12]}"
        env = base_env(**{"REDIS_URL": redis_server.url, "QUEUE_NAME": queue_name, "METRICS_PORT": 0, name: value})
        return queue_name, run_service(service, env)

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(CASES, pool.map(one, CASES), strict=True))


@pytest.mark.parametrize("case", CASES, ids=[f"{s}-{n}={v}" for s, n, v in CASES])
def test_bad_setting_exits_2_with_one_line(
    case: tuple[str, str, str],
    outcomes: dict[tuple[str, str, str], tuple[str, subprocess.CompletedProcess[str]]],
    client: redis.Redis,
) -> None:
    service, name, _ = case
    queue_name, result = outcomes[case]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert name in lines[0] and "Traceback" not in result.stderr
    assert lines[0].startswith(f"setqueue-{service}: invalid setting {name}")
    assert result.stdout == ""
    assert client.keys(f"setqueue:{{{queue_name}}}:*") == []


def test_metrics_port_in_use_exits_2(redis_url: str, queue_name: str, client: redis.Redis) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_service("cleaner", base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=port))
    assert result.returncode == 2, result.stderr
    assert "METRICS_PORT" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert client.keys(f"setqueue:{{{queue_name}}}:*") == []


@pytest.mark.parametrize("settings_cls", [CreatorSettings, WorkerSettings, CleanerSettings])
def test_defaults_are_valid(settings_cls: type[CreatorSettings]) -> None:
    settings = settings_cls.from_env({"JOB_HANDLER": DEMO_HANDLER})  # the one setting without a default
    assert settings.metrics_port == 8000 and settings.queue_name == "default"


def test_a_worker_needs_its_job_function_named() -> None:
    with pytest.raises(SettingError, match=r"JOB_HANDLER: is not set: .*setqueue\.runtime\.demo:simulated_work"):
        WorkerSettings.from_env({})
    assert CreatorSettings.from_env({}) and CleanerSettings.from_env({})  # they run no jobs


def test_load_settings_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_settings(WorkerSettings, "prog", {"MAX_ATTEMPTS": "0"}) is None
    err = capsys.readouterr().err
    assert err == "prog: invalid setting MAX_ATTEMPTS: 0 is out of range (must be between 1 and 1000)\n"
    settings = load_settings(WorkerSettings, "prog", {"CLAIM_BATCH": "3", "JOB_HANDLER": DEMO_HANDLER})
    assert settings is not None and settings.claim_batch == 3


def test_json_logs_are_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json", "setqueue-test", stream=sys.stderr)
    logging.getLogger("setqueue.test").info("hello %s\nworld", "there")
    logging.getLogger("setqueue.test").debug("hidden")
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["message"] == "hello there\nworld" and record["level"] == "INFO"
    assert record["service"] == "setqueue-test"
    assert isinstance(JsonFormatter("x").format(logging.makeLogRecord({"msg": "m"})), str)
    logging.getLogger().handlers.clear()


def test_redact_url_hides_the_password() -> None:
    assert redact_url("redis://:secret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert redact_url("redis://user:secret@redis/0") == "redis://user:***@redis/0"
    assert redact_url("redis://localhost:6379/0") == "redis://localhost:6379/0"


def test_a_wait_for_replicas_must_end_before_the_redis_timeout() -> None:
    env = {"WAIT_REPLICAS": "1", "WAIT_TIMEOUT_SECONDS": "5", "REDIS_TIMEOUT_SECONDS": "5", "JOB_HANDLER": DEMO_HANDLER}
    with pytest.raises(SettingError, match="WAIT_TIMEOUT_SECONDS: 5 must be shorter than REDIS_TIMEOUT_SECONDS"):
        WorkerSettings.from_env(env)
    assert WorkerSettings.from_env({**env, "REDIS_TIMEOUT_SECONDS": "6"}).wait_timeout_seconds == 5
    assert WorkerSettings.from_env({**env, "WAIT_REPLICAS": "0"}).wait_replicas == 0  # no WAIT: no limit
