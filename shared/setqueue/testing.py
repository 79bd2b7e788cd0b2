"""A pytest plugin for testing your own handlers and tasks against a real server, the real Lua scripts
and a real worker process: no mocks, and no eager mode that would hide what the queue does (retries,
time limits, dead letters, results).

Enable it in your ``conftest.py`` (it needs ``pip install 'setqueue[embedded]'`` for the server)::

    pytest_plugins = ["setqueue.testing"]

Fixtures (each name starts with ``setqueue_``, so none clashes with yours):

- ``setqueue_server`` (session): an ``EmbeddedServer``, started once for the whole run.
- ``setqueue_url``: the server's ``redis://`` URL. Override this fixture to test on a server of your
  own instead; the fixtures below use only the URL.
- ``setqueue_queue_name``: a new queue name for each test, so each test has its own keys (they all
  start ``setqueue:{<name>}:``); they are deleted after the test.
- ``setqueue_queue``: a ``Queue`` open on that name, closed after the test.
- ``setqueue_worker``: a function that starts a worker process (``python -m worker``) on that queue:
  ``setqueue_worker("myapp.tasks:tasks", CONCURRENCY=4)``. The handler is a ``module:attribute``
  text, as JOB_HANDLER takes, or the function or ``Tasks`` registry itself (found in its module);
  keywords are worker settings (docs/reference.md). It returns once the worker is registered, and
  every worker it started is stopped after the test.

The worker runs with this process's ``sys.path``, so it imports your modules as your tests do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue.client import connect
from setqueue.embedded import EmbeddedServer, EmbeddedStartError, EmbeddedUnavailable
from setqueue.keys import QueueKeys
from setqueue.queue import Queue
from setqueue.registry import live_workers
from setqueue.runtime.settings import SETTINGS

# A worker registers within a second of its start; the bound is for a busy machine. On stop it has
# SHUTDOWN_GRACE_SECONDS (the fixture's default below) to finish its jobs, then STOP_MARGIN_SECONDS.
READY_TIMEOUT_SECONDS = 60.0
SHUTDOWN_GRACE_SECONDS = 5.0
STOP_MARGIN_SECONDS = 5.0


class WorkerProcess:
    """A worker process a test started: ``process`` (a ``subprocess.Popen``), ``log_path`` (its
    output), ``log()``, ``stop()`` (SIGTERM: it finishes the jobs in hand; returns its exit code) and
    ``kill()`` (SIGKILL, as a crash: its jobs come back when their leases run out)."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    def log(self) -> str:
        """Everything the worker printed so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it has not exited within its grace and a margin; its exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(SHUTDOWN_GRACE_SECONDS + STOP_MARGIN_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-job, as in a crash."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def handler_spec(handler: str | object) -> str:
    """``module:attribute`` for JOB_HANDLER: a text as it is, a function from its ``__module__`` and
    ``__qualname__``, any other object (a ``Tasks`` registry) from an imported module that binds it to
    a name (not ``__main__``; a test module only if no other does). TypeError when it cannot be found
    by import (a lambda, a function inside a function)."""
    if isinstance(handler, str):
        return handler
    module = getattr(handler, "__module__", None)
    qualname = getattr(handler, "__qualname__", None)
    if callable(handler) and isinstance(module, str) and isinstance(qualname, str) and "<" not in qualname:
        return f"{module}:{qualname}"
    # A module that only imported it (a test module) comes after the others.
    for name, found in sorted(sys.modules.items(), key=lambda item: (_is_test_module(item[0]), item[0])):
        if name == "__main__" or found is None:
            continue
        for attribute, value in list(vars(found).items()):
            if value is handler:
                return f"{name}:{attribute}"
    raise TypeError(f"cannot find {handler!r} in an imported module: give it as 'module:attribute'")


def _is_test_module(name: str) -> bool:
    last = name.rpartition(".")[2]
    return last.startswith("test_") or last.endswith("_test") or last == "conftest"


def worker_env(url: str, queue_name: str, handler: str, settings: dict[str, object]) -> dict[str, str]:
    """This environment without any setqueue setting, this process's import path, then the worker's."""
    names = {setting.name for setting in SETTINGS}
    env = {k: v for k, v in os.environ.items() if k not in names}
    env["PYTHONPATH"] = os.pathsep.join(entry or os.getcwd() for entry in sys.path)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(
        REDIS_URL=url,
        QUEUE_NAME=queue_name,
        JOB_HANDLER=handler,
        METRICS_PORT="0",
        SHUTDOWN_GRACE_SECONDS=str(SHUTDOWN_GRACE_SECONDS),
    )
    env.update({k: str(v) for k, v in settings.items()})
    return env


@pytest.fixture(scope="session")
def setqueue_server() -> Iterator[EmbeddedServer]:
    """One embedded server for the session; the test fails (never skips) without the extra."""
    try:
        server = EmbeddedServer().start()
    except (EmbeddedUnavailable, EmbeddedStartError) as exc:
        pytest.fail(f"setqueue.testing: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def setqueue_url(setqueue_server: EmbeddedServer) -> str:
    """The URL the queue and the workers use."""
    return setqueue_server.url


@pytest.fixture
def setqueue_queue_name(setqueue_url: str) -> Iterator[str]:
    """A queue name of the test's own; its keys are deleted after the test."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    client = connect(setqueue_url)
    try:
        keys = list(client.scan_iter(match=f"{QueueKeys(name).prefix}*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


@pytest.fixture
def setqueue_queue(setqueue_url: str, setqueue_queue_name: str) -> Iterator[Queue]:
    """A ``Queue`` on the test's queue name (``Queue.from_url``'s defaults), closed after the test."""
    queue = Queue.from_url(setqueue_url, setqueue_queue_name)
    yield queue
    queue.close()


@pytest.fixture
def setqueue_worker(
    setqueue_url: str, setqueue_queue_name: str, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """``start(handler, **settings) -> WorkerProcess``: a worker process serving the test's queue with
    ``handler``, registered when it returns; pytest.fail with its output if it exits first. Every
    worker started is stopped after the test."""
    started: list[WorkerProcess] = []

    def start(handler: str | object, **settings: Any) -> WorkerProcess:
        spec = handler_spec(handler)
        log_path = tmp_path / f"setqueue-worker-{len(started) + 1}.log"
        with log_path.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "worker"],
                env=worker_env(setqueue_url, setqueue_queue_name, spec, settings),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        _wait_registered(worker, setqueue_url, setqueue_queue_name)
        return worker

    yield start
    for worker in started:
        worker.stop()


def _wait_registered(worker: WorkerProcess, url: str, queue_name: str) -> None:
    """Until the queue's registry lists a worker with this process's pid."""
    client: redis.Redis = connect(url)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    try:
        while not any(record.pid == worker.process.pid for record in live_workers(client, queue_name)):
            if worker.process.poll() is not None:
                pytest.fail(f"the worker exited with code {worker.process.returncode}:\n{worker.log()}", pytrace=False)
            if time.monotonic() > deadline:
                worker.kill()
                pytest.fail(f"the worker did not register within {READY_TIMEOUT_SECONDS:g}s:\n{worker.log()}")
            time.sleep(0.05)
    finally:
        with contextlib.suppress(redis.RedisError):
            client.close()
