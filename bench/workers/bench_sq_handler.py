"""JOB_HANDLER for setqueue's worker: JOB_HANDLER=bench_sq_handler:handle, or :handle_async for the
async handler (bench/workers on PYTHONPATH).

With BENCH_CPROFILE=<path> set, the worker's main thread runs under cProfile from the moment
the worker imports this module (at start-up, when it loads its settings) and the stats are
dumped to <path>.<pid> when the process exits: a profile of the real worker, not of a copy.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

from bench_common import aclient, run_job, run_job_async

if os.environ.get("BENCH_CPROFILE"):
    import cProfile

    _profile = cProfile.Profile()
    _profile.enable()

    @atexit.register
    def _dump() -> None:
        _profile.disable()
        _profile.dump_stats(f"{os.environ['BENCH_CPROFILE']}.{os.getpid()}")


def handle(lease: Any) -> None:
    run_job(lease.id)


async def handle_async(lease: Any) -> None:
    """The same job as an ``async def``: the worker runs it on one event loop (JOB_HANDLER=
    bench_sq_handler:handle_async), up to CONCURRENCY at once; the INCR goes through redis.asyncio."""
    await run_job_async(aclient(), lease.id)


def noop(lease: Any) -> None:
    """No job body at all: what the worker itself costs per job (bench/profile_worker.py --noop)."""
