"""arq worker with its default settings (max_jobs 10, poll_delay 0.5 s, results kept)."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from arq.connections import RedisSettings
from bench_common import run_job_async


async def job(ctx: dict[str, Any], arg: Any) -> None:
    await run_job_async(ctx["redis"], arg)


class WorkerSettings:
    functions: ClassVar[list[Any]] = [job]
    redis_settings = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])
