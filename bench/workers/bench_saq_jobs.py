"""saq worker settings (`saq bench_saq_jobs.settings`): its defaults (concurrency 10), or
concurrency=BENCH_CONCURRENCY when that is set (the I/O matrix's equal-concurrency runs).
The job's INCR goes through the worker's own queue connection (redis.asyncio), as arq's does."""

from __future__ import annotations

import os
from typing import Any

from bench_common import run_job_async
from saq import Queue

QUEUE = "bench"


async def job(ctx: dict[str, Any], *, arg: Any) -> None:
    await run_job_async(ctx["worker"].queue.redis, arg)


settings: dict[str, Any] = {
    "queue": Queue.from_url(os.environ["BENCH_REDIS_URL"], name=QUEUE),
    "functions": [job],
}
if os.environ.get("BENCH_CONCURRENCY"):
    settings["concurrency"] = int(os.environ["BENCH_CONCURRENCY"])
