"""A redis-server process the tests start and stop themselves."""

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
from tests.support.servers import binary_under_test, server_kind, url_query


def need(what: str, reason: str) -> None:
    """Without a real part a test cannot run: under CI a failure, never a skip."""
    import pytest  # noqa: PLC0415 - the chaos driver imports this module, and no pytest

    message = f"{what} is not available: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI is set, so this fails instead of skipping)")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str:
    """The server the tests start: redis-server, or valkey-server (tests/support/servers.py chooses)."""
    binary, missing = binary_under_test()
    if not binary:
        need(f"{server_kind()} server", missing)
    return binary  # type: ignore[return-value]


class RedisServer:
    """On a free loopback port, persistence off; restartable on the same port (an outage). ``args``
    override the defaults."""

    persistence: tuple[str, ...] = ("--save", "", "--appendonly", "no")

    def __init__(self, port: int | None = None, args: Sequence[str] = ()) -> None:
        self.binary = redis_server_binary()
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="setqueue-redis-")
        self.args = list(args)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0{url_query()}"

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
            except redis.AuthenticationError:  # --requirepass: it is up
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
    """AOF with fsync always: a stop and start keeps every acknowledged write (an outage, no loss)."""

    persistence = ("--save", "", "--appendonly", "yes", "--appendfsync", "always")


def queue_members(client: redis.Redis, keys: QueueKeys) -> dict[str, list[str]]:
    """The ids in each state as stored: todos (grouped ones too) and in_progress in line order,
    scheduled by due time, the sets sorted."""
    ordered = {"todos": keys.todos, "in_progress": keys.in_progress, "scheduled": keys.scheduled}
    found = {state: [text(i) for i in client.zrange(key, 0, -1)] for state, key in ordered.items()}  # type: ignore[union-attr, arg-type]
    waiting: list[Any] = client.zrange(keys.todos, 0, -1, withscores=True)  # type: ignore[assignment]
    waiting += client.zrange(keys.grouped, 0, -1, withscores=True)  # type: ignore[arg-type]
    found["todos"] = [text(i) for i, _ in sorted(waiting, key=lambda member: member[1])]
    for state, key in (("done", keys.done), ("failed", keys.failed), ("cancelled", keys.cancelled)):
        found[state] = sorted(text(i) for i in client.smembers(key))  # type: ignore[union-attr]
    return found
