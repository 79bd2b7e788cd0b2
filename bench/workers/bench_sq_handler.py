"""JOB_HANDLER for setqueue's worker: JOB_HANDLER=bench_sq_handler:handle, or :handle_async for the
async handler (bench/workers on PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from bench_common import aclient, run_job, run_job_async


def handle(lease: Any) -> None:
    run_job(lease.id)


async def handle_async(lease: Any) -> None:
    """The same job as an ``async def``: the worker runs it on one event loop (JOB_HANDLER=
    bench_sq_handler:handle_async), up to CONCURRENCY at once; the INCR goes through redis.asyncio."""
    await run_job_async(aclient(), lease.id)
