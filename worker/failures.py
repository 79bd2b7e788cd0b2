"""A failed job's traceback: kept with its error (bounded) and logged, without flooding the log."""

from __future__ import annotations

import json
import logging
import time
import traceback
from dataclasses import dataclass, field

from setqueue.jobs import TRACEBACK_MARK, JobTimeout, Lease, PermanentJobError

MOST_REASON_CHARS = 500
MOST_TRACEBACK_CHARS = 3_000
# The same failure again within this long is counted, not logged; the count is logged after.
REPEAT_WINDOW_SECONDS = 60.0


# The worker's own frames above the handler's: the slot that called it, and setqueue.otel's span
# wrapper, there whenever OpenTelemetry is installed (an SDK configured or not). Noise in a traceback.
CALLERS = frozenset({"worker.engine", "setqueue.otel"})


def handler_traceback(error: BaseException) -> str:
    """From the handler's frame down, at most MOST_TRACEBACK_CHARS (its end: where it was raised)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_globals.get("__name__") in CALLERS:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb))
    if len(text) <= MOST_TRACEBACK_CHARS:
        return text
    head, _, rest = text.partition("\n")
    return f"{head}\n  …\n{rest[-MOST_TRACEBACK_CHARS:]}"


def permanent(lease: Lease, error: BaseException) -> bool:
    """Whether the job fails the same way whenever it runs, so is dead-lettered at once: a
    PermanentJobError (``Lease.json()``'s PayloadError too), or a JSONDecodeError of its very payload
    (a handler's own ``json.loads(lease.payload)``). Any other JSONDecodeError (a reply from elsewhere
    that was not JSON this time) is retried as any failure."""
    if isinstance(error, PermanentJobError):
        return True
    return isinstance(error, json.JSONDecodeError) and lease.payload is not None and error.doc == lease.payload


def failure_reason(error: BaseException) -> str:
    """``repr(error)``, then its traceback."""
    if isinstance(error, JobTimeout):
        return "timeout: JobTimeout raised by the handler"
    reason = repr(error)[:MOST_REASON_CHARS]
    text = handler_traceback(error)
    start = text.find(TRACEBACK_MARK.lstrip("\n"))
    return reason if start < 0 else reason + "\n" + text[start:]


def where(error: BaseException) -> str:
    """``file:line`` of the deepest frame: what makes two failures alike."""
    frames = traceback.extract_tb(error.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"


@dataclass
class _Repeats:
    first_seen: float
    count: int = 0
    example: str = ""


@dataclass
class FailureLog:
    """Logs the first failure of each kind (type, ``where``); the same kind again within the window
    is counted, and ``flush`` logs the count when the window ends."""

    log: logging.Logger
    window: float = REPEAT_WINDOW_SECONDS
    _seen: dict[tuple[str, str], _Repeats] = field(default_factory=dict)

    def failed(self, lease: Lease, error: BaseException, outcome: str) -> bool:
        """Log this failure with its traceback, unless one like it was logged within the window (then it
        is counted); True when it was logged."""
        now = time.monotonic()
        kind = (type(error).__name__, where(error))
        seen = self._seen.get(kind)
        if seen is not None and now - seen.first_seen < self.window:
            seen.count += 1
            seen.example = lease.id
            return False
        self._seen[kind] = _Repeats(now)
        self.log.warning(
            "job %s (attempt %d) failed, %s: %s", lease.id, lease.attempt, outcome, handler_traceback(error).rstrip()
        )
        return True

    def flush(self) -> None:
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
