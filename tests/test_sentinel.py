"""Redis Sentinel (docs/guide.md#redis-sentinel): a ``redis+sentinel://`` URL reaches the master its
sentinels name, for the library (blocking and asyncio), the CLI, the services and the console, and they
follow a promotion; with ``WAIT_REPLICAS=1`` a failover loses no acknowledged write."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import OptionError, open_queue
from setqueue import aio as setqueue_aio
from setqueue import sentinel as setqueue_sentinel
from setqueue.client import redact_url
from setqueue.runtime.cli import main as cli_main
from setqueue.runtime.settings import SettingError, validate_redis_url
from setqueue.sentinel import RECHECK_SECONDS, is_sentinel_url, parse_sentinel_url
from tests.support import free_port
from tests.support.console import ConsoleProc
from tests.support.procs import Proc
from tests.support.sentinel import MASTER_NAME, SentinelSetup, TlsSentinel, failover_run
from tests.support.tls import TlsRedisServer, make_pki
from tests.support.waits import wait_until


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelSetup]:
    """One setup for the tests that kill nothing."""
    with SentinelSetup().start() as setup:
        yield setup


@pytest.fixture
def fresh_sentinels() -> Iterator[SentinelSetup]:
    """A setup of its own, for a test that switches the master."""
    with SentinelSetup().start() as setup:
        yield setup


# -- the URL


def test_a_sentinel_url_names_the_master_its_sentinels_and_each_password() -> None:
    url = "redis+sentinel://app:p%40ss@10.0.0.1,10.0.0.2:26380,[::1]:5000/mymaster/3?sentinel_password=s3&protocol=3"
    assert is_sentinel_url(url) and is_sentinel_url("REDISS+SENTINEL://h/m") and not is_sentinel_url("redis://h")
    found = parse_sentinel_url(url)
    assert found.master == "mymaster" and found.db == 3 and not found.tls
    assert found.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("::1", 5000))
    assert (found.username, found.password) == ("app", "p@ss")
    assert (found.sentinel_username, found.sentinel_password) == (None, "s3")
    assert found.options == {"protocol": 3}
    plain = parse_sentinel_url("rediss+sentinel://h/m")
    assert (plain.db, plain.tls, plain.password, plain.sentinel_password) == (0, True, None, None)
    assert validate_redis_url(url) == url


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis+sentinel://h1,h2", "names no master"),
        ("redis+sentinel://h1/", "names no master"),
        ("redis+sentinel:///m", "names no sentinel"),
        ("redis+sentinel://h1,,h2/m", "names no sentinel"),
        ("redis+sentinel://h1:port/m", "'h1:port' is not a sentinel's host[:port]"),
        ("redis+sentinel://h1:0/m", "has port 0"),
        ("redis+sentinel://h1/m/x", "at most /DB, a number"),
        ("redis+sentinel://h1/m/0/1", "at most /DB, a number"),
        ("redis+sentinel://h1/m?master=x", "unknown option 'master'"),
        ("redis+sentinel://h1/m?protocol=many", "option protocol='many' is not valid"),
        ("redis+sentinel://h1/m?ssl_check_hostname=false", "is for a rediss+sentinel:// URL"),
    ],
)
def test_a_bad_sentinel_url_is_one_line_naming_redis_url(url: str, said: str) -> None:
    with pytest.raises(OptionError) as raised:
        parse_sentinel_url(url)
    assert raised.value.option == "url" and said in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(SettingError, match="REDIS_URL") as setting:
        validate_redis_url(url)
    assert said in str(setting.value)


def test_logs_never_show_a_sentinel_url_s_passwords() -> None:
    url = "redis+sentinel://app:secret1@h1:1,h2:2/m/0?sentinel_password=secret2&protocol=3"
    assert redact_url(url) == "redis+sentinel://app:***@h1:1,h2:2/m/0?sentinel_password=***&protocol=3"
    assert redact_url("redis+sentinel://h1,h2/m") == "redis+sentinel://h1,h2/m"
    assert redact_url("redis://:pw@host:6379/0?password=x") == "redis://:***@host:6379/0?password=***"


def test_a_pool_asks_again_each_second_and_later_when_no_sentinel_answered() -> None:
    recheck = setqueue_sentinel._Recheck()
    assert not recheck.due(None)  # no master found yet: the connect asks anyway
    assert recheck.due(("127.0.0.1", 6379)) and not recheck.due(("127.0.0.1", 6379))  # once a second
    soon = recheck.next_at
    recheck.failed(answered=True)  # a failover under way: ask again as usual
    assert recheck.next_at == soon
    recheck.failed(answered=False)  # no sentinel answered: not every call should wait on them
    assert recheck.next_at - soon >= setqueue_sentinel.RECHECK_AFTER_FAILURE_SECONDS - setqueue_sentinel.RECHECK_SECONDS


# -- the library


def test_the_library_reaches_the_master_through_its_sentinels_and_waits_for_its_replica(
    sentinels: SentinelSetup, queue_name: str
) -> None:
    """Blocking and asyncio, with ``wait_replicas=1``: each write confirmed by the replica."""
    queue = open_queue(sentinels.url(db=2), queue_name, wait_replicas=1, wait_timeout_seconds=5)
    try:
        assert queue.enqueue({"a": "pa", "b": "pb"}) == 2
        [lease] = queue.claim(1)
        assert queue.ack(lease)
        assert queue.stats()["done"] == 1
    finally:
        queue.close()
    master = sentinels.master_port()
    assert master is not None
    with sentinels.client(master) as client:
        client.select(2)  # type: ignore[no-untyped-call]
        assert client.sismember(queue.keys.done, "a")

    async def on_asyncio() -> None:
        aqueue = setqueue_aio.open_queue(sentinels.url(db=2), queue_name, wait_replicas=1, wait_timeout_seconds=5)
        async with aqueue:
            [lease] = await aqueue.claim(1)
            assert lease.id == "b" and lease.payload == "pb"
            assert await aqueue.ack(lease)
            assert (await aqueue.stats())["done"] == 2

    asyncio.run(on_asyncio())
    replica = next(node.port for node in sentinels.nodes if node.port != master)
    with sentinels.client(replica) as client:
        client.select(2)  # type: ignore[no-untyped-call]
        assert client.smembers(queue.keys.done) == {"a", "b"}  # WAIT 1: on the replica before the reply


def test_the_wrong_sentinel_password_is_refused_not_retried(sentinels: SentinelSetup, queue_name: str) -> None:
    url = sentinels.url().replace("sentinel_password=", "sentinel_password=wrong")
    queue = open_queue(url, queue_name)
    try:
        with pytest.raises(Exception, match="the sentinels refused sentinel_username/sentinel_password"):
            queue.stats()
    finally:
        queue.close()


def test_a_master_name_the_sentinels_do_not_know_is_said(sentinels: SentinelSetup, queue_name: str) -> None:
    url = sentinels.url().replace(f"/{MASTER_NAME}/", "/typo/")
    queue = open_queue(url, queue_name)
    try:
        with pytest.raises(Exception, match=f"none knows a master named 'typo' \\(they know {MASTER_NAME}\\)"):
            queue.stats()
    finally:
        queue.close()


# -- the CLI and the console


def test_the_cli_pushes_and_counts_through_the_sentinels(
    sentinels: SentinelSetup, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    url = sentinels.url()
    assert cli_main(["--redis-url", url, "--queue", queue_name, "--wait-replicas", "1", "push", "a", "b"], out=out) == 0
    assert out.getvalue() == "2 new, 0 already known\n"
    out = io.StringIO()
    assert cli_main(["--redis-url", url, "--queue", queue_name, "stats", "--json"], out=out) == 0
    assert json.loads(out.getvalue())["todos"] == 2
    assert "error" not in capsys.readouterr().err


def test_the_cli_says_a_bad_url_in_one_line_exit_2_and_no_sentinel_exit_3(
    sentinels: SentinelSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["--redis-url", "redis+sentinel://h1,h2", "stats"], out=io.StringIO()) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("setqueue: invalid --redis-url / REDIS_URL: ") and "names no master" in line
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/mymaster"
    assert cli_main(["--redis-url", url, "stats"], out=io.StringIO()) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"setqueue: cannot reach Redis at {url}: no sentinel gave the master 'mymaster': ")
    refused = sentinels.url().replace("sentinel_password=", "sentinel_password=wrong")
    assert cli_main(["--redis-url", refused, "stats"], out=io.StringIO()) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert "refused the user or password: the sentinels refused sentinel_username/sentinel_password" in line
    assert "wrong" not in line and "secret" not in line


def test_the_console_reads_and_checks_redis_through_the_sentinels(
    sentinels: SentinelSetup, queue_name: str, tmp_path: Path, procs: list[Proc]
) -> None:
    queue = open_queue(sentinels.url(), queue_name)
    try:
        queue.enqueue(["seen-in-the-console"])
    finally:
        queue.close()
    console = ConsoleProc.start_console(tmp_path, sentinels.url(), QUEUE_NAME=queue_name)
    procs.append(console)
    assert console.healthz() == (200, {"status": "ok"})  # one PING, through the sentinels
    page = console.client().get(f"/queues/{queue_name}/jobs/todos")
    assert page.status == 200 and "seen-in-the-console" in page.body


# -- a failover


def switch_master(sentinels: SentinelSetup) -> tuple[int, int]:
    """SENTINEL FAILOVER, until every sentinel names the new master; (old, new) ports. The old master
    stays a master until the sentinels' next INFO of it (up to 10 s): ``demote`` does that at once."""
    old = sentinels.master_port()
    assert old is not None

    def failover() -> bool:
        try:
            return bool(sentinels.sentinels[0].client.sentinel_failover(MASTER_NAME))
        except redis.ResponseError as exc:  # NOGOODSLAVE: it has not seen the replica's state yet
            assert "NOGOODSLAVE" in str(exc)
            return False

    wait_until(failover, 15, "the sentinel to start a failover")
    new = sentinels.wait_failover(old)
    wait_until(lambda: {s.master().get("port") for s in sentinels.sentinels} == {new}, 10, "every sentinel")
    return old, new


def demote(sentinels: SentinelSetup, old: int, new: int) -> None:
    """What the sentinels do to the old master on their next INFO of it, up to 10 s later."""
    with sentinels.client(old) as client:
        client.replicaof("127.0.0.1", new)
    wait_until(lambda: sentinels.replica_in_sync(new), 10, "the old master in sync as a replica")


def test_open_queues_move_to_a_new_master_while_the_old_one_still_takes_writes(
    fresh_sentinels: SentinelSetup, queue_name: str
) -> None:
    """A switch of master (SENTINEL FAILOVER, or a partition) leaves the old master taking writes
    until the sentinels demote it; a pool asks the sentinels again every RECHECK_SECONDS, so open
    queues (blocking and asyncio) write to the new master within about that, not 10 s."""
    sentinels = fresh_sentinels
    queue = open_queue(sentinels.url(), queue_name)
    aqueue = setqueue_aio.open_queue(sentinels.url(), queue_name)
    loop = asyncio.new_event_loop()
    probes = iter(range(1_000_000))

    def lands(on: int) -> bool:
        sync_id, async_id = f"probe-{next(probes)}", f"async-probe-{next(probes)}"
        queue.enqueue([sync_id])
        loop.run_until_complete(aqueue.enqueue([async_id]))
        with sentinels.client(on) as client:
            return all(client.zscore(queue.keys.todos, job_id) is not None for job_id in (sync_id, async_id))

    try:
        old = sentinels.master_port()
        assert old is not None and lands(old)
        old, new = switch_master(sentinels)
        bound = RECHECK_SECONDS + 4  # the sentinel a pool asks first may learn of the switch last
        wait_until(lambda: lands(new), bound, f"both queues writing to the new master within {bound} s")
        demote(sentinels, old, new)
    finally:
        queue.close()
        loop.run_until_complete(aqueue.aclose())
        loop.close()


def test_a_demoted_master_s_readonly_sends_the_call_to_the_new_master(
    fresh_sentinels: SentinelSetup, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a recheck in between, an open connection to the old master stays; once the old master
    is a replica its READONLY reply drops it and the call's next try asks the sentinels (blocking and
    asyncio): the enqueue lands on the new master, confirmed by its replica."""
    sentinels = fresh_sentinels
    monkeypatch.setattr(setqueue_sentinel, "RECHECK_SECONDS", 3600.0)
    queue = open_queue(sentinels.url(), queue_name, wait_replicas=1, wait_timeout_seconds=5)
    aqueue = setqueue_aio.open_queue(sentinels.url(), queue_name, wait_replicas=1, wait_timeout_seconds=5)

    async def enqueue(job_id: str) -> int:
        return await aqueue.enqueue([job_id])

    loop = asyncio.new_event_loop()
    try:
        assert queue.enqueue(["before"]) == 1 and loop.run_until_complete(enqueue("async-before")) == 1
        old, new = switch_master(sentinels)
        demote(sentinels, old, new)
        assert queue.enqueue(["after"]) == 1 and loop.run_until_complete(enqueue("async-after")) == 1
        with sentinels.client(new) as client:
            assert client.zcard(queue.keys.todos) == 4
    finally:
        queue.close()
        loop.run_until_complete(aqueue.aclose())
        loop.close()


@pytest.mark.slow
@pytest.mark.parametrize("cut", [False, True], ids=["kill", "cut-then-kill"])
def test_the_services_follow_a_promotion_and_with_wait_replicas_lose_no_acknowledged_write(
    tmp_path: Path, procs: list[Proc], record_property: Any, cut: bool
) -> None:
    """SIGKILL the master mid-run (300 jobs at 150/s, two workers, the cleaner, the creator, through
    the sentinels; ``cut-then-kill``: after 1.5 s of its replica cut off, which without WAIT_REPLICAS
    loses every write of those 1.5 s): its replica is promoted, the services follow within
    FOLLOW_BOUND_SECONDS, and with ``WAIT_REPLICAS=1`` every created id ends done, each run once (the
    execution log and the audit). ``python -m tests.support.sentinel`` measures the same for
    docs/guide.md, with and without WAIT_REPLICAS."""
    figures = failover_run(tmp_path, procs, wait_replicas=1, cut=cut, total=300)
    record_property("sentinel_failover", figures)
    print(f"\nsentinel failover: {figures}")
    assert figures["done"] == 300 and figures["failed"] == 0, figures
    assert figures["lost"] == figures["audit_lost"] == figures["audit_in_two_states"] == 0, figures
    assert figures["audit_created"] == 300 and figures["never_run_but_done"] == 0, figures
    assert figures["run_twice_without_a_lost_lease"] == 0, figures
    assert figures["services_alive"] and figures["backed_off"], figures


def test_rediss_sentinel_speaks_tls_to_the_sentinel_and_the_master(tmp_path: Path, queue_name: str) -> None:
    """A TLS-only master and sentinel (certificates for localhost and 127.0.0.1, the address the
    sentinel gives), checked against the CA in REDIS_TLS_CA_FILE's place, blocking and asyncio."""
    pki = make_pki(tmp_path / "pki")
    master = TlsRedisServer(pki).start()
    sentinel = TlsSentinel(pki, master.port, tmp_path)
    try:
        url = f"rediss+sentinel://localhost:{sentinel.port}/{MASTER_NAME}/0"
        queue = open_queue(url, queue_name, tls_ca_file=str(pki.ca))
        try:
            assert queue.enqueue(["over-tls", "async-over-tls"]) == 2
            [lease] = queue.claim(1)
            assert queue.ack(lease)
        finally:
            queue.close()

        async def on_asyncio() -> None:
            async with setqueue_aio.open_queue(url, queue_name, tls_ca_file=str(pki.ca)) as aqueue:
                [lease] = await aqueue.claim(1)
                assert lease.id == "async-over-tls" and await aqueue.ack(lease)

        asyncio.run(on_asyncio())
        with master.admin() as client:
            assert client.scard(queue.keys.done) == 2
    finally:
        sentinel.stop()
        master.cleanup()
