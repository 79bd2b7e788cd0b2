"""JOB_HANDLER for setqueue's worker (bench/workers on PYTHONPATH): bench_sq_handler:handle, a plain
function the worker runs on CONCURRENCY threads, or bench_sq_handler:handle_async, an async def it
runs on one event loop, up to CONCURRENCY at once (the INCR then goes through redis.asyncio)."""

from typing import Any

from bench_common import client, run_job, run_job_async


def handle(lease: Any) -> None:
    run_job(lease.id)


async def handle_async(lease: Any) -> None:
    await run_job_async(client(asynchronous=True), lease.id)
