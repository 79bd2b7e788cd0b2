"""JOB_HANDLER for setqueue's worker: JOB_HANDLER=bench_sq_handler:handle (bench/workers on PYTHONPATH)."""

from __future__ import annotations

from typing import Any

from bench_common import run_job


def handle(lease: Any) -> None:
    run_job(lease.id)
