"""arq worker with its default settings (max_jobs 10, poll_delay 0.5 s, results kept), or with
max_jobs=BENCH_CONCURRENCY when that is set (the I/O matrix's equal-concurrency runs)."""

import os
from typing import Any, ClassVar

from arq.connections import RedisSettings
from bench_common import run_job_async


async def job(ctx: dict[str, Any], arg: Any) -> None:
    await run_job_async(ctx["redis"], arg)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [job]
    redis_settings = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])
    if os.environ.get("BENCH_CONCURRENCY"):
        max_jobs = int(os.environ["BENCH_CONCURRENCY"])
