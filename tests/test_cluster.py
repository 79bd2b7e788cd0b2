"""A queue lives in one Redis Cluster slot (hash tag {Q}) and every script gets its keys in KEYS,
so the whole API runs on a real Redis Cluster node through redis-py's cluster client."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster

from setqueue import FailOutcome, Queue
from tests.support import RedisServer, free_port

LUA_DIR = Path(__file__).resolve().parent.parent / "shared" / "setqueue" / "lua"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    port = free_port()
    while port > 55535:  # redis-server refuses cluster mode above it (the bus used to be port + 10000)
        port = free_port()
    server = RedisServer(port, ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]).start()
    plain = redis.Redis(port=server.port, decode_responses=True)
    try:
        deadline = time.monotonic() + 10
        plain.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)  # type: ignore[no-untyped-call]
        while plain.cluster("info")["cluster_state"] != "ok":
            assert time.monotonic() < deadline, "the one-node cluster did not come up"
            time.sleep(0.1)
        client = RedisCluster(host="127.0.0.1", port=server.port, decode_responses=True)
        yield client
        client.close()
    finally:
        plain.close()
        server.cleanup()


def test_the_whole_api_runs_on_redis_cluster(cluster: RedisCluster) -> None:
    q = Queue(cluster, "on-cluster", lease_seconds=0.2, max_attempts=2)  # type: ignore[arg-type]
    assert q.enqueue({"a": "pa", "b": "pb", "c": "pc"}) == 3
    leases = {lease.id: lease for lease in q.claim(3)}
    assert q.renew(leases["a"])
    assert q.ack(leases["a"])
    assert q.fail(leases["b"], "boom", retry=False) is FailOutcome.DEAD
    time.sleep(0.3)
    assert q.sweep().requeued == ["c"]
    assert q.requeue_failed() == 1
    assert q.stats()["todos"] == 2
    info = q.inspect("b")
    assert info is not None and info.state == "todos"
    assert q.delete("b") == "todos"
    assert q.wait_for_work(0.05)
    slots = {cluster.keyslot(key) for key in cluster.scan_iter(match=q.keys.prefix + "*")}  # type: ignore[no-untyped-call]
    assert len(slots) == 1  # one queue, one slot


def test_scripts_touch_only_keys_passed_in_keys() -> None:
    """Every redis.call names its key as KEYS[...], as a local bound to a KEYS entry, or as
    unpack() of a table filled only with KEYS entries; every script's header documents KEYS and ARGV."""
    key_commands = (
        "GET|SET|DEL|EXISTS|PEXPIRE|DECRBY|SADD|SREM|SPOP|SMOVE|SISMEMBER|SMISMEMBER|SCARD|HGET|HMGET|HSET|HDEL|HINCRBY"
        "|ZADD|ZREM|ZSCORE|ZMSCORE|ZCARD|ZRANGE|ZPOPMIN|LPUSH|LTRIM"
    )
    for script in sorted(LUA_DIR.glob("*.lua")):
        text = script.read_text()
        header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
        assert "KEYS[" in header and "Returns" in header, script.name
        locals_from_keys = set(re.findall(r"local (\w+) = KEYS\[", text))
        for command, first_arg in re.findall(rf"redis\.call\('({key_commands})', ([^,)]+)", text):
            if first_arg.startswith("unpack("):
                table = first_arg.removeprefix("unpack(")
                stored = re.findall(rf"\b{table}\[[^\]]+\] = ([^\n]+)", text)
                assert stored and all(value.startswith("KEYS[") for value in stored), (
                    f"{script.name}: {command} {first_arg}: {table} holds {stored}"
                )
                continue
            assert first_arg.startswith("KEYS[") or first_arg in locals_from_keys, (
                f"{script.name}: {command} {first_arg}"
            )
