"""A bad network between the clients or services and Redis (tests/support/faultproxy.py): half-open
connections, resets, partitions. Each waits on conditions; the bounds it states are in
docs/guide.md#network, and the times it measures go to the JUnit report (``figures``: scripts/chaos
--network collects them), never asserted."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from setqueue import Queue, aio
from setqueue.client import LISTENER_DEAD_SECONDS, LISTENER_PING_SECONDS, listener_catch_ups
from tests.network_chaos import network_section, replace_section
from tests.support import RedisServer
from tests.support.faultproxy import FaultProxy
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import redis_clock, wait_until

# A listener finds a silent subscription within this (client.py), then resubscribes and catches up.
SILENCE_FOUND_SECONDS = LISTENER_PING_SECONDS + LISTENER_DEAD_SECONDS + 0.5


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as p:
        yield p


Record = Callable[[str, object], None]


def figures(record: Record, recovery: float, bound: float, **more: object) -> None:
    """The scenario's figures in the JUnit report (scripts/chaos --network collects them): how long
    recovery took after the fault ended, its stated bound, and counts (lost jobs, unexplained re-runs)."""
    record("recovery_seconds", round(recovery, 3))
    record("bound_seconds", round(bound, 3))
    for key, value in more.items():
        record(key, value)


@pytest.fixture
def name() -> str:
    return f"net-{uuid.uuid4().hex[:10]}"


def finish(direct: Queue, job_id: str, value: Any) -> None:
    [lease] = direct.claim(1)
    assert lease.id == job_id
    assert direct.ack(lease, result=value)


class Waiting:
    """``result(job_id)`` in a thread: its value and when it came."""

    def __init__(self, queue: Queue, job_id: str) -> None:
        self.value: Any = None
        self.at: float | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(queue, job_id), daemon=True)
        self._thread.start()

    def _run(self, queue: Queue, job_id: str) -> None:
        try:
            self.value = queue.result(job_id, timeout=60)
        except BaseException as exc:
            self.error = exc
        self.at = time.monotonic()


@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_a_result_waiter_whose_subscription_went_silent_still_sees_the_end(
    proxy: FaultProxy, redis_server: RedisServer, name: str, fault: str, record_property: Record
) -> None:
    direct = Queue.from_url(redis_server.url, name=name)
    through = Queue.from_url(proxy.url(), name=name)
    direct.enqueue(["a"])
    before = listener_catch_ups()
    waiting = Waiting(through, "a")
    wait_until(lambda: through._ended, 10, "the result listener")
    [listener] = through._ended.values()
    wait_until(listener._subscribed.is_set, 10, "the subscription")
    if fault == "blackhole":
        proxy.blackhole()  # the end-of-job message below vanishes, and nothing tells the listener
    else:
        proxy.reset_all()  # the listener's connection is reset: it knows at once
    finish(direct, "a", {"n": 1})
    ended = time.monotonic()
    if fault == "blackhole":
        wait_until(lambda: proxy.dropped_bytes, 10, "the end-of-job message dropped")
    proxy.heal()
    wait_until(lambda: waiting.at is not None, 30, "result() to return")
    assert waiting.error is None and waiting.value == {"n": 1}
    assert listener.catch_ups >= 1 and listener_catch_ups() > before
    assert waiting.at is not None
    figures(record_property, waiting.at - ended, SILENCE_FOUND_SECONDS, catch_ups=listener.catch_ups, lost=0)
    through.close()


def test_an_async_result_waiter_whose_subscription_went_silent_still_sees_the_end(
    proxy: FaultProxy, redis_server: RedisServer, name: str, record_property: Record
) -> None:
    direct = Queue.from_url(redis_server.url, name=name)
    direct.enqueue(["a"])

    async def main() -> tuple[Any, float, int]:
        through = aio.open_queue(proxy.url(), name)
        try:
            waiter = asyncio.create_task(through.result("a", timeout=60))
            while not (through._ended and next(iter(through._ended.values()))._subscribed.is_set()):
                await asyncio.sleep(0.05)
            [listener] = through._ended.values()
            proxy.blackhole()
            await asyncio.to_thread(finish, direct, "a", "done")
            ended = time.monotonic()
            while not proxy.dropped_bytes:  # the end-of-job message dropped
                await asyncio.sleep(0.01)
            proxy.heal()
            value = await asyncio.wait_for(waiter, 30)
            return value, time.monotonic() - ended, listener.catch_ups
        finally:
            await through.aclose()

    value, seconds, catch_ups = asyncio.run(main())
    assert value == "done" and catch_ups >= 1
    figures(record_property, seconds, SILENCE_FOUND_SECONDS, catch_ups=catch_ups, lost=0)


# -- services behind the proxy

LEASE = 2.0
TIMEOUT = 0.5  # REDIS_TIMEOUT_SECONDS of the services under test
RETRY_CAP = 5.0  # the longest backoff of a service's retry loop (runtime/service.py)
# A healed worker notices its lost leases within this (docs/guide.md#network): the call in flight
# gives up at the timeout; the renewal after it (at most a lease third and 1 s of backoff on) or the
# ack resent after the retry loop's backoff is refused.
NOTICE_SECONDS = TIMEOUT + max(RETRY_CAP, 1.0 + LEASE / 3)
# A healed idle worker claims again within this: its BLPOP gives up at the timeout, then at most
# the retry loop's backoff.
IDLE_BOUND = TIMEOUT + RETRY_CAP


def service_env(url: str, name: str, tmp_path: Path, **settings: Any) -> dict[str, Any]:
    return {
        "REDIS_URL": url,
        "QUEUE_NAME": name,
        "LEASE_SECONDS": LEASE,
        "REDIS_TIMEOUT_SECONDS": TIMEOUT,
        "MAX_ATTEMPTS": 10,
        "JOB_HANDLER": "tests.support.jobs:handle",
        "EXEC_LOG": str(tmp_path / "exec.log"),
        "WORKER_HEARTBEAT_SECONDS": 0,
        **settings,
    }


def start(procs: list[Proc], module: str, tmp_path: Path, name: str, **env: Any) -> Proc:
    proc = Proc.start(module, tmp_path, name=name, **env)
    procs.append(proc)
    proc.wait_ready()
    return proc


def unexplained_reruns(q: Queue, log: ExecutionLog) -> dict[str, int]:
    """Jobs that started more often than 1 + their lost leases (history): each re-run needs one."""
    return {
        job_id: n
        for job_id, n in log.starts().items()
        if n > 1 + sum(1 for entry in q.history(job_id) if entry.kind == "lease lost")
    }


def test_a_worker_blackholed_for_twice_its_lease_is_fenced_and_serves_again(
    proxy: FaultProxy,
    redis_server: RedisServer,
    name: str,
    tmp_path: Path,
    procs: list[Proc],
    *,
    record_property: Record,
) -> None:
    q = Queue.from_url(redis_server.url, name=name)
    log = ExecutionLog(tmp_path / "exec.log")
    start(procs, "cleaner", tmp_path, "cleaner", **service_env(redis_server.url, name, tmp_path, SWEEP_INTERVAL=0.2))
    cut = start(
        procs, "worker", tmp_path, "cut", **service_env(proxy.url(), name, tmp_path, CONCURRENCY=4, CLAIM_BATCH=4)
    )
    first = [f"sleep-1-{n}" for n in range(16)]
    q.enqueue(first)
    running = wait_until(lambda: {pid for _, _, pid, _ in log.events()}, 20, "the worker running jobs")
    [cut_pid] = running

    proxy.blackhole()  # half-open: the worker hears nothing, and nothing tells it so
    cut_off_at = redis_clock(q.redis)
    other = start(procs, "worker", tmp_path, "other", **service_env(redis_server.url, name, tmp_path, CONCURRENCY=4))
    wait_until(lambda: redis_clock(q.redis) >= cut_off_at + 2 * LEASE, 30, "twice the lease cut off", 0.05)
    swept = {j for j in first if any(e.kind == "lease lost" for e in q.history(j))}
    assert swept, "the cut-off worker's jobs were swept"
    wait_until(lambda: set(log.ends()) >= swept and len(log.pids(next(iter(swept)))) == 2, 30, "them run elsewhere")

    proxy.heal()
    healed = time.monotonic()

    def noticed() -> bool:
        m = cut.metrics()
        return m.get("setqueue_leases_lost_total", 0) + m.get("setqueue_stale_acks_total", 0) > 0

    wait_until(noticed, 30, "the healed worker to notice its lost leases", 0.02)
    notice = time.monotonic() - healed
    assert cut.alive() and other.alive()
    # Its late acks of the swept jobs are refused (fencing): the swept jobs count once, as the other's.
    wait_until(lambda: cut.metric("setqueue_stale_acks_total") >= 1, 30, "the late acks refused")

    # It serves again: new jobs reach it (the other worker stops taking any).
    other.signal(signal.SIGTERM)
    assert other.wait(30) == 0
    after = [f"after-{n}" for n in range(8)]
    q.enqueue(after)
    wait_until(lambda: q.stats()["done"] == len(first) + len(after), 60, "every job done")
    assert {pid for job_id in after for pid in log.pids(job_id)} == {cut_pid}
    stats = q.stats()
    assert stats["todos"] == stats["in_progress"] == stats["failed"] == 0
    assert unexplained_reruns(q, log) == {}
    reruns = sum(n - 1 for n in log.starts().values())
    figures(record_property, notice, NOTICE_SECONDS, swept=len(swept), reruns=reruns, unexplained_reruns=0, lost=0)


STANDIN = 2.0  # STANDIN_SWEEP_SECONDS of the test's worker
# A worker sweeps in the cleaner's stead within STANDIN_SWEEP_SECONDS of the last sweep, plus its look
# interval (a quarter of that, at most 5 s: worker/standin.py).
STANDIN_BOUND = STANDIN + min(5.0, STANDIN / 4)


def test_with_the_cleaner_blackholed_jobs_flow_and_a_worker_sweeps_in_its_stead(
    proxy: FaultProxy,
    redis_server: RedisServer,
    name: str,
    tmp_path: Path,
    procs: list[Proc],
    *,
    record_property: Record,
) -> None:
    q = Queue.from_url(redis_server.url, name=name)
    log = ExecutionLog(tmp_path / "exec.log")
    cleaner = start(
        procs, "cleaner", tmp_path, "cleaner", **service_env(proxy.url(), name, tmp_path, SWEEP_INTERVAL=0.2)
    )
    wait_until(lambda: q.seconds_since_sweep() is not None, 20, "the cleaner sweeping")
    # A worker that will die holding jobs (only a sweep brings them back), and one that stands in.
    gate = tmp_path / "gate"
    doomed = start(procs, "worker", tmp_path, "doomed", **service_env(redis_server.url, name, tmp_path, GATE=gate))
    held = [f"gate-{n}" for n in range(3)]
    q.enqueue(held)
    wait_until(lambda: set(log.starts()) >= set(held), 20, "the doomed worker running the held jobs")
    worker = start(
        procs,
        "worker",
        tmp_path,
        "worker",
        **service_env(redis_server.url, name, tmp_path, GATE=gate, STANDIN_SWEEP_SECONDS=STANDIN),
    )
    proxy.blackhole()
    last_sweep = redis_clock(q.redis) - (q.seconds_since_sweep() or 0.0)
    doomed.signal(signal.SIGKILL)
    flowing = [f"flow-{n}" for n in range(20)]
    q.enqueue(flowing)
    wait_until(lambda: set(log.ends()) >= set(flowing), 30, "new jobs done while the cleaner is cut off")
    wait_until(lambda: worker.metric("setqueue_standin_sweeps_total") >= 1, 30, "a stand-in sweep", 0.02)
    # By the Redis clock, from the cleaner's last sweep to the stand-in's (each stamps the queue).
    took_over = redis_clock(q.redis) - (q.seconds_since_sweep() or 0.0) - last_sweep
    gate.touch()
    wait_until(lambda: q.stats()["done"] == len(held) + len(flowing), 30, "the held jobs swept and run")
    assert unexplained_reruns(q, log) == {}
    assert cleaner.alive()
    figures(record_property, took_over, STANDIN_BOUND, held=len(held), unexplained_reruns=0, lost=0)


def test_an_idle_worker_whose_connection_went_silent_sees_new_work(
    proxy: FaultProxy,
    redis_server: RedisServer,
    name: str,
    tmp_path: Path,
    procs: list[Proc],
    *,
    record_property: Record,
) -> None:
    q = Queue.from_url(redis_server.url, name=name)
    log = ExecutionLog(tmp_path / "exec.log")
    start(procs, "worker", tmp_path, "idle", **service_env(proxy.url(), name, tmp_path))
    wait_until(proxy.open_connections, 10, "the idle worker connected")
    proxy.blackhole()
    q.enqueue(["new-1"])  # its wake-up token is pushed; the worker's BLPOP reply vanishes
    wait_until(lambda: proxy.dropped_bytes, 10, "the worker's connection gone silent")
    proxy.heal()
    healed = time.monotonic()
    wait_until(lambda: "new-1" in log.ends(), 30, "the new job run")
    took = time.monotonic() - healed
    wait_until(lambda: q.stats()["done"] == 1, 10, "it acked")
    figures(record_property, took, IDLE_BOUND, lost=0)


def test_a_creator_whose_enqueue_replies_are_lost_resends_and_counts_each_job_once(
    proxy: FaultProxy,
    redis_server: RedisServer,
    name: str,
    tmp_path: Path,
    procs: list[Proc],
    *,
    record_property: Record,
) -> None:
    q = Queue.from_url(redis_server.url, name=name)
    total = 60
    env = service_env(proxy.url(), name, tmp_path, CREATE_RATE=20, CREATE_BATCH=5, CREATE_TOTAL=total)
    creator = start(procs, "creator", tmp_path, "creator", CREATE_ID_PREFIX="c", **env)
    wait_until(lambda: q.stats()["todos"] >= 5, 20, "the creator enqueueing")
    # Only the replies vanish: the next enqueue applies and the creator never hears so; resends on new
    # connections wait for their handshake's reply, so redis-py gives up and the retry loop resends.
    # (Not "todos grew after the blackhole": the enqueue whose reply is the first dropped may have been
    # applied before todos was read, and its resends then add nothing.)
    proxy.blackhole(up=False, down=True)
    wait_until(lambda: proxy.dropped_bytes > 0, 20, "an enqueue's reply dropped")
    wait_until(lambda: "during enqueue" in creator.log(), 20, "the retry loop resending it")
    proxy.heal()
    assert creator.wait(60) == 0, creator.log()
    assert q.stats()["todos"] == total
    assert f"created {total} new jobs (0 duplicates)" in creator.log(), creator.log()
    record_property("created", total)
    record_property("added_twice", 0)


def test_the_network_section_of_the_chaos_summary_is_kept_by_either_run(tmp_path: Path) -> None:
    summary = tmp_path / "chaos.md"
    summary.write_text("# Chaos run\n\nthe compose run's verdict\n", encoding="utf-8")
    replace_section(summary, "## Network\n\nfirst figures\n")
    replace_section(summary, "## Network\n\nlater figures\n")  # the network run replaces its own section
    expected = "# Chaos run\n\nthe compose run's verdict\n\n## Network\n\nlater figures\n"
    assert summary.read_text(encoding="utf-8") == expected
    kept = network_section(summary)  # what the compose run appends to its own new summary
    assert kept == "\n## Network\n\nlater figures\n"
