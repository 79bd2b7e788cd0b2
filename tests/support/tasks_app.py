"""A task registry for worker processes (JOB_HANDLER=tests.support.tasks_app:tasks), logging each run
as tests.support.jobs does (``start``/``end`` lines in $EXEC_LOG, with the job's id)."""

from __future__ import annotations

import asyncio
import time

from setqueue import Tasks, current_lease
from tests.support.jobs import _log

tasks = Tasks()


@tasks.task(name="add")
def add(a: int, b: int) -> int:
    """Add two numbers."""
    lease = current_lease()
    _log("start", lease.id)
    _log("end", lease.id)
    return a + b


@tasks.task(name="greet")
async def greet(name: str, *, punctuation: str = "!") -> str:
    """An ``async def`` task: awaited by the worker."""
    lease = current_lease()
    _log("start", lease.id)
    await asyncio.sleep(0)
    _log("end", lease.id)
    return f"hello {name}{punctuation}"


@tasks.task(name="flaky", max_attempts=2)
def flaky(reason: str) -> None:
    """Always fails: retried, but only twice (its own max_attempts)."""
    _log("start", current_lease().id)
    raise RuntimeError(reason)


@tasks.task(name="slow", timeout=0.3, max_attempts=1)
def slow(seconds: float) -> str:
    """Runs past its own timeout (0.3 s)."""
    _log("start", current_lease().id)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sum(range(1000))  # Python code: the timeout lands
    return "finished"


@tasks.task(name="patient", max_attempts=3, retry_backoff_seconds=600, retry_backoff_max_seconds=3600)
def patient(reason: str) -> None:
    """Always fails, and waits long before each retry: its own retry delays (10 min, doubling)."""
    _log("start", current_lease().id)
    raise RuntimeError(reason)


@tasks.task(name="typo", max_attempts=2)
def typo(x: int) -> int:
    """Its own code raises TypeError: a failure like any other, retried (the call itself fits)."""
    _log("start", current_lease().id)
    return x + "1"  # type: ignore[operator, no-any-return]
