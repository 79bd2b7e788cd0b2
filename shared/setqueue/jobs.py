"""What a job is to the code around it: leases, what the queue's calls return, and the exceptions a
handler raises to steer its job. Plain data, no Redis: a handler module can import it alone."""

from __future__ import annotations

import base64
import enum
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from setqueue.keys import validate_priority, validate_queue_name


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on one job. ``token`` proves ownership; ``attempt`` counts claims (1 = first)."""

    id: str
    token: str
    attempt: int
    payload: str | None
    enqueued_at: float | None  # Unix seconds, as all times here by the Redis clock; None: unknown
    claimed_at: float
    priority: int = 0  # -10 to 10, higher runs first
    queue: str = ""  # the queue it came from
    max_attempts: int | None = None  # the job's own (None: the queue's)
    timeout: float | None = None  # the job's own (None: the worker's; 0: none)
    trace_parent: str | None = None  # of the span that enqueued it
    # Keeps progress reports (bound by the queue it was claimed from).
    reporter: Callable[[Lease, float, str], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def queue_wait_seconds(self) -> float | None:
        return None if self.enqueued_at is None else max(0.0, self.claimed_at - self.enqueued_at)

    def progress(self, fraction: float, message: str = "") -> bool:
        """Report how far the job got (``fraction`` 0..1, a few words) for ``inspect`` and the console.
        False when this lease no longer owns the job (lost, or cancelled)."""
        if not (isinstance(fraction, int | float) and 0 <= fraction <= 1):
            raise ValueError(f"progress must be a fraction from 0 to 1, got {fraction!r}")
        if self.reporter is None:
            raise RuntimeError(f"the lease of {self.id!r} was not claimed from a queue: nowhere to report to")
        return self.reporter(self, float(fraction), message.replace("\n", " ")[:200])

    def json(self) -> Any:
        if self.payload is None:
            raise ValueError(f"job {self.id!r} has no payload")
        return json.loads(self.payload)


def job_options(max_attempts: int | None, timeout: float | None, trace_parent: str | None = None) -> str:
    """A job's own options as stored (``"<max attempts>|<timeout ms>"``, then ``"|<traceparent>"`` when
    enqueued in a traced span), "" for none; ValueError naming a bad one. Lua reads the leading number only."""
    if trace_parent:
        return f"{job_options(max_attempts, timeout) or '|'}|{trace_parent}"
    if max_attempts is None and timeout is None:
        return ""
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000
    ):
        raise ValueError(f"max_attempts must be a whole number from 1 to 1000, got {max_attempts!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 <= timeout <= 30 * 86400
    ):
        raise ValueError(f"timeout must be from 0 (none) to 2592000 seconds, got {timeout!r}")
    return f"{'' if max_attempts is None else max_attempts}|{'' if timeout is None else round(timeout * 1000)}"


def parse_job_options(stored: str | None) -> tuple[int | None, float | None]:
    """(max attempts, timeout seconds) of stored ``job_options`` (None: not its own)."""
    if not stored:
        return None, None
    most, _, rest = stored.partition("|")
    timeout_ms = rest.partition("|")[0]
    return (int(most) if most else None), (int(timeout_ms) / 1000 if timeout_ms else None)


def parse_trace_parent(stored: str | None) -> str | None:
    """The traceparent in stored ``job_options``, or None."""
    parts = (stored or "").split("|", 2)
    return parts[2] or None if len(parts) == 3 else None


@dataclass(frozen=True, slots=True)
class AckResult:
    acked: bool  # False: the lease was stale and nothing changed
    end_to_end_seconds: float | None  # enqueue -> done by the Redis clock, when known


class RenewOutcome(enum.StrEnum):
    RENEWED = "renewed"  # the lease goes on
    LOST = "lost"  # its lock expired, or another claim owns the job now
    CANCELLED = "cancelled"  # lost because the job was cancelled: stop running it


class FailOutcome(enum.StrEnum):
    RETRIED = "retried"  # back in todos for another attempt
    DEAD = "dead"  # moved into failed
    RELEASED = "released"  # back in todos without using up an attempt
    STALE = "stale"  # the lease was no longer ours; nothing changed


@dataclass(frozen=True, slots=True)
class SweepResult:
    requeued: list[str]
    dead_lettered: list[str]
    done_trimmed: int

    @property
    def total(self) -> int:
        """Ids moved out of in_progress."""
        return len(self.requeued) + len(self.dead_lettered)


# A failed job's error may go on with its traceback, from this line on.
TRACEBACK_MARK = "\nTraceback (most recent call last):\n"


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: str
    queue: str  # a sharded queue's name, not its shard's
    state: str  # one of keys.STATES
    priority: int | None  # None: not known (a job in done)
    attempts: int | None  # claims so far; None: not known
    payload: str | None
    error: str | None  # its last failure's reason (first line: repr of the exception)
    enqueued_at: float | None  # Unix seconds, as all times here by the Redis clock
    done_at: float | None
    due_at: float | None  # scheduled: when it becomes claimable
    finished_at: float | None  # when it ended
    lock_token: str | None
    lock_ttl_seconds: float | None
    max_attempts: int | None = None  # the job's own (None: the queue's)
    timeout: float | None = None  # the job's own (None: the worker's)
    traceback: str | None = None  # of its last failure, when the handler raised
    trace_parent: str | None = None  # until it is acked
    history: tuple[HistoryEntry, ...] = ()  # oldest first
    progress: Progress | None = None
    result: Any = None  # while kept
    result_kept: bool = False  # False for none, or one gone
    group: str | None = None  # until it is done or cancelled


class PermanentJobError(Exception):
    """Raise from a job handler to dead-letter the job at once, without retries."""


class RetryLater(Exception):
    """Raise from a handler to retry the job after ``seconds``; it uses an attempt like any failure."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"RetryLater needs a finite number of seconds >= 0, got {seconds!r}")
        super().__init__(reason or f"retry in {seconds:g}s")
        self.seconds = float(seconds)


class MoveTo(Exception):
    """Raise from a handler to move the job to ``queue``: enqueued there (same id and payload,
    ``priority``), then acked here. At least once: a worker dying in between leaves it here to run
    again, and the enqueue there is idempotent."""

    def __init__(self, queue: str, priority: int = 0) -> None:
        validate_queue_name(queue)
        validate_priority(priority)
        super().__init__(f"moved to queue {queue}")
        self.queue = queue
        self.priority = priority


class JobCancelled(BaseException):
    """Raised in a job's thread when it is cancelled while running (an async job's task is cancelled
    instead). A BaseException like ``JobTimeout``: catch it to clean up, then let it go."""


class JobFailed(Exception):
    """Raised by ``result()`` for a job dead-lettered (``state`` "failed", with ``error`` and
    ``traceback``) or cancelled."""

    def __init__(self, job_id: str, state: str, error: str | None, traceback: str | None = None) -> None:
        super().__init__(f"job {job_id!r} {state}" + (f": {error}" if error else ""))
        self.job_id = job_id
        self.state = state
        self.error = error
        self.traceback = traceback


class ResultGone(LookupError):
    """Raised by ``result()`` for a done job whose result is not kept (past its TTL or done's retention,
    or dropped because Redis was full at the ack)."""


class UnknownJob(LookupError):
    """Raised by ``result()`` for an id the queue does not know."""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One transition off the happy path (``Queue.history``)."""

    at: float  # Unix seconds, Redis clock
    kind: str  # lease lost, failed, timed out, handed back, cancelled, requeued
    worker: str  # host:pid of the worker that held the job (or of whoever acted: cancelled, requeued)
    detail: str


@dataclass(frozen=True, slots=True)
class Progress:
    """A running job's last progress report (``Lease.progress``)."""

    fraction: float
    at: float  # Unix seconds, Redis clock
    message: str


def encode_result(value: Any, most: int) -> str | None:
    """A return value as kept: None for None, ``"b"`` + base64 for bytes, ``"j"`` + JSON otherwise.
    TypeError when neither, ValueError when over ``most`` bytes."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        text = "b" + base64.b64encode(value).decode("ascii")
    else:
        try:
            text = "j" + json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"the result is neither bytes nor JSON-serialisable: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > most:
        raise ValueError(f"the result is {size:,} bytes, more than result_max_bytes ({most:,})")
    return text


def decode_result(text: str) -> Any:
    return base64.b64decode(text[1:]) if text.startswith("b") else json.loads(text[1:])


class JobTimeout(BaseException):
    """Raised in a job's thread when it runs past its timeout (an async job is cancelled instead). A
    BaseException so ``except Exception`` does not swallow it; catch it to clean up, then let it go."""
