"""The job body every system runs: one INCR on the counter (latency jobs also record their start).

A throughput job does exactly one Redis INCR. A latency job (argument "lat:<n>") first notes its
start time (time.time(), the same machine clock the enqueuer uses), then does the INCR and one
HSET of that time, in one pipelined round trip.
"""

from __future__ import annotations

import os
import time
from typing import Any

COUNTER = "bench:counter"
LATENCY = "bench:latency"

_client: Any = None
_client_pid = 0


def client() -> Any:
    """A redis client per process (created after a fork, never inherited)."""
    global _client, _client_pid
    if _client is None or _client_pid != os.getpid():
        import redis  # noqa: PLC0415  (redis-py loads only in processes that run jobs)

        _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
        _client_pid = os.getpid()
    return _client


def run_job(arg: Any) -> None:
    if isinstance(arg, str) and arg.startswith("lat:"):
        started = time.time()
        pipe = client().pipeline(transaction=False)
        pipe.incr(COUNTER)
        pipe.hset(LATENCY, arg, repr(started))
        pipe.execute()
    else:
        client().incr(COUNTER)


async def run_job_async(redis: Any, arg: Any) -> None:
    """For asyncio workers (arq), on the worker's own connection pool."""
    if isinstance(arg, str) and arg.startswith("lat:"):
        started = time.time()
        async with redis.pipeline(transaction=False) as pipe:
            pipe.incr(COUNTER)
            pipe.hset(LATENCY, arg, repr(started))
            await pipe.execute()
    else:
        await redis.incr(COUNTER)
