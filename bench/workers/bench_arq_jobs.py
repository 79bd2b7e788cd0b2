"""arq's worker settings: its defaults, or max_jobs=BENCH_CONCURRENCY when set."""

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
