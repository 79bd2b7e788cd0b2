"""Scripts survive the server: a script Redis lost (SCRIPT FLUSH, a failover to a replica that never
saw it, a restart) is loaded again on the NOSCRIPT error, matched by its code (the reply's first word),
never its text, which Valkey 8 changed. Here the scripts are flushed over and over while real workers
run and both clients send: nothing fails, nothing is lost, each job runs once (the execution log)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis import exceptions as rexc

import setqueue.aio
import setqueue.script_cache
from setqueue import Queue
from setqueue.script_cache import is_noscript
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.waits import wait_until

JOBS = 600


class Flusher:
    """SCRIPT FLUSH in a loop on its own connection until stopped; counts its flushes."""

    def __init__(self, redis_url: str) -> None:
        self.client = redis.Redis.from_url(redis_url)
        self.flushes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.client.script_flush()
            self.flushes += 1

    def __enter__(self) -> Flusher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()


def test_noscript_is_known_by_its_code_not_its_text() -> None:
    # Redis 7's text, Valkey 8's, and any text to come: the first word decides.
    for text in ("NOSCRIPT No matching script. Please use EVAL.", "NOSCRIPT No matching script.", "NOSCRIPT"):
        assert is_noscript(rexc.ResponseError(text))
    assert is_noscript(rexc.NoScriptError("No matching script."))  # redis-py cut the code off
    assert not is_noscript(rexc.ResponseError("ERR Error running script: NOSCRIPT in a message"))
    assert not is_noscript(ValueError("NOSCRIPT"))


def _evals(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_eval", {}).get("calls", 0))


def test_the_last_attempt_loads_and_runs_the_script_in_one_eval(
    own_redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pipelined load and resend can still lose the script between its reads (a 40 KB script takes
    # more than one); the last attempt cannot. With one attempt, the first one after NOSCRIPT is it.
    monkeypatch.setattr(setqueue.script_cache, "SCRIPT_LOAD_ATTEMPTS", 1)
    monkeypatch.setattr(setqueue.aio, "SCRIPT_LOAD_ATTEMPTS", 1)
    redis_url = own_redis_url  # it counts the server's EVALs: no other client's may land there
    client = redis.Redis.from_url(redis_url)
    q = Queue.from_url(redis_url, name=queue_name)
    q.enqueue(["warm"])
    client.script_flush()
    before = _evals(client)
    assert q.enqueue(["sync"]) == 1
    assert _evals(client) == before + 1

    async def send_async() -> int:
        async with setqueue.aio.open_queue(redis_url, queue_name) as aq:
            await aq.enqueue(["warm-async"])
            client.script_flush()
            return await aq.enqueue(["async"])

    assert asyncio.run(send_async()) == 1
    assert _evals(client) == before + 2
    assert q.stats()["todos"] == 4
    q.close()
    client.close()


@pytest.mark.slow
def test_flushed_scripts_while_workers_run_lose_nothing(
    redis_url: str,
    queue_name: str,
    make_queue: Callable[..., Queue],
    start_worker: Callable[..., Proc],
    tmp_path: Path,
) -> None:
    q = make_queue(lease_seconds=30, max_attempts=1)  # a failed run would show as failed, not retried
    workers = [start_worker(queue_name, CONCURRENCY="4") for _ in range(2)]
    with Flusher(redis_url) as flusher:
        half = JOBS // 2
        for start in range(0, half, 50):  # the blocking client's scripts, flushed under it
            q.enqueue([f"sync-{i}" for i in range(start, start + 50)])

        async def send_async() -> None:  # and the asyncio client's
            async with setqueue.aio.open_queue(redis_url, queue_name) as aq:
                for start in range(0, half, 50):
                    await aq.enqueue([f"async-{i}" for i in range(start, start + 50)])
                await aq.stats()

        asyncio.run(send_async())
        wait_until(lambda: q.stats()["done"] == JOBS, 90, "every job done while scripts are flushed")
    assert flusher.flushes > 10, "the scripts were hardly flushed: the test proved nothing"
    stats = q.stats()
    assert (stats["done"], stats["failed"], stats["todos"], stats["in_progress"]) == (JOBS, 0, 0, 0)
    log = ExecutionLog(tmp_path / "exec.log")
    expected = {f"sync-{i}" for i in range(JOBS // 2)} | {f"async-{i}" for i in range(JOBS // 2)}
    assert set(log.starts()) == expected and set(log.ends()) == expected
    assert max(log.starts().values()) == 1, "a job ran twice"
    for worker in workers:
        assert worker.alive(), worker.log()
        assert "Traceback" not in worker.log() and "NOSCRIPT" not in worker.log(), worker.log()
