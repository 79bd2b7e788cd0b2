"""The README's newcomer path as written: its handler module and shell lines in a fresh directory (the
install line is what `scripts/test` did), and its enqueue example pointed at the test's Redis."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support import REPO_ROOT, RedisServer, need
from tests.support.procs import base_env

README = (REPO_ROOT / "README.md").read_text()
SECTION = README[README.index("## Use as a library") : README.index("## Guarantees")]
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", SECTION, re.S)


def block(language: str, starting: str) -> str:
    [found] = [text for lang, text in BLOCKS if lang == language and text.lstrip().startswith(starting)]
    return str(found)


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_the_newcomer_path_runs_as_written(tmp_path: Path, own_redis: RedisServer) -> None:
    for port in (8001, 8002):  # the ports the README's lines give the worker and the cleaner
        if not _free(port):
            need(f"port {port}", "the README's worker and cleaner listen on it; something else does")
    (tmp_path / "myjobs.py").write_text(block("python", "# myjobs.py"))
    shell = block("sh", "JOB_HANDLER=")
    script = "set -e\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n" + shell
    env = base_env(REDIS_URL=own_redis.url)
    del env["JOB_HANDLER"]  # the README's line names it
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"  # this venv's python and setqueue
    env["PYTHONPATH"] = str(tmp_path)  # as a user's own module is, in the directory they run from
    run = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "1 new, 0 already known"
    assert json.loads(lines[1]) == {"total": 2}  # setqueue result job-1 --wait 30s
    shown = json.loads("\n".join(lines[2 : lines.index("queue default")]))  # setqueue inspect job-1
    assert (shown["state"], shown["attempts"], shown["result"]) == ("done", 1, {"total": 2})
    assert "queue default" in lines and any(re.fullmatch(r"  done +1", line) for line in lines)
    assert own_redis_client(own_redis).get("orders:handled") == "1"  # configure_worker's client did its part


def test_the_enqueue_example_runs_as_written(own_redis: RedisServer) -> None:
    example = block("python", "from setqueue import open_queue\n\n").replace("redis://localhost:6379/0", own_redis.url)
    example = example.replace('q.result("order-42", timeout=60)', 'q.result("order-42", timeout=0.1)')
    # No worker runs here: the wait for order-42's result ends after its (shortened) timeout.
    run = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=60, check=False)
    assert "TimeoutError: 1 of 1 jobs have not ended" in run.stderr, run.stderr


def test_the_tasks_example_runs_as_written(tmp_path: Path, own_redis: RedisServer) -> None:
    """The README's task module and producer, served by a real worker as the README's line starts it."""
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "tasks.py").write_text(block("python", "# shop/tasks.py"))
    producer = block("python", "from setqueue import open_queue\nfrom shop.tasks").replace(
        "redis://localhost:6379/0", own_redis.url
    )
    env = base_env(REDIS_URL=own_redis.url, QUEUE_NAME="default", METRICS_PORT="0")
    env["JOB_HANDLER"] = "shop.tasks:tasks"
    env["PYTHONPATH"] = str(tmp_path)  # as a user's own module is, in the directory they run from
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        run = subprocess.run(
            [sys.executable, "-c", producer],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        worker.kill()
        worker.wait(10)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["{'to': 'ada@example.com', 'status': 'sent'}"]


def own_redis_client(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url, decode_responses=True)


def _free(port: int) -> bool:
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
