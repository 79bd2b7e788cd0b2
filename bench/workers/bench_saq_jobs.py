"""saq's settings: its defaults, or concurrency=BENCH_CONCURRENCY when set. The job's INCR goes through
the worker's own connection, as arq's does."""

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
