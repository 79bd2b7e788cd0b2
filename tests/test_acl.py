"""Everything under a user with exactly ``setqueue acl-rule``: the ACL LOG stays empty (not even a
refusal a client ignores); a user lacking a command gets one line naming it and exit 3."""

from __future__ import annotations

import io
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import JobFailed, LeaseKeeper, NotReplicated, Queue, open_queue
from setqueue.runtime.acl import COMMANDS, rule, setuser
from setqueue.runtime.audit import Auditor, AuditRecorder
from setqueue.runtime.cli import main as cli_main
from setqueue.runtime.periodic import add_schedule, registered, remove_schedule
from setqueue.scripts import ACK_KEEPING_RESULTS, SOURCES
from tests.support import REPO_ROOT, RedisServer
from tests.support.cluster import RedisClusterNodes
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc, run_to_exit
from tests.support.waits import wait_until, wait_until_leases_expire

PASSWORD = "s3cret-acl"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=server.port, decode_responses=True)
    yield client
    client.close()


def add_user(admin: redis.Redis, name: str, without: tuple[str, ...] = (), words: list[str] | None = None) -> str:
    """A user with the setqueue rule less ``without``; its URL."""
    given = words if words is not None else [w for w in rule(PASSWORD) if w.lstrip("+") not in without]
    admin.execute_command("ACL", "SETUSER", name, *given)  # type: ignore[no-untyped-call]
    port = admin.connection_pool.connection_kwargs["port"]
    return f"redis://{name}:{PASSWORD}@127.0.0.1:{port}/0"


@pytest.fixture
def user_url(admin: redis.Redis) -> Iterator[str]:
    admin.acl_log_reset()
    yield add_user(admin, "setqueue")


def refusals(admin: redis.Redis) -> list[Any]:
    return [(e.get("reason"), e.get("object"), e.get("username")) for e in admin.acl_log()]  # type: ignore[union-attr]


def test_the_rule_is_what_acl_rule_prints() -> None:
    out = io.StringIO()
    assert cli_main(["acl-rule", "worker-user"], out=out) == 0
    assert out.getvalue().strip() == setuser("worker-user")
    words = rule()
    assert words[:7] == ["reset", "on", ">PASSWORD", "~setqueue:*", "resetchannels", "&setqueue:*", "-@all"]
    assert not {"+config", "+config|get", "+keys", "+flushall", "+flushdb", "+debug", "+acl"} & set(words)
    assert cli_main(["acl-rule", "no spaces"], out=io.StringIO()) == 2
    assert setuser() in (REPO_ROOT / "docs" / "guide.md").read_text(), "docs/guide.md shows another rule"


def test_every_command_a_script_runs_is_in_the_rule() -> None:
    granted = {command for group in COMMANDS.values() for command in group.split()}
    for name, source in [*SOURCES.items(), ("ack (keeping results)", ACK_KEEPING_RESULTS)]:
        called = {command.lower() for command in re.findall(r"redis\.p?call\(\s*'([A-Za-z]+)'", source)}
        assert called <= granted, f"{name}.lua runs {sorted(called - granted)}, which the rule does not grant"


def test_the_whole_library_works_under_the_rule(admin: redis.Redis, user_url: str) -> None:
    name = f"acl-{uuid.uuid4().hex[:6]}"
    q = Queue.from_url(user_url, name, max_attempts=2, done_max_age_seconds=0.001, retry_backoff_seconds=0)
    assert q.ping(record=True)
    assert q.enqueue(["a", "b", "c", "d"]) == 4
    assert q.enqueue({"p": {"n": 1}}, priority=3, max_attempts=1, timeout=5) == 1
    assert q.enqueue(["later"], delay=3600) == 1
    leases = q.claim(5)
    with LeaseKeeper(q, interval=0.01) as keeper:
        keeper.hold(leases)
        keeper.renew_now()
        keeper.drop(leases)
    assert q.renew(leases[0])
    assert [r.acked for r in q.ack_many(leases[:2])] == [True, True]
    q.fail(leases[2], "boom", retry=False)
    q.fail(leases[3], "again")
    q.release(leases[4:])
    assert q.requeue_failed() == 1
    assert q.inspect("later") is not None and q.delete("later") == "scheduled"
    short = Queue.from_url(user_url, name, lease_seconds=0.2)
    expired = short.claim(1)
    wait_until_leases_expire(q, expired)
    swept = q.sweep()
    assert swept.requeued == [expired[0].id]
    assert q.stats()["todos"] >= 1
    assert q.wait_for_work(0.01) in (True, False)
    assert q.seconds_since_sweep() is not None
    add_schedule(q, "tick", "* * * * *")
    assert [s.name for s in registered(q)[0]] == ["tick"]
    q.create_periodic_runs([("tick", 60_000, "tick@1970-01-01T00:01:00Z", None)])
    assert q.periodic_slots()
    assert remove_schedule(q, "tick")
    recorder = AuditRecorder(q.redis, q.keys)
    recorder.created("x", 2)
    recorder.run(leases[0], succeeded=True)
    recorder.lease_lost(["a"])
    assert Auditor(q.redis, q.keys, retention=True).audit().created == 2
    with pytest.raises(NotReplicated):  # WAIT is allowed; this Redis has no replica to confirm
        Queue.from_url(user_url, name, wait_replicas=1, wait_timeout_seconds=0.01).enqueue(["w"])
    sharded = open_queue(user_url, f"{name}-s", shards=3)
    assert sharded.ping(record=True)
    sharded.enqueue([f"s{n}" for n in range(9)])
    sharded.ack_many(sharded.claim(9))
    group = open_queue(user_url, [f"{name}-g1", f"{name}-g2"])
    group.enqueue(["g"])
    assert [lease.id for lease in group.claim(2)] == ["g"]
    for each in (q, short, sharded, group):
        each.close()
    assert refusals(admin) == []


def test_a_jobs_whole_life_works_under_the_rule(admin: redis.Redis, user_url: str) -> None:
    q = Queue.from_url(user_url, f"acl-{uuid.uuid4().hex[:6]}", retry_backoff_seconds=0)
    q.enqueue(["r", "c", "h"])
    r, c, h = q.claim(3)
    q.enqueue(["w"])
    assert r.progress(0.5, "halfway") and q.inspect("r").progress is not None  # type: ignore[union-attr]
    assert q.ack(r, {"total": 2})
    assert q.result("r", timeout=5) == {"total": 2}
    assert q.results(["r"], timeout=5) == {"r": {"total": 2}}
    assert (q.cancel("c"), q.cancel("w")) == ("in_progress", "todos")
    assert not c.progress(0.9)  # its lease no longer owns the job
    with pytest.raises(JobFailed, match="cancelled"):
        q.result("w", timeout=5)
    assert q.fail(h, "boom") == "retried"
    assert [entry.kind for entry in q.history("h")] == ["failed"]
    assert q.stats()["cancelled"] == 2 and q.stats()["results_kept"] == 1
    assert q.sweep().total == 0
    q.close()
    assert refusals(admin) == []


def cli(url: str, name: str, *argv: str) -> int:
    return cli_main(["--redis-url", url, "--queue", name, *argv], stdin=io.StringIO(""), out=io.StringIO())


def _service_env(url: str, name: str, **more: Any) -> dict[str, Any]:
    return {"REDIS_URL": url, "QUEUE_NAME": name, "LEASE_SECONDS": 2, "AUDIT": "true", **more}


@pytest.mark.slow
def test_every_service_and_command_works_under_the_rule(
    admin: redis.Redis, user_url: str, tmp_path: Path, procs: list[Proc], capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"acl-{uuid.uuid4().hex[:6]}"
    procs.append(Proc.start("worker", tmp_path, **_service_env(user_url, name, WORK_SECONDS=0.01, FAIL_RATE=0.2)))
    procs.append(Proc.start("cleaner", tmp_path, **_service_env(user_url, name, SCHEDULES="tick=* * * * *")))
    procs.append(Proc.start("creator", tmp_path, **_service_env(user_url, name, CREATE_TOTAL=60, CREATE_RATE=0)))
    worker, cleaner, creator = procs  # the worker's log holds the demo's failures' tracebacks
    assert creator.wait(60) == 0
    q = open_queue(user_url, name)
    wait_until(lambda: q.stats()["done"] + q.stats()["failed"] >= 60, 60, "60 jobs finished")
    wait_until(lambda: cleaner.metric("setqueue_audit_created") == 60, 60, "an audit of the 60 jobs")
    assert cleaner.metric("setqueue_audit_lost") == 0
    assert cleaner.metric("setqueue_redis_noeviction") == 1  # INFO is in the rule
    for argv in (
        ["push", "one", "--payload", "{}"],
        ["stats"],
        ["inspect", "one"],
        ["requeue-failed"],
        ["delete", "one"],
        ["schedules"],
        ["schedules", "add", "nightly", "@daily"],
        ["schedules", "remove", "nightly"],
        ["doctor"],
        ["push", "ended"],
        ["cancel", "ended"],
        ["result", "ended", "--wait", "5s"],
    ):
        code = cli(user_url, name, *argv)
        err = capsys.readouterr().err
        assert code in (0, 1, 4) and "refused" not in err and "may not" not in err, (argv, code, err)

    # The cancel listener (SUBSCRIBE) stops a running job; a kept result and progress; result waits.
    life, log = f"{name}-life", ExecutionLog(tmp_path / "exec.log")
    handler = "tests.support.jobs:handle"
    life_env = _service_env(user_url, life, AUDIT="false", EXEC_LOG=log.path, JOB_HANDLER=handler, CONCURRENCY=4)
    procs.append(Proc.start("worker", tmp_path, name="life-worker", **life_env))
    runs = open_queue(user_url, life)
    runs.enqueue(["spin-1", "progress-1", "value-1"])
    assert runs.result("value-1", timeout=60)["id"] == "value-1"
    wait_until(lambda: log.starts()["spin-1"] == 1 and log.starts()["progress-1"] == 1, 30, "both running")

    def reported() -> bool:
        info = runs.inspect("progress-1")
        return info is not None and info.progress is not None

    wait_until(reported, 30, "the progress report")
    for job_id in ("spin-1", "progress-1"):
        code = cli(user_url, life, "cancel", job_id)
        assert code == 0, capsys.readouterr().err
    wait_until(lambda: [e for e, *_ in log.events()].count("cancelled") == 2, 10, "the two runs stopped")
    assert [entry.kind for entry in runs.history("spin-1")] == ["cancelled"]
    runs.close()
    assert worker.alive() and cleaner.alive() and procs[-1].alive()
    assert "Traceback" not in cleaner.log() + creator.log()
    for proc in procs:
        assert "NOPERM" not in proc.log() and "refused us" not in proc.log(), proc.log()
    assert refusals(admin) == []


def run_until_exit(module: str, env: dict[str, Any], timeout: float = 60) -> tuple[int, str]:
    done = run_to_exit(module, env, timeout)
    return done.returncode, done.stderr


MISSING = {
    "a command a script runs": ("worker", "zpopmin", "ZPOPMIN in claim.lua"),
    "a command a service runs": ("worker", "blpop", "BLPOP"),
    "the sweep's page of in_progress": ("cleaner", "zscan", "ZSCAN"),
    "running scripts at all": ("creator", "evalsha", "EVALSHA"),
    "the worker's cancel listener": ("worker", "subscribe", "SUBSCRIBE"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MISSING), ids=list(MISSING))
def test_a_user_without_a_command_it_needs_is_one_line_naming_it_and_exit_3(
    admin: redis.Redis, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    module, command, says = MISSING[case]
    url = add_user(admin, f"less-{command}", without=(command,))
    name = f"acl-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    code, err = run_until_exit(module, _service_env(url, name, AUDIT="false", CREATE_TOTAL=5))
    assert code == 3, err
    assert "Traceback" not in err, err
    said = [line for line in err.splitlines() if "may not run" in line]
    assert len(said) == 1 and says in said[0], err
    assert time.monotonic() - started < 60  # not a retry loop
    if command == "evalsha":
        code = cli(url, name, "push", "a")
        err = capsys.readouterr().err
        assert code == 3 and len(err.splitlines()) == 1 and "may not run EVALSHA" in err, err


def test_result_for_a_user_who_may_not_subscribe_is_one_line_and_exit_3(
    admin: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    url = add_user(admin, "less-subscribe", without=("subscribe",))
    name = f"acl-{uuid.uuid4().hex[:6]}"
    assert cli(url, name, "push", "a") == 0
    capsys.readouterr()  # no worker serves the queue: push said so
    started = time.monotonic()
    code = cli(url, name, "result", "a", "--wait", "60s")
    err = capsys.readouterr().err
    assert code == 3 and len(err.splitlines()) == 1 and "may not run SUBSCRIBE" in err, err
    assert time.monotonic() - started < 30  # told, not left to wait out --wait


def test_a_user_without_the_queue_keys_is_refused_at_start(admin: redis.Redis) -> None:
    words = [w if w != "~setqueue:*" else "~other:*" for w in rule(PASSWORD)]
    url = add_user(admin, "elsewhere", words=words)
    code, err = run_until_exit("cleaner", {"REDIS_URL": url, "QUEUE_NAME": "q"})
    lines = [line for line in err.splitlines() if line.startswith("setqueue-cleaner:")]
    assert code == 3 and len(lines) == 1 and "~setqueue:*" in lines[0], err


@pytest.mark.slow
def test_a_sharded_queue_on_a_redis_cluster_works_under_the_rule() -> None:
    cluster = RedisClusterNodes(masters=3, replicas=0).start()
    try:
        for port in cluster.ports:
            client = cluster.client(port)
            client.acl_log_reset()
            client.execute_command("ACL", "SETUSER", "setqueue", *rule(PASSWORD))  # type: ignore[no-untyped-call]
            client.close()
        url = f"redis://setqueue:{PASSWORD}@127.0.0.1:{cluster.ports[0]}/0"
        q = open_queue(url, f"acl-{uuid.uuid4().hex[:6]}", shards=6)
        assert q.ping(record=True)
        q.enqueue([f"j{n}" for n in range(30)])
        leases = q.claim(30)
        while len(leases) < 30:
            leases += q.claim(30)
        assert all(r.acked for r in q.ack_many(leases))
        assert q.sweep().total == 0 and q.stats()["done"] == 30
        q.close()
        for port in cluster.ports:
            client = cluster.client(port)
            assert refusals(client) == [], port
            client.close()
    finally:
        cluster.cleanup()
