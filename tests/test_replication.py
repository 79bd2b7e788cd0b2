"""WAIT_REPLICAS with a real replica: a reported write is on the replica when the call returns; an
unconfirmed one raises NotReplicated, and resending it (same request id) applies it once."""

from __future__ import annotations

import io
import os
import signal
import uuid
from collections.abc import Iterator

import pytest
import redis

from setqueue import Queue
from setqueue.keys import QueueKeys
from setqueue.replication import NotReplicated
from setqueue.runtime.cli import main as cli_main
from tests.support import RedisServer
from tests.support.waits import wait_until


class Primary:
    """A master and one replica, both redis-server processes."""

    def __init__(self) -> None:
        self.master = RedisServer().start()
        self.replica = RedisServer(args=["--replicaof", "127.0.0.1", str(self.master.port)]).start()
        self.replica_client = redis.Redis.from_url(self.replica.url, decode_responses=True)
        client = self.replica_client
        wait_until(lambda: client.info("replication").get("master_link_status") == "up", 30, "the replica's link")

    def pause_replica(self) -> None:
        assert self.replica.process is not None
        os.kill(self.replica.process.pid, signal.SIGSTOP)

    def resume_replica(self) -> None:
        assert self.replica.process is not None
        os.kill(self.replica.process.pid, signal.SIGCONT)

    def cleanup(self) -> None:
        self.resume_replica()
        self.replica_client.close()
        self.replica.cleanup()
        self.master.cleanup()


@pytest.fixture(scope="module")
def primary() -> Iterator[Primary]:
    pair = Primary()
    yield pair
    pair.cleanup()


@pytest.fixture
def name() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


def test_every_write_a_call_reports_is_on_the_replica_when_it_returns(primary: Primary, name: str) -> None:
    queue = Queue.from_url(primary.master.url, name, wait_replicas=1)
    keys = QueueKeys(name)
    on_replica = primary.replica_client
    for round_ in range(50):
        ids = [f"{round_}-{i}" for i in range(20)]
        assert queue.enqueue(ids) == 20
        assert on_replica.zcard(keys.todos) == 20  # read at once: no waiting for replication
        leases = queue.claim(20)
        assert {lease.id for lease in leases} == set(ids)
        assert on_replica.zcard(keys.in_progress) == 20 and on_replica.zcard(keys.todos) == 0
        assert all(r.acked for r in queue.ack_many(leases))
        assert on_replica.zcard(keys.in_progress) == 0
        assert on_replica.smismember(keys.done, ids) == [1] * 20
    queue.close()


def test_a_write_no_replica_confirmed_raises_and_its_resend_applies_once(primary: Primary, name: str) -> None:
    queue = Queue.from_url(primary.master.url, name, wait_replicas=1, wait_timeout_seconds=0.2)
    plain = Queue.from_url(primary.master.url, name)
    queue.enqueue(["a", "b", "c"])
    primary.pause_replica()
    try:
        with pytest.raises(NotReplicated, match="0 of 1 replica"):
            queue.enqueue(["d"])
        assert plain.stats()["todos"] == 4  # applied on the master, only not confirmed
        with pytest.raises(NotReplicated):
            queue.claim(2, request_id="claim-1")
        assert plain.stats()["in_progress"] == 2
    finally:
        primary.resume_replica()
    assert queue.enqueue(["d"]) == 0  # sent again: nothing new
    leases = queue.claim(2, request_id="claim-1")  # sent again: the same claim, not a second one
    assert [lease.id for lease in leases] == ["a", "b"]
    assert plain.stats()["in_progress"] == 2 and plain.stats()["todos"] == 2
    with pytest.raises(NotReplicated, match="1 of 2 replica"):
        Queue.from_url(primary.master.url, name, wait_replicas=2, wait_timeout_seconds=0.05).enqueue(["e"])
    queue.close()
    plain.close()


def test_reads_do_not_wait(primary: Primary, name: str) -> None:
    queue = Queue.from_url(primary.master.url, name, wait_replicas=1, wait_timeout_seconds=0.05)
    primary.pause_replica()
    try:
        assert queue.stats()["todos"] == 0
        assert queue.inspect("nothing") is None
    finally:
        primary.resume_replica()
    queue.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [("wait_replicas", -1), ("wait_replicas", 1.5), ("wait_replicas", True), ("wait_timeout_seconds", 0)],
)
def test_bad_wait_options_are_refused(redis_url: str, option: str, value: object) -> None:
    with pytest.raises(ValueError, match=option):
        Queue.from_url(redis_url, "x", **{option: value})  # type: ignore[arg-type]


def test_the_cli_waits_for_replicas_when_asked(
    primary: Primary, name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def push(*options: str) -> int:
        return cli_main(
            ["--redis-url", primary.master.url, "--queue", name, *options, "push", "a", "b"], out=io.StringIO()
        )

    assert push("--wait-replicas", "1") == 0
    assert primary.replica_client.zcard(QueueKeys(name).todos) == 2
    monkeypatch.setenv("WAIT_TIMEOUT_SECONDS", "0.1")
    monkeypatch.setenv("WAIT_REPLICAS", "2")  # one replica only: never confirmed by two
    capsys.readouterr()
    assert push() == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("setqueue: enqueue: 1 of 2 replica(s) confirmed the write within 100 ms")
    assert push("--wait-replicas", "-1") == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("setqueue: invalid --wait-replicas / WAIT_REPLICAS: ")
