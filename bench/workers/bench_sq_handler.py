"""JOB_HANDLER for setqueue's worker (bench/workers on PYTHONPATH): bench_sq_handler:handle, a plain
function the worker runs on CONCURRENCY threads, or bench_sq_handler:handle_async, an async def it
runs on one event loop, up to CONCURRENCY at once (the INCR then goes through redis.asyncio);
bench_sq_handler:handle_result returns a small result (kept for RESULT_TTL_SECONDS), to measure
what keeping results costs."""

from typing import Any

from bench_common import client, run_job, run_job_async


def handle(lease: Any) -> None:
    run_job(lease.id)


async def handle_async(lease: Any) -> None:
    await run_job_async(client(asynchronous=True), lease.id)


def handle_result(lease: Any) -> dict[str, Any]:
    run_job(lease.id)
    return {"id": lease.id, "ok": True}  # about 30 bytes of JSON, kept with the ack
