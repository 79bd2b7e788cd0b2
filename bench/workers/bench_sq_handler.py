"""setqueue's JOB_HANDLER: handle (on threads), handle_async (on one event loop), handle_result (returns a
small result, kept)."""

from typing import Any

from bench_common import client, run_job, run_job_async


def handle(lease: Any) -> None:
    run_job(lease.id)


async def handle_async(lease: Any) -> None:
    await run_job_async(client(asynchronous=True), lease.id)


def handle_result(lease: Any) -> dict[str, Any]:
    run_job(lease.id)
    return {"id": lease.id, "ok": True}  # about 30 bytes of JSON, kept with the ack
