"""The job every system runs: one INCR of the counter, so that counter == jobs proves each job ran
once. With BENCH_IO_SECONDS set (the I/O matrix) it first waits that long, standing for a call to
another service: time.sleep in a plain function, asyncio.sleep in an async one. A latency job
("lat:<n>") also records its start, time.time() before any wait, in the same round trip."""

import asyncio
import os
import time
from typing import Any

COUNTER = "bench:counter"
LATENCY = "bench:latency"
IO_SECONDS = float(os.environ.get("BENCH_IO_SECONDS") or 0)
_clients: dict[tuple[str, int], Any] = {}


def client(asynchronous: bool = False) -> Any:
    """This process's client (made after a fork, never inherited; redis-py loads only where jobs run)."""
    key = ("async" if asynchronous else "sync", os.getpid())
    if key not in _clients:
        import redis.asyncio  # noqa: PLC0415

        make = redis.asyncio.Redis if asynchronous else redis.Redis
        _clients[key] = make.from_url(os.environ["BENCH_REDIS_URL"])
    return _clients[key]


def run_job(arg: Any) -> None:
    started = time.time()
    if IO_SECONDS:
        time.sleep(IO_SECONDS)
    if not str(arg).startswith("lat:"):
        client().incr(COUNTER)  # the whole job: no pipeline object to pay for
        return
    client().pipeline(transaction=False).incr(COUNTER).hset(LATENCY, arg, repr(started)).execute()


async def run_job_async(redis: Any, arg: Any) -> None:
    """For asyncio workers (setqueue's async handler, arq, saq), on an asyncio client."""
    started = time.time()
    if IO_SECONDS:
        await asyncio.sleep(IO_SECONDS)
    if not str(arg).startswith("lat:"):
        await redis.incr(COUNTER)
        return
    async with redis.pipeline(transaction=False) as pipe:
        await pipe.incr(COUNTER).hset(LATENCY, arg, repr(started)).execute()
