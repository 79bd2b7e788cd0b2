"""The job body every system runs: one INCR on the counter (latency jobs also record their start).

A throughput job does exactly one Redis INCR. A latency job (argument "lat:<n>") first notes its
start time (time.time(), the same machine clock the enqueuer uses), then does the INCR and one
HSET of that time, in one pipelined round trip.

The I/O-bound matrix sets BENCH_IO_SECONDS (0.01) in the workers' environment: the job then
waits that long first (time.sleep in a plain function, asyncio.sleep in an async one), standing
for a call to another service, and only then does its INCR. The start time of a latency job is
taken before the wait, so pick-up latency does not include it.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

COUNTER = "bench:counter"
LATENCY = "bench:latency"
IO_SECONDS = float(os.environ.get("BENCH_IO_SECONDS") or 0)

_client: Any = None
_client_pid = 0
_aclient: Any = None


def client() -> Any:
    """A redis client per process (created after a fork, never inherited)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        import redis  # noqa: PLC0415  (redis-py loads only in processes that run jobs)

        _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        _client_pid = os.getpid()
    return _client


def aclient() -> Any:
    """An asyncio redis client for the process's one event loop (setqueue's async handler)."""
    global _aclient
    if _aclient is None:
        import redis.asyncio  # noqa: PLC0415

        _aclient = redis.asyncio.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    return _aclient


def run_job(arg: Any) -> None:
    started = time.time()
    if IO_SECONDS:
        time.sleep(IO_SECONDS)
    if isinstance(arg, str) and arg.startswith("lat:"):
        pipe = client().pipeline(transaction=False)
        pipe.incr(COUNTER)
        pipe.hset(LATENCY, arg, repr(started))
        pipe.execute()
    else:
        client().incr(COUNTER)


async def run_job_async(redis: Any, arg: Any) -> None:
    """For asyncio workers (setqueue's async handler, arq, saq), on an asyncio redis client."""
    started = time.time()
    if IO_SECONDS:
        await asyncio.sleep(IO_SECONDS)
    if isinstance(arg, str) and arg.startswith("lat:"):
        async with redis.pipeline(transaction=False) as pipe:
            pipe.incr(COUNTER)
            pipe.hset(LATENCY, arg, repr(started))
            await pipe.execute()
    else:
        await redis.incr(COUNTER)
