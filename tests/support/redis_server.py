"""Real parts for the tests: a redis-server process the tests start and stop themselves."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import redis

from setqueue.keys import QueueKeys
from setqueue.scripts import text


def need(what: str, reason: str) -> None:
    """Without a real part a test cannot run: under CI that is a failure, never a skip."""
    import pytest  # noqa: PLC0415 - here only: the chaos driver imports this module, and no pytest

    message = f"{what} is not available: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set, so this fails instead of skipping)")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if not binary:
        need("redis-server", "not on PATH and REDIS_SERVER is not set (the test command installs it)")
    return binary  # type: ignore[return-value]


class RedisServer:
    """A redis-server on a free loopback port, persistence off, that can be stopped and restarted
    on the same port (to play an outage). ``args`` are added to (and override) the defaults."""

    persistence: tuple[str, ...] = ("--save", "", "--appendonly", "no")

    def __init__(self, port: int | None = None, args: Sequence[str] = ()) -> None:
        self.binary = redis_server_binary()
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="setqueue-redis-")
        self.args = list(args)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Self:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir]
        command += ["--protected-mode", "no", "--loglevel", "warning", *self.persistence, *self.args]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.AuthenticationError:  # started with --requirepass: it is up
                break
            except redis.ConnectionError:  # includes BusyLoadingError while an AOF loads
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)
        client.close()
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)
            self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


REPO_ROOT = Path(__file__).resolve().parents[2]


class PersistentRedisServer(RedisServer):
    """A RedisServer with the append-only file on (fsync always), so a stop and start on the same
    port keeps every acknowledged write: an outage, not a data loss."""

    persistence = ("--save", "", "--appendonly", "yes", "--appendfsync", "always")


def queue_members(client: redis.Redis, keys: QueueKeys) -> dict[str, list[str]]:
    """The ids in each state of a queue as stored: todos (with the waiting jobs that have a group)
    and in_progress in line order (zsets),
    done, failed and cancelled sorted (sets), scheduled by due time."""
    ordered = {"todos": keys.todos, "in_progress": keys.in_progress, "scheduled": keys.scheduled}
    found = {state: [text(i) for i in client.zrange(key, 0, -1)] for state, key in ordered.items()}  # type: ignore[union-attr, arg-type]
    # Waiting jobs with a group are in todos' state too, in the same order of ranks.
    waiting: list[Any] = client.zrange(keys.todos, 0, -1, withscores=True)  # type: ignore[assignment]
    waiting += client.zrange(keys.grouped, 0, -1, withscores=True)  # type: ignore[arg-type]
    found["todos"] = [text(i) for i, _ in sorted(waiting, key=lambda member: member[1])]
    for state, key in (("done", keys.done), ("failed", keys.failed), ("cancelled", keys.cancelled)):
        found[state] = sorted(text(i) for i in client.smembers(key))  # type: ignore[union-attr]
    return found
