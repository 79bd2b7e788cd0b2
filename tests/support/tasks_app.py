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


# -- workflows (tests/test_workflows.py)


@tasks.task(name="step")
def step(n: int) -> list[int]:
    """A chain's step: the steps before it (its dependency's value), then ``n``."""
    lease = current_lease()
    _log("start", lease.id)
    before = [d.result for d in lease.dependencies() if d.outcome == "done"]
    _log("end", lease.id)
    return [*(before[0] if before else []), n]


@tasks.task(name="square", max_attempts=1)
def square(x: int) -> int:
    """A fan-in's member: x squared; a negative x fails for good."""
    _log("start", current_lease().id)
    if x < 0:
        raise ValueError(f"no square of {x} here")
    _log("end", current_lease().id)
    return x * x


@tasks.task(name="report")
def report() -> dict[str, object]:
    """A fan-in's callback: what its members returned, and how many ended each way."""
    lease = current_lease()
    _log("start", lease.id)
    members = lease.dependencies()
    outcomes: dict[str, int] = {}
    for member in members:
        outcomes[str(member.outcome)] = outcomes.get(str(member.outcome), 0) + 1
    _log("end", lease.id)
    return {"sum": sum(m.result for m in members if m.outcome == "done"), "outcomes": outcomes}
