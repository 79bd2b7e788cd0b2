"""``setqueue.aio``: every ``JobQueue`` operation as a coroutine, and results awaited by many producers
on one event loop without threads or polling."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import typing
from collections.abc import Sequence
from typing import Any

import pytest
import redis

import setqueue
import setqueue.aio
from setqueue import JobQueue, UnknownJob
from setqueue.client import LISTENER_PING_SECONDS
from setqueue.core import QueueCore
from setqueue.steps import Steps

# Not operations on Redis: the same plain methods in both clients.
PLAIN = {"backoff_delay", "due_in"}


def operations() -> list[str]:
    """The methods of the JobQueue Protocol."""
    return sorted(
        name for name, member in vars(JobQueue).items() if not name.startswith("_") and inspect.isfunction(member)
    )


def signatures(function: Any) -> list[inspect.Signature]:
    """The function's signature, and each of its overloads'."""
    return [inspect.signature(f) for f in (function, *typing.get_overloads(function))]


@pytest.mark.parametrize("name", operations())
def test_every_operation_is_a_coroutine_with_the_same_signature(name: str) -> None:
    method = getattr(setqueue.aio.Queue, name)
    pairs = list(zip(signatures(getattr(JobQueue, name)), signatures(method), strict=True))
    for blocking, awaited in pairs:
        assert list(awaited.parameters) == list(blocking.parameters), name
        for parameter in blocking.parameters.values():
            twin = awaited.parameters[parameter.name]
            assert (twin.kind, twin.default) == (parameter.kind, parameter.default), (name, parameter.name)
    if name in PLAIN:
        assert not inspect.iscoroutinefunction(method)
    else:
        assert inspect.iscoroutinefunction(method), f"{name} is not a coroutine function"


def test_open_queue_refuses_what_the_blocking_one_refuses(redis_url: str) -> None:
    for bad in ({"shards": 0}, {"name": ["a", "a"]}, {"lease_seconds": 0}, {"name": "a b"}):
        with pytest.raises(ValueError) as blocking:
            setqueue.open_queue(redis_url, **bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError) as awaited:
            setqueue.aio.open_queue(redis_url, **bad)  # type: ignore[arg-type]
        assert str(awaited.value) == str(blocking.value)


def commands_processed(client: redis.Redis) -> int:
    """Commands Redis has run, less the INFO calls that read this."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k != "cmdstat_info")


def test_a_thousand_producers_await_results_on_one_loop_without_threads_or_polling(
    own_redis_url: str, queue_name: str
) -> None:
    # It counts every command the server runs: no client of an earlier test (a worker process still
    # winding down, its listener) may send any there.
    redis_url = own_redis_url
    client = redis.Redis.from_url(redis_url)
    waiters = 1000
    ids = [f"job-{n}" for n in range(waiters)]
    worker = setqueue.open_queue(redis_url, queue_name)
    assert worker.enqueue(ids) == waiters
    threads_before = threading.active_count()

    async def produce() -> tuple[dict[str, Any], int, int, int]:
        async with setqueue.aio.open_queue(redis_url, queue_name) as q:
            looked = 0
            look = q.operations.look

            def counted(core: QueueCore, job_ids: Sequence[str], ended: dict[str, Any]) -> Steps[list[str]]:
                nonlocal looked
                waiting = yield from look(core, job_ids, ended)
                looked += 1
                return waiting

            q.operations.look = counted  # type: ignore[method-assign]
            tasks = [asyncio.create_task(q.result(job_id, timeout=120)) for job_id in ids]
            while looked < waiters:
                await asyncio.sleep(0.01)  # until every producer has looked once and waits
            threads = threading.active_count()
            idle_from = commands_processed(client)
            # A window of waiting with nothing ending: the waiters send nothing at all; only their one
            # listener its liveness PING, one a second of silence (LISTENER_PING_SECONDS).
            await asyncio.sleep(1.5)
            idle = commands_processed(client) - idle_from
            ending_from = commands_processed(client)
            leases = await asyncio.to_thread(worker.claim, waiters // 2)  # a claim takes 500 at the most
            leases += await asyncio.to_thread(worker.claim, waiters // 2)
            await asyncio.to_thread(worker.ack_many, leases, results=[lease.id.upper() for lease in leases])
            values = dict(zip(ids, await asyncio.gather(*tasks), strict=True))
            ending = commands_processed(client) - ending_from
            return values, threads, idle, ending

    values, threads, idle, ending = asyncio.run(produce())
    worker.close()
    client.close()
    assert values == {job_id: job_id.upper() for job_id in ids}
    assert threads - threads_before < 20  # asyncio.to_thread's worker thread, if any, is the one added
    assert idle <= 1.5 / LISTENER_PING_SECONDS + 1
    # Per waiter at most one look after its job ended: a MULTI of 9 reads (the states a job can be in,
    # waiting for dependencies too), 11 commands; plus the
    # claims and the ack (and the to_thread client's connection set-up).
    assert ending <= 11 * waiters + 100, ending


def test_an_unknown_job_and_a_timeout(redis_url: str, queue_name: str) -> None:
    async def run() -> None:
        async with setqueue.aio.open_queue(redis_url, queue_name, shards=3) as q:
            with pytest.raises(UnknownJob):
                await q.result("nobody", timeout=1)
            assert await q.enqueue(["slow"]) == 1
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                await q.result("slow", timeout=0.2)
            assert time.monotonic() - started < 30  # returned, did not hang
            assert (await q.stats())["todos"] == 1

    asyncio.run(run())
