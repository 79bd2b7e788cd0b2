from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import Queue
from tests.support import RedisServer
from tests.support.console import ConsoleProc, StartConsole, StartWorker
from tests.support.procs import Proc

# scripts/test runs some suites as background jobs of a non-interactive shell, and those start with
# SIGINT ignored: every process a test started would inherit that, and no test could press Ctrl-C.
# A Python handler here is reset to the default in each child, as in a user's terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    """Service processes a test starts; killed when it ends."""
    started: list[Proc] = []
    yield started
    for p in started:
        p.stop()


@pytest.fixture
def start_console(tmp_path: Path, procs: list[Proc], redis_url: str) -> StartConsole:
    def start(**settings: object) -> ConsoleProc:
        console = ConsoleProc.start_console(tmp_path, redis_url, name=f"console-{len(procs)}", **settings)
        procs.append(console)
        return console

    return start


@pytest.fixture
def start_worker(tmp_path: Path, procs: list[Proc], redis_url: str) -> StartWorker:
    """A worker running tests.support.jobs:handle (logged in exec.log), beating every 0.5 s."""

    def start(queue_name: str, **settings: object) -> Proc:
        settings.setdefault("JOB_HANDLER", "tests.support.jobs:handle")
        settings.setdefault("EXEC_LOG", str(tmp_path / "exec.log"))
        settings.setdefault("WORKER_HEARTBEAT_SECONDS", "0.5")
        worker = Proc.start(
            "worker", tmp_path, name=f"worker-{len(procs)}", REDIS_URL=redis_url, QUEUE_NAME=queue_name, **settings
        )
        procs.append(worker)
        worker.wait_ready()
        return worker

    return start


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def own_redis_url() -> Iterator[str]:
    """A redis-server of the test's own, for a test that counts what the whole server does (commands
    run, scripts loaded): no client left from an earlier test may act there."""
    server = RedisServer().start()
    yield server.url
    server.cleanup()


@pytest.fixture
def queue_name() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, decode_responses=True)
    yield c
    c.close()


@pytest.fixture
def make_queue(redis_url: str, queue_name: str) -> Iterator[Callable[..., Queue]]:
    made: list[Queue] = []

    def make(**options: Any) -> Queue:
        # No retry backoff unless asked: most tests are about what happens next, not waiting for it.
        options.setdefault("retry_backoff_seconds", 0)
        q = Queue.from_url(redis_url, name=queue_name, **options)
        made.append(q)
        return q

    yield make
    for q in made:
        q.close()


@pytest.fixture
def queue(make_queue: Callable[..., Queue]) -> Queue:
    return make_queue(lease_seconds=30, max_attempts=3)
