"""Redis under memory pressure (a maxmemory that fills in seconds): each script refused whole or run
when full, a full queue recovering without an operator, and an evicting Redis found and said."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import FailOutcome, JobFailed, Queue, ResultGone, open_queue
from setqueue.runtime.acl import rule
from setqueue.runtime.cli import main as cli_main
from setqueue.runtime.pressure import read_memory
from setqueue.scripts import ACK_KEEPING_RESULTS, NAMES, SOURCES
from tests.support import RedisServer, queue_members
from tests.support.cluster import RedisClusterNodes
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import wait_until, wait_until_leases_expire

# Each script's first line says what it does when Redis is out of memory (docs/guide.md).
# Finish or free work; register and depend complete an enqueue already accepted, arrive and release
# the end of a dependency, forget frees what a forgotten job left.
RUN_WHEN_FULL = {"claim", "renew", "ack", "fail", "sweep", "delete", "cancel", "set_limits"} | {
    "register",
    "depend",
    "arrive",
    "release",
    "forget",
    "drain",
}
REFUSED_WHEN_FULL = {"enqueue", "requeue_failed", "periodic", "progress"}  # add work, or only memory
READ_ONLY = {"stats", "list_groups", "lookup"}


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])  # type: ignore[index]


def fill_up(admin: redis.Redis) -> None:
    admin.config_set("maxmemory", used_memory(admin) // 2)


def full(client: redis.Redis) -> bool:
    info: dict[str, Any] = client.info("memory")  # type: ignore[assignment]
    limit = int(info["maxmemory"])
    return bool(limit) and int(info["used_memory"]) - int(info["mem_not_counted_for_evict"]) > limit


@pytest.fixture
def tight() -> Iterator[RedisServer]:
    """A redis-server of its own (maxmemory is server-wide), noeviction."""
    server = RedisServer(args=["--maxmemory-policy", "noeviction"]).start()
    yield server
    server.cleanup()


@pytest.fixture
def admin(tight: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=tight.port, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def ready(procs: list[Proc], tmp_path: Path) -> Callable[..., Proc]:
    def start(role: str, **settings: Any) -> Proc:
        proc = Proc.start(role, tmp_path, **settings)
        procs.append(proc)
        proc.wait_ready()
        return proc

    return start


Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    def run(url: str, queue: str, *argv: str) -> tuple[int, str, str]:
        out = io.StringIO()
        code = cli_main(["--redis-url", url, "--queue", queue, *argv], stdin=io.StringIO(""), out=out)
        return code, out.getvalue(), capsys.readouterr().err

    return run


def test_every_script_states_what_it_does_when_redis_is_out_of_memory() -> None:
    assert set(NAMES) == RUN_WHEN_FULL | REFUSED_WHEN_FULL | READ_ONLY
    for name in NAMES:
        first = SOURCES[name].splitlines()[0]
        if name in RUN_WHEN_FULL:
            assert first == "#!lua flags=allow-oom", name
        elif name in REFUSED_WHEN_FULL:
            assert first == "#!lua", name
        else:
            assert first == "#!lua flags=no-writes", name
    # An ack keeping results is first sent as an ack.lua refused whole when full.
    assert ACK_KEEPING_RESULTS.splitlines()[0] == "#!lua"
    assert ACK_KEEPING_RESULTS.splitlines()[1:] == SOURCES["ack"].splitlines()[1:]


def test_a_full_redis_refuses_what_adds_work_whole_and_runs_what_finishes_or_frees_it(
    tight: RedisServer, admin: redis.Redis
) -> None:
    q = Queue.from_url(tight.url, "full", max_attempts=2, done_max_age_seconds=0.001)
    short = Queue.from_url(tight.url, "full", lease_seconds=0.3)
    q.enqueue([f"j{n}" for n in range(20)])
    expired = short.claim(1)  # its lease runs out below, for the sweep
    held = q.claim(10)
    rest = q.claim(9)
    q.ack(rest[0])  # in done, older than the retention: the sweep trims it
    assert q.fail(rest[1], "boom", retry=False) is FailOutcome.DEAD
    before = queue_members(admin, q.keys)
    fill_up(admin)
    assert full(admin)

    for refused in (
        lambda: q.enqueue(["new-1", "new-2"]),
        lambda: q.enqueue({f"big-{n}": "x" * 100 for n in range(600)}),  # two script calls: the first is refused
        q.requeue_failed,
        lambda: q.create_periodic_runs([("tick", 60_000, "tick@1970-01-01T00:01:00Z", None)]),
    ):
        with pytest.raises(redis.OutOfMemoryError):
            refused()
    assert queue_members(admin, q.keys) == before, "a refused script wrote something"
    assert not admin.exists(q.keys.periodic)

    # What finishes, hands back or frees work runs: the jobs held get done, the queue drains.
    assert all(q.renew_many(held))
    assert [r.acked for r in q.ack_many(held[:5])] == [True] * 5
    assert q.fail(held[5], "again") is FailOutcome.RETRIED
    assert q.release(held[6:8]) == [FailOutcome.RELEASED] * 2
    assert q.delete(held[8].id) == "in_progress"
    assert q.claim(3)
    wait_until_leases_expire(q, expired)
    swept = q.sweep()
    assert swept.requeued == [expired[0].id] and swept.done_trimmed == 6  # rest[0] and held[:5]
    info = q.inspect(rest[1].id)  # a MULTI is refused when full: inspect reads without one
    assert info is not None and info.state == "failed" and info.error == "boom"
    assert q.stats()["done"] == 0
    assert full(admin)
    q.close()
    short.close()


def test_a_full_redis_acks_without_results_cancels_and_drops_progress_reports(
    tight: RedisServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Full, a job is done without its result (result() says it is gone), cancel works, a progress
    report is dropped, not raised. With room again, results are kept."""
    q = Queue.from_url(tight.url, "life")
    q.enqueue({"a": "pa", "b": "pb", "c": "pc", "d": "pd", "w": "pw"})
    a, b, c, d = q.claim(4)
    fill_up(admin)
    assert full(admin)

    assert a.progress(0.5, "halfway") is True  # dropped, not raised; the lease still owns the job
    assert not admin.exists(q.keys.progress)
    assert q.ack(a, {"total": "x" * 10_000})
    assert "Redis is full (out of memory): 1 jobs done without keeping" in caplog.text
    info = q.inspect("a")
    assert info is not None and (info.state, info.result_kept) == ("done", False)
    with pytest.raises(ResultGone, match="Redis was full"):
        q.result("a", timeout=0)
    assert q.ack(b) and q.result("b", timeout=0) is None  # returned nothing: nothing to drop

    assert q.cancel("c") == "in_progress" and q.cancel("w") == "todos"
    assert c.progress(0.9) is False  # cancelled: the lease no longer owns it
    for job_id in ("c", "w"):
        with pytest.raises(JobFailed, match="cancelled"):
            q.result(job_id, timeout=0)
    assert not admin.hexists(q.keys.payloads, "c") and not admin.hexists(q.keys.payloads, "w")
    assert full(admin)

    admin.config_set("maxmemory", 0)
    assert d.progress(0.5, "halfway") is True
    assert q.ack(d, [1, 2]) and q.result("d", timeout=0) == [1, 2]
    q.close()


def test_a_cancelled_job_leaves_nothing_once_the_retention_drops_it(tight: RedisServer, admin: redis.Redis) -> None:
    q = Queue.from_url(tight.url, "gone", done_max_count=1, retry_backoff_seconds=0)
    q.enqueue({"a": "payload-a", "b": "payload-b"}, max_attempts=3)
    q.fail(q.claim(1)[0], "boom")  # a's error and own options are kept while it waits
    assert (q.cancel("a"), q.cancel("b")) == ("todos", "todos")
    q.enqueue(["c"])
    q.ack(q.claim(1)[0])  # the retention keeps one id: a and b go
    for hash_key in (q.keys.payloads, q.keys.errors, q.keys.options, q.keys.finished, q.keys.history):
        assert set(admin.hkeys(hash_key)) <= {"c"}, hash_key
    assert queue_members(admin, q.keys)["cancelled"] == []
    q.close()


@pytest.mark.slow
def test_a_full_redis_does_not_stall_the_cleaner(
    tight: RedisServer, admin: redis.Redis, ready: Callable[..., Proc]
) -> None:
    """Periodic runs (and the audit) wait for room; the sweeps, which free memory, go on."""
    env = _env(tight)
    Queue.from_url(tight.url, env["QUEUE_NAME"]).enqueue(["a"])
    fill_up(admin)
    cleaner = ready("cleaner", SWEEP_INTERVAL=0.1, SCHEDULES="tick=* * * * *", **env)
    wait_until(lambda: "periodic runs wait until it has room" in cleaner.log(), 30, "the periodic step skipped")
    swept = cleaner.metric("setqueue_last_sweep_timestamp_seconds")
    wait_until(lambda: cleaner.metric("setqueue_last_sweep_timestamp_seconds") > swept, 30, "another sweep")
    assert cleaner.metric("setqueue_redis_memory_used_ratio") > 1
    admin.config_set("maxmemory", 0)
    wait_until(lambda: "periodic job tick seen for the first time" in cleaner.log(), 30, "the schedule registered")
    assert cleaner.metric("setqueue_redis_memory_used_ratio") == 0
    assert "Traceback" not in cleaner.log()


@pytest.mark.slow
def test_a_full_queue_recovers_without_an_operator_and_loses_or_repeats_nothing(
    tight: RedisServer,
    admin: redis.Redis,
    tmp_path: Path,
    ready: Callable[..., Proc],
    cli: Cli,
) -> None:
    """Redis fills up with done ids under a running backlog: enqueues are refused cleanly (CLI exit 3,
    the creator waits), the backlog is done while full, the cleaner's retention frees memory and
    enqueues work again. Counted from the handler's side: every job ran once."""
    name, filler = f"oom-{uuid.uuid4().hex[:6]}", f"fill-{uuid.uuid4().hex[:6]}"
    url = tight.url
    log = ExecutionLog(tmp_path / "exec.log")
    gate = tmp_path / "gate"
    backlog = [f"gate-{n}" for n in range(40)]
    open_queue(url, name).enqueue(backlog)
    common: dict[str, Any] = {"REDIS_URL": url, "LEASE_SECONDS": 5, "EXEC_LOG": log.path, "GATE": gate}
    handler = "tests.support.jobs:handle_async"
    worker = ready("worker", QUEUE_NAME=name, JOB_HANDLER=handler, CONCURRENCY=40, CLAIM_BATCH=40, **common)
    wait_until(lambda: len(log.starts()) == len(backlog), 30, "the backlog to be running")

    # Fill Redis with another queue's done ids, which the cleaner's retention will trim.
    fill = Queue.from_url(url, filler)
    admin.config_set("maxmemory", used_memory(admin) + 3 * 2**20)
    batch = 0
    while True:
        ids = [f"{batch:04d}-{n:03d}-" + "x" * 900 for n in range(400)]
        try:
            fill.enqueue(ids)
        except redis.OutOfMemoryError:
            break
        fill.ack_many(fill.claim(400))
        batch += 1
    assert full(admin)

    code, _, err = cli(url, name, "push", "late-1", "late-2")
    assert code == 3 and "out of memory" in err and len(err.strip().splitlines()) == 1, err
    assert open_queue(url, name).inspect("late-1") is None
    creator = ready("creator", QUEUE_NAME=name, CREATE_ID_PREFIX="made", CREATE_RATE=50, **common)
    wait_until(lambda: creator.metric("setqueue_redis_out_of_memory") == 1, 30, "the creator to be refused")
    assert creator.metric("setqueue_redis_up") == 1  # Redis answers: not an outage
    assert "out of memory" in creator.log()

    gate.touch()  # the backlog finishes while Redis is full: every job is acked
    backlog_queue = open_queue(url, name)
    wait_until(lambda: backlog_queue.stats()["done"] == len(backlog), 30, "the backlog in done")
    assert full(admin)
    assert worker.metric('setqueue_jobs_completed_total{outcome="success"}') == len(backlog)

    cleaner = ready(
        "cleaner",
        QUEUE_NAME=f"{name},{filler}",
        DONE_MAX_AGE_SECONDS=1,
        SWEEP_INTERVAL=0.2,
        SCHEDULES="tick=* * * * *",
        **common,
    )
    wait_until(lambda: not full(admin), 60, "the cleaner's retention to free memory")
    wait_until(lambda: 0 <= cleaner.metric("setqueue_redis_memory_used_ratio") < 1, 30, "the gauge to see room")
    wait_until(lambda: creator.metric("setqueue_jobs_created_total") > 0, 60, "the creator to enqueue again")
    assert creator.metric("setqueue_redis_out_of_memory") == 0
    code, out, err = cli(url, name, "push", "late-1")
    assert (code, out) == (0, "1 new, 0 already known\n"), err

    starts, ends = log.starts(), log.ends()
    assert all(starts[job] == 1 and ends[job] == 1 for job in backlog), (starts, ends)
    assert worker.alive() and cleaner.alive() and creator.alive()
    assert "Traceback" not in worker.log() + cleaner.log() + creator.log()


def test_read_memory_of_one_redis(tight: RedisServer, admin: redis.Redis) -> None:
    client = redis.Redis(port=tight.port)
    report = read_memory(client)
    assert report.noeviction == 1 and report.used_ratio == 0 and not report.full
    admin.config_set("maxmemory-policy", "allkeys-lru")
    report = read_memory(client)
    assert report.noeviction == 0 and "allkeys-lru" in (report.eviction_warning("here") or "")
    admin.config_set("maxmemory-policy", "noeviction")
    fill_up(admin)
    assert read_memory(client).full
    client.close()


def test_a_user_who_may_read_neither_info_nor_config_is_told_unknown(tight: RedisServer, admin: redis.Redis) -> None:
    admin.acl_setuser(
        "blind", enabled=True, passwords=["+pw"], keys=["setqueue:*"], commands=["+@all", "-info", "-config"]
    )
    client = redis.Redis(port=tight.port, username="blind", password="pw")
    report = read_memory(client)
    assert report.noeviction == -1 and report.used_ratio == -1
    assert "cannot tell" in (report.eviction_warning("here") or "")
    admin.acl_setuser("config", enabled=True, passwords=["+pw"], keys=["setqueue:*"], commands=["+@all", "-info"])
    client = redis.Redis(port=tight.port, username="config", password="pw")
    report = read_memory(client)
    assert report.noeviction == 1 and report.used_ratio == -1  # CONFIG GET: the policy, not the memory
    client.close()


def _env(server: RedisServer, **settings: Any) -> dict[str, Any]:
    return {"REDIS_URL": server.url, "QUEUE_NAME": f"ev-{uuid.uuid4().hex[:6]}", **settings}


@pytest.mark.slow
def test_services_and_the_cli_say_when_redis_evicts_and_the_gauge_reads_0(
    tmp_path: Path, ready: Callable[..., Proc], cli: Cli
) -> None:
    server = RedisServer(args=["--maxmemory-policy", "allkeys-lru"]).start()
    try:
        env = _env(server)
        for role in ("worker", "creator", "cleaner"):
            extra: dict[str, Any] = {"CREATE_RATE": 1} if role == "creator" else {}
            proc = ready(role, **env, **extra)
            wait_until(lambda p=proc: p.metric("setqueue_redis_noeviction", -1) == 0, 30, f"{role}'s gauge")  # type: ignore[misc]
            said = [line for line in proc.log().splitlines() if "evicts keys" in line]
            assert len(said) == 1 and "allkeys-lru" in said[0] and "ERROR" in said[0], proc.log()
        code, out, err = cli(server.url, env["QUEUE_NAME"], "stats")
        assert code == 0 and "todos" in out
        assert err.count("\n") == 1 and "evicts keys" in err and "allkeys-lru" in err
        code, out, _ = cli(server.url, env["QUEUE_NAME"], "doctor")
        assert code == 1 and any(line.startswith("FAIL  eviction:") for line in out.splitlines()), out

        # Made fatal: exit 3, one line, before any work.
        refused = Proc.start("worker", tmp_path, name="strict", REQUIRE_NOEVICTION="true", **env)
        assert refused.wait(30) == 3
        lines = [line for line in refused.log().splitlines() if line.startswith("setqueue-worker:")]
        assert len(lines) == 1 and "REQUIRE_NOEVICTION" in lines[0] and "allkeys-lru" in lines[0], refused.log()
        refused.stop()
    finally:
        server.cleanup()


@pytest.mark.slow
def test_on_noeviction_the_gauge_reads_1_and_nothing_is_said(
    tight: RedisServer, ready: Callable[..., Proc], cli: Cli
) -> None:
    env = _env(tight, REQUIRE_NOEVICTION="true")
    cleaner = ready("cleaner", **env)
    wait_until(lambda: cleaner.metric("setqueue_redis_noeviction", -1) == 1, 30, "the gauge")
    assert cleaner.metric("setqueue_redis_memory_used_ratio", -1) == 0  # no maxmemory
    assert "evicts" not in cleaner.log()
    code, _, err = cli(tight.url, env["QUEUE_NAME"], "stats", "--json")
    assert code == 0 and err == ""


@pytest.mark.slow
def test_a_user_who_may_not_read_the_policy_gets_unknown_not_a_crash(
    tight: RedisServer, admin: redis.Redis, tmp_path: Path, ready: Callable[..., Proc]
) -> None:
    admin.acl_setuser("svc", enabled=True, passwords=["+pw"], **_rule_without("info"))
    url = tight.url.replace("redis://", "redis://svc:pw@")
    env = {"REDIS_URL": url, "QUEUE_NAME": f"ev-{uuid.uuid4().hex[:6]}"}
    cleaner = ready("cleaner", **env)
    wait_until(lambda: "cannot tell whether Redis" in cleaner.log(), 30, "the warning")
    assert cleaner.metric("setqueue_redis_noeviction", 0) == -1 and cleaner.alive()
    strict = Proc.start("cleaner", tmp_path, name="strict", REQUIRE_NOEVICTION="true", **env)
    assert strict.wait(30) == 3 and "cannot tell" in strict.log()
    strict.stop()


def _rule_without(command: str) -> dict[str, Any]:
    """acl_setuser's arguments for the setqueue rule less ``command``."""
    words = [w for w in rule("pw")[3:] if w != f"+{command}"]
    return {
        "keys": [w[1:] for w in words if w.startswith("~")],
        "channels": [w[1:] for w in words if w.startswith("&")],
        "commands": [w for w in words if w[0] in "+-"],
    }


def test_doctor_on_a_full_redis_says_so(tight: RedisServer, admin: redis.Redis, cli: Cli) -> None:
    fill_up(admin)
    code, out, _ = cli(tight.url, "doc", "doctor")
    lines = out.splitlines()
    assert code == 1 and [line.split(":")[0].split()[-1] for line in lines] == [
        "redis", "eviction", "memory", "persistence", "scripts", "cleaner", "workers",
    ]  # fmt: skip
    assert lines[2].startswith("FAIL  memory: out of memory"), lines
    admin.config_set("maxmemory", 0)
    code, out, _ = cli(tight.url, "doc", "doctor")
    assert code == 0 and not any(line.startswith("FAIL") for line in out.splitlines()), out
    assert json.dumps(out)  # printable


@pytest.mark.slow
def test_on_a_cluster_every_master_is_read(cli: Cli) -> None:
    cluster = RedisClusterNodes(masters=3, replicas=0).start()
    try:
        q = open_queue(cluster.url(), "mem", shards=3)
        report = read_memory(q.redis)
        assert len(report.nodes) == 3 and report.noeviction == 1
        evicting = cluster.ports[1]
        admin = cluster.client(evicting)
        admin.config_set("maxmemory-policy", "volatile-lru")
        admin.close()
        report = read_memory(q.redis)
        assert report.noeviction == 0 and [node.node for node in report.evicting] == [f"127.0.0.1:{evicting}"]
        code, out, _ = cli(cluster.url(), "mem", "--shards", "3", "doctor")
        assert code == 1 and f"FAIL  eviction: maxmemory-policy volatile-lru on 127.0.0.1:{evicting}" in out, out
        assert "a Redis Cluster of 3 masters" in out
        q.close()
    finally:
        cluster.cleanup()


def _done_bytes_per_job(payload_bytes: int, payload_keep_bytes: int, jobs: int = 20_000) -> dict[str, float]:
    """Bytes per done job, as bench/workers/bench_sq_memory.py measures them, on a fresh redis-server:
    ``jobs`` jobs enqueued with payloads of ``payload_bytes``, claimed and acked with a retention that
    keeps every id. "used_memory": INFO's rise over the jobs; then MEMORY USAGE of each key of the queue."""
    server = RedisServer().start()
    client = redis.Redis(port=server.port, decode_responses=True)
    q = Queue.from_url(
        server.url, "mem", done_max_count=10**9, done_max_age_seconds=0, payload_keep_bytes=payload_keep_bytes
    )
    try:
        q.enqueue({"warm-up": "x"})  # loads the scripts and opens the connection
        q.ack_many(q.claim(1))
        client.flushall()  # the script cache stays
        before = used_memory(client)
        ids = [f"job-{n:07d}" for n in range(jobs)]  # 11 characters
        for start in range(0, jobs, 500):
            q.enqueue({job_id: "x" * payload_bytes for job_id in ids[start : start + 500]})
        while leases := q.claim(500):
            q.ack_many(leases)
        # What expires by itself anyway: the resend records and the wake list.
        client.delete(q.keys.wake, *client.scan_iter(match=q.keys.prefix + "req:*", count=1000))
        measured = {"used_memory": (used_memory(client) - before) / jobs}
        for key in client.scan_iter(match=q.keys.prefix + "*"):
            measured[key.removeprefix(q.keys.prefix)] = int(client.memory_usage(key, samples=0) or 0) / jobs
        return measured
    finally:
        q.close()
        client.close()
        server.cleanup()


def test_memory_per_done_job_with_its_payload_kept_and_without() -> None:
    """docs/benchmarks/memory.md#payloads-kept-with-done-jobs: a kept payload costs its size and about
    60 bytes a done job; PAYLOAD_KEEP_BYTES=0, or a payload over it, nothing."""
    kept = _done_bytes_per_job(payload_bytes=100, payload_keep_bytes=1024)
    none = _done_bytes_per_job(payload_bytes=100, payload_keep_bytes=0)
    over = _done_bytes_per_job(payload_bytes=100, payload_keep_bytes=99)
    assert "payloads" not in none and "payloads" not in over, (none, over)
    assert 100 <= kept["payloads"] <= 200, kept
    assert 100 <= kept["used_memory"] - none["used_memory"] <= 200, (kept, none)
    assert abs(over["used_memory"] - none["used_memory"]) < 10, (over, none)
    for key in ("done", "done_log", "finished"):  # the rest of a done job's record is the same
        assert abs(kept[key] - none[key]) < 2, key  # (a sorted set's skip list levels are random)
