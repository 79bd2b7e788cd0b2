"""A queue lives in one Redis Cluster slot (hash tag {Q}) and every script gets its keys in KEYS,
so the whole API runs on a real Redis Cluster node through redis-py's cluster client."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from setqueue import FailOutcome, Queue
from setqueue.scripts import CONTRACTS, NAMES, SOURCES
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
    # The fifth state: a delayed job, a delayed retry, a due job promoted by a claim.
    assert q.enqueue(["later"], delay=0.2) == 1 and q.stats()["scheduled"] == 1
    q.delete("c")
    q.enqueue(["r"])
    [retry] = q.claim(5)
    assert q.fail(retry, "again", delay=3600) is FailOutcome.RETRIED
    time.sleep(0.3)
    assert [lease.id for lease in q.claim(5)] == ["later"]
    assert q.delete("r") == "scheduled"
    slots = {cluster.keyslot(key) for key in cluster.scan_iter(match=q.keys.prefix + "*")}  # type: ignore[no-untyped-call]
    assert len(slots) == 1  # one queue, one slot


KEY_COMMANDS = (
    "GET|SET|DEL|EXISTS|PEXPIRE|DECRBY|SADD|SREM|SPOP|SMOVE|SISMEMBER|SMISMEMBER|SCARD|HGET|HMGET|HSET|HDEL|HINCRBY"
    "|ZADD|ZREM|ZSCORE|ZMSCORE|ZCARD|ZRANGE|ZPOPMIN|LPUSH|LTRIM"
)
FUNCTION = re.compile(r"^local function (\w+)\(([^)]*)\)\n(.*?)^end$", re.M | re.S)


def _arguments(text: str, start: int) -> list[str]:
    """The top-level, comma-separated arguments of the call whose "(" is at text[start]."""
    depth, current, arguments = 0, "", list[str]()
    for char in text[start:]:
        if char in "([{":
            depth += 1
            if depth == 1:
                continue
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                return [*arguments, current.strip()] if current.strip() or arguments else arguments
        elif char == "," and depth == 1:
            arguments.append(current.strip())
            current = ""
            continue
        current += char
    raise AssertionError(f"unbalanced call at {text[start : start + 40]!r}")


def _calls(text: str, function: str) -> list[list[str]]:
    return [_arguments(text, m.end() - 1) for m in re.finditer(rf"(?<![\w.]){re.escape(function)}\(", text)]


class _KeyUses:
    """Follows the keys through one resolved script: the header's KEYS locals, tables filled with
    keys, and the parameters of included helpers that are used as keys."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.key_params: dict[str, set[int]] = {}  # helper -> positions of parameters it uses as keys
        self.returns_keys: dict[str, set[int]] = {}  # helper -> positions of returned tables of keys

    def key_tables(self, body: str, keys: set[str]) -> set[str]:
        """Tables in body filled only with keys: by a constructor, by stores, or by a helper."""
        tables = {
            t
            for t, items in re.findall(r"local (\w+) = \{([^}]*)\}", body)
            if all(i.strip() in keys for i in items.split(","))
        }
        for table in set(re.findall(r"\b(\w+)\[[^\]]+\] = ", body)):
            stored = re.findall(rf"\b{table}\[[^\]]+\] = ([^\n]+)", body)
            if all(v.startswith("KEYS[") or v.strip() in keys for v in stored):
                tables.add(table)
        for names, helper in re.findall(r"local ([\w, ]+) = (\w+)\(", body):
            for position in self.returns_keys.get(helper, set()):
                tables.add(names.split(",")[position].strip())
        return tables

    @staticmethod
    def is_key(expression: str, keys: set[str], tables: set[str]) -> bool:
        table = re.fullmatch(r"(\w+)\[[^\]]+\]", expression)
        return expression.startswith("KEYS[") or expression in keys or (table is not None and table[1] in tables)

    def check(self, body: str, keys: set[str], where: str) -> set[str]:
        """Asserts every key use in body; returns the expressions it uses as keys."""
        tables = self.key_tables(body, keys)
        used = set()
        for arguments in _calls(body, "redis.call"):
            command = arguments[0].strip("'")
            if not re.fullmatch(KEY_COMMANDS, command):
                continue
            key = arguments[1]
            if key.startswith("unpack("):
                assert key.removeprefix("unpack(").removesuffix(")") in tables, f"{where}: {command} {key}"
            else:
                assert self.is_key(key, keys, tables), f"{where}: {command} {key}"
            used.add(key)
        for helper, positions in self.key_params.items():
            for arguments in _calls(body, helper):
                for position in positions:
                    assert self.is_key(arguments[position], keys, tables), f"{where}: {helper}({arguments})"
                    used.add(arguments[position])
        return used

    def helper(self, helper: str, params: list[str], body: str) -> None:
        used = self.check(body, set(params), f"{self.name}.lua {helper}()")
        self.key_params[helper] = {i for i, p in enumerate(params) if p in used}
        tables = self.key_tables(body, set())
        returned = re.findall(r"^  return (.+)$", body, re.M)[-1:]
        self.returns_keys[helper] = {i for r in returned for i, v in enumerate(r.split(",")) if v.strip() in tables}


def test_scripts_touch_only_keys_passed_in_keys() -> None:
    """Every redis.call names its key as KEYS[...], as a local the header binds to a KEYS entry, as
    an entry of a table filled only with keys (e.g. the claims' locks), or as a parameter of an
    included helper that every caller passes a key in; every script's header documents KEYS and ARGV.
    Checked on each script as Redis runs it: with its includes resolved."""
    for name in NAMES:
        raw = (LUA_DIR / f"{name}.lua").read_text()
        header = "\n".join(line for line in raw.splitlines() if line.startswith("--"))
        assert "KEYS[" in header and "Returns" in header, name
        text = re.sub(r"--.*$", "", SOURCES[name], flags=re.M)  # code only
        key_names = {
            local.strip()
            for names, _ in re.findall(r"^local ([\w, ]+) = ((?:KEYS\[\d+\](?:, )?)+)\s*$", text, re.M)
            for local in names.split(",")
        }
        assert key_names, name
        uses = _KeyUses(name)
        for helper in FUNCTION.finditer(text):  # in order: a helper calls only the ones above it
            uses.helper(helper[1], [p.strip() for p in helper[2].split(",") if p.strip()], helper[3])
        assert uses.check(FUNCTION.sub("", text), key_names, f"{name}.lua"), name


def test_every_wrapper_passes_the_keys_its_script_names(cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each wrapper, run for real on the cluster, passes as many KEYS as its script's header names:
    the fixed ones, plus one lock key per claim where the header declares a FIRST_LOCK tail (T of
    them, T being the first ARGV of the tail). Every key is the queue's, so all in one slot."""
    q = Queue(cluster, "contract", lease_seconds=0.5, max_attempts=1)  # type: ignore[arg-type]
    calls: list[tuple[str, list[str], list[Any]]] = []
    for script in q._scripts.by_name.values():

        def recorder(
            keys: Sequence[str], args: Sequence[Any] = (), *, _name: str = script.name, _call: Any = script.call
        ) -> Any:
            calls.append((_name, list(keys), list(args)))
            return _call(keys, args)

        monkeypatch.setattr(script, "call", recorder)

    assert q.enqueue({"a": "pa", "b": "pb", "c": "pc", "d": "pd"}) == 4
    assert q.enqueue(["e", "f"]) == 2
    first, second = q.claim(3), q.claim(3)
    leases = first + second
    assert len(leases) == 6
    assert all(q.renew_many(leases))
    assert [r.acked for r in q.ack_many([first[0], second[0]])] == [True, True]
    assert q.fail(first[1], "boom") is FailOutcome.DEAD
    assert q.release([second[1]]) == [FailOutcome.RELEASED]
    time.sleep(0.6)  # the locks of both claims expire: first[2] and second[2] are swept
    assert sorted(q.sweep().dead_lettered) == sorted([first[2].id, second[2].id])
    assert q.requeue_failed([first[1].id]) == 1
    (third,) = q.claim(1)
    assert q.delete(third.id) == "in_progress"
    assert q.delete("unknown") is None
    assert q.stats()["failed"] == 2
    tick = [("tick", 60_000, "tick@1970-01-01T00:01:00Z", None)]
    assert q._scripts.periodic(tick, request_ttl_ms=120_000, wake_cap=64) == ([], ["tick"])
    q._scripts.adopt_old_layout()

    assert {name for name, _, _ in calls} == set(NAMES)
    for name, keys, args in calls:
        raw = (LUA_DIR / f"{name}.lua").read_text()
        named = [
            int(i)
            for line in raw.splitlines()
            if line.startswith("local ")
            for i in re.findall(r"\bKEYS\[(\d+)\]", line)
        ]
        assert named == list(range(1, len(named) + 1)), name
        lock_tail = re.search(r"^local \w+ = (\d+) +-- KEYS\[\w+\.\.\]", raw, re.M)
        if lock_tail is None:
            assert len(keys) == len(named), (name, keys)
        else:
            assert int(lock_tail[1]) == len(named) + 1, name
            claims_at = re.search(r"^local \w+ = (\d+) +-- ARGV\[\w+\.\.\]", raw, re.M)
            assert claims_at is not None, name
            t = int(args[int(claims_at[1]) - 1])
            tokens = args[int(claims_at[1]) : int(claims_at[1]) + t]
            assert len(keys) == len(named) + t, (name, keys, args)
            assert keys[len(named) :] == [q.keys.lock(token) for token in tokens], name
        assert all(key.startswith(q.keys.prefix) for key in keys), (name, keys)
    # The claim lists were exercised with more than one claim.
    assert any(
        len(keys) > len(CONTRACTS[name].keys) + 1 for name, keys, _ in calls if name in ("renew", "ack", "sweep")
    )
