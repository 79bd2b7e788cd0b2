"""What the worker says of a job that failed: its traceback, kept with the job's error (bounded) and
logged at WARNING, without flooding the log when many jobs fail the same way."""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field

from setqueue.jobs import TRACEBACK_MARK, JobTimeout, Lease

# How much of a failure the queue keeps with the job (Redis memory per failed job is bounded).
MOST_REASON_CHARS = 500
MOST_TRACEBACK_CHARS = 3_000
# The same failure again within this long is counted, not logged; the count is logged after.
REPEAT_WINDOW_SECONDS = 60.0


def handler_traceback(error: BaseException) -> str:
    """The traceback of an exception a handler raised, from the handler's frame down (the engine's
    own frame, which called it, left out), at most MOST_TRACEBACK_CHARS (its end: where it was raised)."""
    tb = error.__traceback__
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb))
    if len(text) <= MOST_TRACEBACK_CHARS:
        return text
    head, _, rest = text.partition("\n")
    return f"{head}\n  …\n{rest[-MOST_TRACEBACK_CHARS:]}"


def failure_reason(error: BaseException) -> str:
    """The error kept with a failed job: ``repr(error)``, then its traceback (``inspect`` shows it)."""
    if isinstance(error, JobTimeout):
        return "timeout: JobTimeout raised by the handler"
    reason = repr(error)[:MOST_REASON_CHARS]
    text = handler_traceback(error)
    start = text.find(TRACEBACK_MARK.lstrip("\n"))
    return reason if start < 0 else reason + "\n" + text[start:]


def where(error: BaseException) -> str:
    """Where a failure was raised: ``file:line`` of its deepest frame (what makes two alike)."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


@dataclass
class _Repeats:
    first_seen: float
    count: int = 0
    example: str = ""


@dataclass
class FailureLog:
    """Logs the first failure of each kind (exception type and where it was raised) with its
    traceback; the same kind again within REPEAT_WINDOW_SECONDS is counted, and the count is logged
    as one line when the window ends (``flush``)."""

    log: logging.Logger
    window: float = REPEAT_WINDOW_SECONDS
    _seen: dict[tuple[str, str], _Repeats] = field(default_factory=dict)

    def failed(self, lease: Lease, error: BaseException, outcome: str) -> None:
        now = time.monotonic()
        kind = (type(error).__name__, where(error))
        seen = self._seen.get(kind)
        if seen is not None and now - seen.first_seen < self.window:
            seen.count += 1
            seen.example = lease.id
            return
        self._seen[kind] = _Repeats(now)
        self.log.warning(
            "job %s (attempt %d) failed, %s: %s",
            lease.id,
            lease.attempt,
            outcome,
            handler_traceback(error).rstrip(),
        )

    def flush(self) -> None:
        """Say how many failures of each kind were not logged, once their window is over."""
        now = time.monotonic()
        for kind, seen in list(self._seen.items()):
            if now - seen.first_seen < self.window:
                continue
            del self._seen[kind]
            if seen.count:
                self.log.warning(
                    "%d more job failures like %s at %s in the last %.0fs (the latest: job %s)",
                    seen.count,
                    kind[0],
                    kind[1],
                    now - seen.first_seen,
                    seen.example,
                )
