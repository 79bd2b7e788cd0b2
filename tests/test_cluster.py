"""A real Redis Cluster (3 masters, 3 replicas): a URL of any node works for the library, the CLI and
the services, which ride out a master's death. A queue lives in one slot; scripts get keys in KEYS."""

from __future__ import annotations

import contextlib
import io
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from setqueue import FailOutcome, JobRef, OptionError, Queue, open_queue
from setqueue.client import ClusterAwareRedis, connect
from setqueue.factory import QueueGroup, ShardedQueue
from setqueue.jobs import Lease, RenewOutcome
from setqueue.keys import QueueKeys
from setqueue.operations import PartlyAcked
from setqueue.runtime.cli import main as cli_main
from setqueue.scripts import CONTRACTS, NAMES, SOURCES
from setqueue.sharded import shard_of
from setqueue.steps import RunScript, Step
from tests.support import free_port
from tests.support.cluster import RedisClusterNodes
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import wait_until, wait_until_due, wait_until_leases_expire

LUA_DIR = Path(__file__).resolve().parent.parent / "shared" / "setqueue" / "lua"


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterNodes]:
    nodes = RedisClusterNodes().start()
    try:
        yield nodes
    finally:
        nodes.cleanup()


def keys_by_master(cluster: RedisClusterNodes, prefix: str) -> dict[int, int]:
    found = {}
    for master in cluster.topology():
        with cluster.client(master) as client:
            found[master] = sum(1 for _ in client.scan_iter(match=prefix + "*"))
    return found


def exercise_the_whole_api(q: Queue, other: Queue) -> None:
    """Every call of the API on ``q``; ``other`` is the same queue through another node."""
    # An idle worker's BLPOP, woken by an enqueue through another node.
    assert not q.wait_for_work(0.05)
    threading.Timer(0.2, lambda: other.enqueue(["wake"])).start()
    started = time.monotonic()
    assert q.wait_for_work(10)
    assert time.monotonic() - started < 5
    assert q.delete("wake") == "todos"
    assert q.enqueue({"a": "pa", "b": "pb", "c": "pc"}) == 3
    assert q.enqueue(["urgent"], priority=5) == 1
    assert q.enqueue(["a"]) == 0  # known
    assert q.stats()["todos_by_priority"] == {5: 1, 0: 3}
    leases = {lease.id: lease for lease in q.claim(4)}
    assert list(leases) == ["urgent", "a", "b", "c"]
    assert (leases["urgent"].priority, leases["a"].payload, leases["a"].attempt) == (5, "pa", 1)
    assert q.renew(leases["a"]) and q.renew_many([leases["b"], leases["c"]]) == [True, True]
    assert q.ack(leases["a"]) and q.ack_many([leases["urgent"]])[0].acked
    assert q.fail(leases["b"], "boom", retry=False) is FailOutcome.DEAD
    wait_until_leases_expire(q, [leases["c"]])
    assert q.sweep().requeued == ["c"]
    done, failed = q.inspect("a"), q.inspect("b")  # a MULTI/EXEC pipeline on the queue's node
    assert done is not None and (done.state, done.attempts) == ("done", 1)
    assert isinstance(done.enqueued_at, float) and isinstance(done.finished_at, float)
    assert failed is not None and (failed.state, failed.error, failed.payload) == ("failed", "boom", "pb")
    assert q.requeue_failed() == 1
    stats = q.stats()
    assert (stats["todos"], stats["done"], stats["failed"], stats["in_progress"]) == (2, 2, 0, 0)
    assert q.delete("b") == "todos"
    assert q.inspect("b") is None
    # Scheduled: a delayed job, a delayed retry, a due job promoted by a claim.
    assert q.enqueue(["later"], delay=0.2) == 1 and q.stats()["scheduled"] == 1
    assert q.delete("c") == "todos"
    q.enqueue(["r"])
    [retry] = q.claim(5)
    assert q.fail(retry, "again", delay=3600) is FailOutcome.RETRIED
    wait_until_due(q, ["later"])
    assert [lease.id for lease in q.claim(5)] == ["later"]
    assert q.delete("r") == "scheduled"
    assert q.release(q.claim(1)) == []


def test_the_whole_api_through_any_node_with_queues_on_every_master(cluster: RedisClusterNodes) -> None:
    """Queue.from_url of a node finds the cluster; each queue runs on its slot's master, reached
    through another master's replica."""
    by_master = cluster.queues_on_each_master("api")
    topology = cluster.topology()
    assert len(by_master) == 3
    for master, name in by_master.items():
        entry = next(r for m, replicas in topology.items() if m != master for r in replicas)  # another's replica
        other_entry = next(m for m in topology if m != master)
        q = Queue.from_url(cluster.url(entry), name, lease_seconds=0.2, max_attempts=2, retry_backoff_seconds=0)
        with contextlib.closing(q), contextlib.closing(Queue.from_url(cluster.url(other_entry), name)) as other:
            exercise_the_whole_api(q, other)
            assert isinstance(q.redis, ClusterAwareRedis) and q.redis.cluster_client() is not None
            placed = keys_by_master(cluster, q.keys.prefix)
            assert placed[master] > 0 and sum(placed.values()) == placed[master], (name, master, placed)


def test_a_plain_redis_stays_a_plain_client(redis_url: str, queue_name: str) -> None:
    with contextlib.closing(Queue.from_url(redis_url, queue_name)) as q:
        assert q.enqueue(["a"]) == 1
        assert isinstance(q.redis, ClusterAwareRedis) and q.redis.cluster_client() is None
        assert q.inspect("a") is not None


UNSERVED = "its jobs wait until one does (a typo? setqueue doctor lists the queues with work and no worker)"


def test_the_cli_through_a_node_that_does_not_hold_the_queue(
    cluster: RedisClusterNodes, capsys: pytest.CaptureFixture[str]
) -> None:
    by_master = cluster.queues_on_each_master("cli")
    entry = cluster.ports[0]
    name = next(n for m, n in by_master.items() if m != entry)

    def cli(*argv: str) -> tuple[int, str, str]:
        out = io.StringIO()
        code = cli_main(["--redis-url", cluster.url(entry), "--queue", name, *argv], stdin=io.StringIO(), out=out)
        return code, out.getvalue(), capsys.readouterr().err

    no_worker = f"setqueue: warning: no live worker serves queue {name!r}: {UNSERVED}\n"
    assert cli("push", "a", "b", "--priority", "3") == (0, "2 new, 0 already known\n", no_worker)
    assert cli("push", "c", "--payload", '{"n": 1}') == (0, "1 new, 0 already known\n", no_worker)
    code, out, err = cli("stats", "--json")
    stats = json.loads(out)
    assert (code, err, stats["todos"], stats["todos_by_priority"]) == (0, "", 3, {"3": 2, "0": 1})
    code, out, _ = cli("inspect", "c")
    assert code == 0 and json.loads(out)["payload"] == '{"n": 1}'
    assert cli("delete", "a") == (0, "deleted a (was in todos)\n", "")
    assert cli("stats")[0] == 0


def test_a_cluster_url_with_a_database_is_one_line_exit_2_and_writes_nothing(
    cluster: RedisClusterNodes, capsys: pytest.CaptureFixture[str], procs: list[Proc], tmp_path: Path
) -> None:
    """A cluster has only database 0 (which URL names a cluster node only Redis can tell)."""
    url = cluster.url().removesuffix("/0") + "/3"
    name = "with-a-db"
    assert cli_main(["--redis-url", url, "--queue", name, "push", "x"], out=io.StringIO()) == 2
    assert cli_main(["--redis-url", url, "--queue", name, "delete", "x"], out=io.StringIO()) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.startswith("setqueue: invalid --redis-url / REDIS_URL: ") for line in lines)
    assert "only database 0" in lines[0]
    q = Queue.from_url(url, name)
    with pytest.raises(OptionError, match=r"url: .*only database 0"):
        q.enqueue(["x"])
    with pytest.raises(OptionError, match="url: "):  # every call, not only the first
        q.stats()
    q.close()
    for service in ("creator", "worker", "cleaner"):
        run = Proc.start(service, tmp_path, REDIS_URL=url, QUEUE_NAME=name, METRICS_PORT=0, CREATE_TOTAL=5)
        procs.append(run)
        assert run.wait(60) == 2, (service, run.log())
        [line] = run.log().splitlines()
        assert line.startswith(f"setqueue-{service}: invalid setting REDIS_URL: ") and "only database 0" in line
    assert sum(keys_by_master(cluster, f"setqueue:{{{name}}}:").values()) == 0


def test_an_unreachable_node_is_one_line_and_exit_3(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert cli_main(["--redis-url", url, "stats"], out=io.StringIO()) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"setqueue: cannot reach Redis at {url}")


def service_settings(url: str, name: str, log: Path, **extra: Any) -> dict[str, Any]:
    return {
        "REDIS_URL": url,
        "QUEUE_NAME": name,
        "JOB_HANDLER": "tests.support.jobs:handle",
        "EXEC_LOG": str(log),
        "RETRY_BACKOFF_SECONDS": 0,
        **extra,
    }


def members(q: Queue, state: str) -> set[str]:
    return set(q.redis.smembers(getattr(q.keys, state)))  # type: ignore[arg-type]


def start_services(
    procs: list[Proc],
    tmp_path: Path,
    settings: dict[str, Any],
    sweep: float,
    worker: dict[str, Any] | None = None,
    **creator: Any,
) -> Proc:
    """A cleaner, two workers and a creator; returns the creator."""
    procs.append(Proc.start("cleaner", tmp_path, SWEEP_INTERVAL=sweep, **settings))
    for n in range(2):
        procs.append(Proc.start("worker", tmp_path, name=f"worker-{n}", CONCURRENCY=4, **(worker or {}), **settings))
    procs.append(Proc.start("creator", tmp_path, **creator, **settings))
    return procs[-1]


@pytest.mark.slow
def test_the_services_drain_a_queue_through_a_replica_each_job_once(
    cluster: RedisClusterNodes, procs: list[Proc], tmp_path: Path
) -> None:
    total = 300
    topology = cluster.topology()
    master, name = next(iter(cluster.queues_on_each_master("svc").items()))
    entry = next(r for m, replicas in topology.items() if m != master for r in replicas)
    settings = service_settings(cluster.url(entry), name, tmp_path / "exec.log", LEASE_SECONDS=5)
    q = Queue.from_url(cluster.url(entry), name)
    try:
        creator = start_services(
            procs, tmp_path, settings, 0.5, CREATE_TOTAL=total, CREATE_RATE=0, CREATE_ID_PREFIX="job"
        )
        wait_until(lambda: q.stats()["done"] == total, 60, f"{total} jobs done")
        assert creator.wait(30) == 0
        assert members(q, "done") == {f"job-{n}" for n in range(1, total + 1)}
        runs = ExecutionLog(tmp_path / "exec.log").starts()
        assert set(runs) == members(q, "done") and set(runs.values()) == {1}
        assert all(p.alive() for p in procs if p is not creator)
    finally:
        q.close()


@pytest.mark.slow
@pytest.mark.parametrize("wait_replicas", [0, 1], ids=["no-wait", "wait-1"])
@pytest.mark.parametrize("cut", [False, True], ids=["kill", "cut-then-kill"])
def test_a_killed_master_fails_over_and_the_services_drain_everything(
    procs: list[Proc], tmp_path: Path, record_property: Any, wait_replicas: int, cut: bool
) -> None:
    """SIGKILL the queue's master mid-run: its replica is promoted, the services back off through the
    failover and drain the queue; what it costs is measured. Replication is asynchronous: writes the
    replica never got are gone (an enqueue: a job lost; a claim or ack: a job run twice). ``kill``
    loses at most the last instant, ``cut-then-kill`` 1.5 s of a replica cut off. With
    ``WAIT_REPLICAS=1`` nothing is lost or run twice either way; writes wait until the killed node
    is back as the new master's replica."""
    total, prefix = 600, "sleep-0.01"
    cluster = RedisClusterNodes(node_timeout_ms=1000).start()  # a failover in about 2.5 s
    q: Queue | None = None
    try:
        by_master = cluster.queues_on_each_master("failover")
        entry = cluster.ports[0]
        master, name = next((m, n) for m, n in by_master.items() if m != entry)
        [replica] = cluster.topology()[master]
        slot = cluster.queue_slot(name)
        log = tmp_path / "exec.log"
        # Leases outlast the failover, or jobs would run again for that reason alone.
        settings = service_settings(
            cluster.url(entry), name, log, LEASE_SECONDS=10, WAIT_REPLICAS=wait_replicas, WAIT_TIMEOUT_SECONDS=0.5
        )
        q = Queue.from_url(cluster.url(entry), name)
        creator = start_services(
            procs, tmp_path, settings, 0.2, CREATE_TOTAL=total, CREATE_RATE=150, CREATE_ID_PREFIX=prefix
        )
        wait_until(lambda: q.stats()["done"] >= total // 4, 60, "a quarter of the jobs done")
        done_before = q.stats()["done"]
        # The cut lasts until the failover: the dead master's kernel would resend what it had sent.
        with cluster.replication_cut(master) if cut else contextlib.nullcontext():
            if cut:
                time.sleep(1.5)  # writes go on that the replica never gets
            cluster.kill(master)
            killed_at = time.monotonic()
            assert cluster.wait_failover(master, slot) == replica
            failover_seconds = time.monotonic() - killed_at
        # Back as the new master's replica; until then WAIT_REPLICAS=1 makes every write wait.
        cluster.restart(master)
        assert creator.wait(90) == 0

        def drained() -> bool:
            stats = q.stats()
            return bool(stats["todos"] == stats["in_progress"] == stats["scheduled"] == 0)

        wait_until(drained, 90, "the queue drained after the failover")
        workers_and_cleaner = [p for p in procs if p is not creator]
        assert all(p.alive() for p in workers_and_cleaner), [p.log() for p in workers_and_cleaner]
        created = {f"{prefix}-{n}" for n in range(1, total + 1)}
        done, failed = members(q, "done"), members(q, "failed")
        runs = ExecutionLog(log).starts()
        lost = created - done - failed
        twice = sorted(job for job, count in runs.items() if count > 1)
        figures = {
            "wait_replicas": wait_replicas,
            "cut": cut,
            "done_before_kill": done_before,
            "failover_seconds": round(failover_seconds, 2),
            "done": len(done),
            "failed": len(failed),
            "lost": len(lost),
            "run_twice": len(twice),
            "never_run_but_done": len(done - set(runs)),
        }
        record_property("failover", figures)
        print(f"\nfailover of {master} -> {replica}: {figures}")
        assert done | failed <= created and not failed
        assert "redis unavailable" in "".join(p.log() for p in workers_and_cleaner)
        if wait_replicas:
            assert not lost and not twice and done <= set(runs), figures
        elif cut:
            assert len(lost) >= 50, figures  # the fault is real: 1.5 s of enqueues at 150/s gone
        else:
            assert len(lost) <= 8, figures  # at most the one enqueue call (150/s: 8 ids) in flight
            assert len(twice) <= 2 * (4 + 10), figures  # at most what two workers held (CONCURRENCY + CLAIM_BATCH)
    finally:
        if q is not None:
            q.close()
        for p in procs:  # before the cluster goes
            p.stop()
        cluster.cleanup()


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
    """Follows keys through a resolved script: KEYS locals, tables of keys, helpers' key parameters."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.key_params: dict[str, set[int]] = {}  # helper -> positions of parameters it uses as keys
        self.returns_keys: dict[str, set[int]] = {}  # helper -> positions of returned tables of keys

    def key_tables(self, body: str, keys: set[str]) -> set[str]:
        """Tables filled only with keys: by a constructor ({a, b} or {n = a}), by stores, or by a helper."""
        tables = {
            t
            for t, items in re.findall(r"local (\w+) = \{([^}]*)\}", body)
            if all(i.split("=")[-1].strip() in keys for i in items.split(",") if i.strip())
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
        table = re.fullmatch(r"(\w+)\[[^\]]+\]", expression) or re.fullmatch(r"(\w+)\.\w+", expression)
        return (
            expression.startswith("KEYS[")
            or expression in keys
            or (table is not None and (table[1] in tables or table[1] in keys))
        )

    def check(self, body: str, keys: set[str], where: str) -> set[str]:
        """Asserts every key use in body; returns the expressions used as keys."""
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

    def helper(self, helper: str, params: list[str], body: str, header_keys: set[str]) -> None:
        """A function's keys: its parameters, or the header's locals it sees (defined below them)."""
        used = self.check(body, set(params) | (header_keys - set(params)), f"{self.name}.lua {helper}()")
        self.key_params[helper] = {i for i, p in enumerate(params) if p in used}
        tables = self.key_tables(body, set())
        returned = re.findall(r"^  return (.+)$", body, re.M)[-1:]
        self.returns_keys[helper] = {i for r in returned for i, v in enumerate(r.split(",")) if v.strip() in tables}


def test_scripts_touch_only_keys_passed_in_keys() -> None:
    """Every redis.call's key is KEYS[...], a local bound to one, an entry of a table of keys, or a
    helper's parameter every caller passes a key in; headers document KEYS. Includes resolved."""
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
            uses.helper(helper[1], [p.strip() for p in helper[2].split(",") if p.strip()], helper[3], key_names)
        assert uses.check(FUNCTION.sub("", text), key_names, f"{name}.lua"), name


@pytest.fixture
def hand_built(cluster: RedisClusterNodes) -> Iterator[RedisCluster]:
    """redis-py's cluster client: Queue takes one as it takes a redis.Redis."""
    client = RedisCluster(host="127.0.0.1", port=cluster.ports[0], decode_responses=True)
    yield client
    client.close()


def test_every_wrapper_passes_the_keys_its_script_names(
    hand_built: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each wrapper, run on the cluster, passes the KEYS its header names, plus a lock key per claim
    where it declares a FIRST_LOCK tail (T, the tail's first ARGV); all the queue's, in one slot."""
    q = Queue(hand_built, "contract", lease_seconds=0.5, max_attempts=1)
    calls: list[tuple[str, list[str], list[Any]]] = []
    send = q.executor.do

    def recorder(step: Step) -> Any:
        if isinstance(step, RunScript):
            calls.append((step.name, list(step.keys), list(step.args)))
        return send(step)

    monkeypatch.setattr(q.executor, "do", recorder)

    assert q.enqueue({"a": "pa", "b": "pb", "c": "pc", "d": "pd"}) == 4
    assert q.enqueue(["e", "f", "g"]) == 3
    first, second = q.claim(3), q.claim(3)
    leases = first + second
    assert len(leases) == 6
    assert all(q.renew_many(leases))
    assert [r.acked for r in q.ack_many([first[0], second[0]])] == [True, True]
    assert q.fail(first[1], "boom") is FailOutcome.DEAD
    assert q.release([second[1]]) == [FailOutcome.RELEASED]
    wait_until_leases_expire(q, leases)  # first[2] and second[2] are swept
    assert sorted(q.sweep().dead_lettered) == sorted([first[2].id, second[2].id])
    assert q.requeue_failed([first[1].id]) == 1
    (third,) = q.claim(1)
    assert q.delete(third.id) == "in_progress"
    assert q.delete("unknown") is None
    assert q.stats()["failed"] == 2
    tick = [("tick", 60_000, "tick@1970-01-01T00:01:00Z", None)]
    assert q.create_periodic_runs(tick) == ([], ["tick"])
    [fourth] = q.claim(1)
    assert fourth.progress(0.5, "half") and q.cancel(fourth.id) == "in_progress"
    assert q.renew_outcomes([fourth]) == [RenewOutcome.CANCELLED]
    assert q.pause() and q.resume()
    q.set_group_limits(concurrency=1)
    assert q.enqueue(["h"], group="g") == 1
    assert [group.name for group in q.groups()] == ["g"]
    other = Queue(hand_built, "contract-other")  # dependencies: in the queue and across queues
    other.enqueue(["far-parent"])
    q.enqueue(["parent"])
    q.enqueue(["child"], depends_on=["parent", JobRef("contract-other", "far-parent")])  # registers there
    other.enqueue(["far"], depends_on=[JobRef("contract", "parent")])
    assert q.cancel("parent") == "todos" and q.inspect("child").state == "failed"  # type: ignore[union-attr]
    assert other.inspect("far").state == "failed"  # type: ignore[union-attr]
    q.enqueue(["step-1"])
    q.enqueue(["step-2"], depends_on=["step-1"])  # its release recorded by the ack, moved by inspect
    assert q.ack_many([lease for lease in q.claim(10) if lease.id == "step-1"])[0].acked
    assert q.inspect("step-2").state == "todos"  # type: ignore[union-attr]

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
        prefix = keys[0][: keys[0].index("}:") + 2]  # one queue's keys: q's, or another's it links to
        assert prefix in (q.keys.prefix, other.keys.prefix), (name, keys)
        assert all(key.startswith(prefix) for key in keys), (name, keys)
    assert any(  # the claim lists held more than one claim
        len(keys) > len(CONTRACTS[name].keys) + 1 for name, keys, _ in calls if name in ("renew", "ack", "sweep")
    )


# -- one queue over the cluster's masters: shards


def test_a_sharded_queue_spreads_over_every_master(cluster: RedisClusterNodes) -> None:
    name = cluster.evenly_sharded_name("spread", 6)
    q = open_queue(cluster.url(), name, shards=6, max_attempts=2, retry_backoff_seconds=0)
    assert isinstance(q, ShardedQueue)
    ids = [f"job-{n}" for n in range(600)]
    assert q.enqueue(ids) == 600 and q.enqueue(ids[:10]) == 0
    held = keys_by_master(cluster, f"setqueue:{{{name}~")
    assert len(held) == 3 and all(n > 0 for n in held.values()), held  # every master holds two shards
    per_master = {master: 0 for master in held}
    for master, stats in zip(cluster.shard_masters(name, 6), q.stats()["shards"], strict=True):
        per_master[master] += stats["todos"]
    assert all(150 <= n <= 250 for n in per_master.values()), per_master  # a fair share of 600 each
    leases = q.claim(50)
    assert len(leases) == 50 and {lease.queue for lease in leases} == {name}
    assert all(q.renew_many(leases))
    assert all(r.acked for r in q.ack_many(leases[:40]))
    assert q.fail(leases[40], "boom", retry=False) is FailOutcome.DEAD
    assert q.release(leases[41:]) == [FailOutcome.RELEASED] * 9
    info = q.inspect(leases[40].id)
    assert info is not None and info.state == "failed"
    assert q.requeue_failed() == 1 and q.delete(leases[0].id) == "done"
    assert q.sweep().total == 0
    stats = q.stats()
    assert (stats["todos"], stats["done"], stats["failed"]) == (560, 39, 0)
    q.close()


def test_an_idle_worker_of_a_sharded_queue_wakes_on_a_cluster(cluster: RedisClusterNodes) -> None:
    name = cluster.evenly_sharded_name("wake", 3)
    idle = open_queue(cluster.url(), name, shards=3)
    producer = open_queue(cluster.url(), name, shards=3)
    assert isinstance(idle, ShardedQueue) and isinstance(producer, ShardedQueue)
    for shard in range(3):  # a wake-up from every shard's master
        job_id = next(f"w{n}" for n in range(1000) if shard_of(f"w{n}", 3) == shard)
        threading.Timer(0.2, lambda j=job_id: producer.enqueue([j])).start()
        started = time.monotonic()
        assert idle.wait_for_work(10)
        assert time.monotonic() - started < 2
        assert [lease.id for lease in idle.claim(5)] == [job_id]
    assert idle.wake_keys() == [QueueKeys(name).wake]  # one BLPOP, not a poll of the shards' lists
    # Jobs claimable again wake it too: released, retried, requeued by a sweep.
    producer.enqueue(["again"])
    assert idle.wait_for_work(10)
    [lease] = producer.claim(1)
    threading.Timer(0.2, lambda: producer.release([lease])).start()
    assert idle.wait_for_work(10)
    [lease] = producer.claim(1)
    threading.Timer(0.2, lambda: producer.fail(lease, "try again", delay=0)).start()
    assert idle.wait_for_work(10)
    short = open_queue(cluster.url(), name, shards=3, lease_seconds=0.2)
    [lease] = short.claim(1)
    wait_until_leases_expire(short, [lease])
    threading.Timer(0.2, short.sweep).start()
    assert idle.wait_for_work(10)
    assert [lease.id for lease in idle.claim(5)] == ["again"]
    for q in (idle, producer, short):
        q.close()


def test_an_idle_worker_of_several_queues_wakes_for_each_on_a_cluster(cluster: RedisClusterNodes) -> None:
    """Their wake lists are on different masters: one BLPOP each, at once."""
    names = list(cluster.queues_on_each_master("group-wake").values())
    idle = open_queue(cluster.url(), names)
    producers = [Queue.from_url(cluster.url(cluster.ports[-1]), name) for name in names]
    assert isinstance(idle, QueueGroup) and len(set(idle.wake_keys())) == 3
    assert not idle.wait_for_work(0.3)
    for producer in producers * 2:
        threading.Timer(0.2, lambda p=producer: p.enqueue([f"job-{p.name}-{time.monotonic()}"])).start()
        assert idle.wait_for_work(10)
        [lease] = idle.claim(5)
        assert lease.queue == producer.name
    idle.close()
    for producer in producers:
        producer.close()


@pytest.mark.slow
def test_the_services_drain_a_six_shard_queue_each_job_once(
    cluster: RedisClusterNodes, procs: list[Proc], tmp_path: Path
) -> None:
    total = 20_000
    name = cluster.evenly_sharded_name("drain", 6)
    settings = service_settings(cluster.url(), name, tmp_path / "exec.log", LEASE_SECONDS=10, QUEUE_SHARDS=6)
    q = open_queue(cluster.url(), name, shards=6)
    try:
        creator = start_services(
            procs, tmp_path, settings, 1, {"CLAIM_BATCH": 100}, CREATE_TOTAL=total, CREATE_RATE=0, CREATE_BATCH=500,
            CREATE_ID_PREFIX="j",
        )  # fmt: skip
        wait_until(lambda: q.stats()["done"] == total, 240, f"{total} jobs done")
        assert creator.wait(30) == 0
        runs = ExecutionLog(tmp_path / "exec.log").starts()
        assert len(runs) == total and set(runs.values()) == {1}
        done_per_shard = [s["done"] for s in q.stats()["shards"]]
        assert all(total / 6 * 0.8 <= n <= total / 6 * 1.2 for n in done_per_shard), done_per_shard
        assert all(p.alive() for p in procs if p is not creator)
    finally:
        q.close()


def test_a_sharded_queue_serves_its_other_shards_while_one_node_is_cut_off(cluster: RedisClusterNodes) -> None:
    name = cluster.evenly_sharded_name("cut", 3)
    masters = cluster.shard_masters(name, 3)
    client = connect(cluster.url(masters[1]), socket_timeout=0.5, socket_connect_timeout=0.5)
    q = open_queue(cluster.url(), name, shards=3, client=client, lease_seconds=30)
    ids = [f"job-{n}" for n in range(90)]
    q.enqueue(ids)
    for _ in range(3):  # every script has run on every node before the cut
        warm = q.claim(3)
        q.renew_outcomes(warm)
        q.ack_many(warm)
    cut = {job_id for job_id in ids if masters[shard_of(job_id, 3)] == masters[0]}
    mixed: list[Lease] = []
    while not (any(lease.id in cut for lease in mixed) and any(lease.id not in cut for lease in mixed)):
        mixed += q.claim(3)
    late = [lease for lease in mixed if lease.id in cut]
    with cluster.clients_cut(masters[0]):
        with pytest.raises(PartlyAcked) as partly:  # waits out the timeouts on the cut node once
            q.ack_many(mixed)
        assert [r is None for r in partly.value.results] == [lease.id in cut for lease in mixed]
        assert all(r.acked for r in partly.value.results if r is not None)  # the other shards' acked
        claimed = q.claim(10)  # the cut shard passed over: the others serve at once
        assert claimed and not {lease.id for lease in claimed} & cut
        with pytest.raises(redis.ConnectionError):  # the cut shard's renewals reported, not waited for
            q.renew_outcomes(claimed + late)
        assert all(q.renew_many(claimed))
        assert all(r.acked for r in q.ack_many(claimed))

    def acked_after_heal() -> bool:
        try:
            q.ack_many(late)  # stale if the ack sent into the cut arrived after all (TCP resends it)
        except PartlyAcked:  # still passed over (UNREACHABLE_SKIP_SECONDS)
            return False
        return all(info is not None and info.state == "done" for info in map(q.inspect, [x.id for x in late]))

    wait_until(acked_after_heal, 20, "the cut shard's acks after the heal", 0.2)
    rest = q.claim(90)
    q.ack_many(rest)
    stats = q.stats()
    assert (stats["done"], stats["todos"], stats["in_progress"]) == (90, 0, 0)
    q.close()


def test_a_release_in_a_shard_wakes_the_sharded_queues_workers(cluster: RedisClusterNodes) -> None:
    """On a Cluster a sharded queue's idle workers wait on the queue's own wake list, which no shard's
    script can push to: a dependent released in a shard, by the ack's script or by the library after
    it, wakes them all the same (else its pick-up waits for IDLE_WAIT_SECONDS)."""
    name = cluster.evenly_sharded_name("wakes", 3)
    q = open_queue(cluster.url(), name, shards=3)
    client = RedisCluster.from_url(cluster.url())
    wake = QueueKeys(name).wake
    # Both kinds: a dependent in its dependency's shard (released inside ack.lua), and in another.
    candidates = [(f"first-{n}", f"then-{n}") for n in range(60)]
    same = [pair for pair in candidates if shard_of(pair[0], 3) == shard_of(pair[1], 3)][:3]
    pairs = (
        same + [pair for pair in candidates if pair not in same and shard_of(pair[0], 3) != shard_of(pair[1], 3)][:3]
    )
    assert len(same) == 3 and len(pairs) == 6
    for first, then in pairs:
        q.enqueue([first])
        q.enqueue([then], depends_on=[first])
    held = {}
    while leases := q.claim(10):
        held.update({lease.id: lease for lease in leases})
    assert sorted(held) == sorted(first for first, _ in pairs)
    for first, then in pairs:
        client.delete(wake)
        assert q.ack(held[first])
        assert client.llen(wake) >= 1, (first, then)
        assert q.inspect(then).state == "todos"  # type: ignore[union-attr]
    client.close()
    q.close()


def test_dependencies_across_shards_and_queues_on_a_cluster(cluster: RedisClusterNodes) -> None:
    """A sharded queue's jobs wait for each other across shards (other slots, other masters), and a
    plain queue's job waits for one of them: each released once its dependencies are done."""
    name = cluster.evenly_sharded_name("flows", 3)
    q = open_queue(cluster.url(), name, shards=3)
    plain = open_queue(cluster.url(), f"{name}-after")
    members = [f"member-{n}" for n in range(12)]
    q.enqueue(members)
    assert q.enqueue(["callback"], depends_on=members) == 1
    assert plain.enqueue(["receipt"], depends_on=[JobRef(name, "callback")]) == 1
    assert len({shard_of(m, 3) for m in [*members, "callback"]}) == 3
    assert q.stats()["waiting"] == 1 and plain.stats()["waiting"] == 1
    acked: list[str] = []
    while leases := q.claim(20):
        assert "callback" not in [lease.id for lease in leases] or len(acked) == len(members)
        acked += [lease.id for lease in leases]
        assert all(r.acked for r in q.ack_many(leases))
    assert acked[-1] == "callback" and sorted(acked[:-1]) == sorted(members)
    (receipt,) = plain.claim(1)
    assert receipt.id == "receipt" and [d.outcome for d in receipt.dependencies()] == ["done"]
    q.close()
    plain.close()
