"""What a job is to the code around it: the lease a handler is given, what the queue's calls return, and
the exceptions a handler raises to steer its job. Plain data: nothing here talks to Redis, so a handler
module (and the worker's engine) can import it alone."""

from __future__ import annotations

import base64
import enum
import json
import json.scanner
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from setqueue.keys import validate_job_id, validate_priority, validate_queue_name

# -- dependencies (docs/guide.md#dependencies): what a caller names, inspect shows and a lease reads


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job of any queue of the same Redis (or Cluster), to depend on: ``queue`` is the queue's name
    (a sharded queue's own name: the shard is found from the id). ValueError for a bad name or id."""

    queue: str
    id: str

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        validate_job_id(self.id)


@dataclass(frozen=True, slots=True)
class Link:
    """One end of a dependency, as inspect shows it: the ``queue`` (or shard) that holds the job, its
    ``id``, and its ``state`` now (one of ``keys.STATES``; None: no longer known, trimmed by retention or
    deleted)."""

    queue: str
    id: str
    state: str | None


@dataclass(frozen=True, slots=True)
class WaitProgress:
    """How far a job enqueued with dependencies got: how many it has, and how many ended each way."""

    total: int
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    deleted: int = 0
    unknown: int = 0  # trimmed by retention, or deleted, before the job registered with it

    @property
    def ended(self) -> int:
        """How many of its dependencies ended, whichever way."""
        return self.done + self.failed + self.cancelled + self.deleted + self.unknown


@dataclass(frozen=True, slots=True)
class DependencyResult:
    """One dependency of a job, as its handler reads it (``Lease.dependencies``): where it is, how it
    ended (``outcome``: done, failed, cancelled, deleted or unknown; None: not ended, which only a job
    released by hand sees), and ``result``: what its handler returned (None: nothing, not kept, or not
    done); ``error``: the reason it failed, if it did."""

    queue: str
    id: str
    outcome: str | None
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on one job, what ``claim`` returns and a handler is given. ``token`` names the claim and
    proves ownership: ack, fail, renew and progress change nothing once another claim owns the job.
    ``attempt`` counts claims (1 = the first). All times are Unix seconds by the Redis clock."""

    id: str
    token: str
    attempt: int
    payload: str | None  # the text stored at enqueue (None: enqueued without one)
    enqueued_at: float | None  # when it joined the line: enqueued, or due if it was scheduled; None: unknown
    claimed_at: float  # the claim's time
    priority: int = 0  # -10 to 10, higher runs first
    queue: str = ""  # the name of the queue it came from
    max_attempts: int | None = None  # the job's own, given at enqueue (None: the queue's)
    timeout: float | None = None  # seconds; the job's own, given at enqueue (None: the worker's; 0: none)
    trace_parent: str | None = None  # W3C traceparent of the span that enqueued it (setqueue.tracing)
    retry_timeouts: bool | None = None  # the job's own: a timeout retried, or dead-lettered (None: the worker's)
    task: TaskCall | None = None  # its payload read as a task call (None: not one)
    # Keeps what the handler says of its progress (the queue it was claimed from binds it).
    reporter: Callable[[Lease, float, str], bool] | None = field(default=None, compare=False, repr=False)
    # Reads its dependencies' outcomes and results (a blocking queue binds it; setqueue.aio: none).
    linker: Callable[[str], list[DependencyResult]] | None = field(default=None, compare=False, repr=False)

    @property
    def queue_wait_seconds(self) -> float | None:
        """Seconds from joining the line to this claim (never negative), or None when the enqueue time is
        not known."""
        return None if self.enqueued_at is None else max(0.0, self.claimed_at - self.enqueued_at)

    def progress(self, fraction: float, message: str = "") -> bool:
        """Say how far the job got (``fraction`` from 0 to 1, and a few words: line breaks become spaces,
        at most 200 characters kept): ``inspect`` and the console show it. True when kept, False when this
        lease no longer owns the job (lost, or cancelled). ValueError for a fraction outside 0..1,
        RuntimeError for a lease not claimed from a queue (nowhere to report to)."""
        if not (isinstance(fraction, int | float) and 0 <= fraction <= 1):
            raise ValueError(f"progress must be a fraction from 0 to 1, got {fraction!r}")
        if self.reporter is None:
            raise RuntimeError(f"the lease of {self.id!r} was not claimed from a queue: nowhere to report to")
        return self.reporter(self, float(fraction), message.replace("\n", " ")[:200])

    def dependencies(self) -> list[DependencyResult]:
        """The job's dependencies in the order given (``depends_on``), each with how it ended and what its
        handler returned: what a callback combines (docs/guide.md#dependencies). Empty for a job without
        any. RuntimeError for a lease not claimed from a blocking queue: with ``setqueue.aio``, call
        ``await queue.dependencies(lease.id)``."""
        if self.linker is None:
            raise RuntimeError(f"the lease of {self.id!r} cannot read its dependencies: use queue.dependencies(id)")
        return self.linker(self.id)

    def json(self) -> Any:
        """The payload read as JSON (what ``enqueue`` stored for a dict, a list or a number). ``PayloadError``
        (a ValueError, and a PermanentJobError: the worker dead-letters the job at once, as it would never
        decode) when the job has no payload or it is not JSON, naming the job and what is wrong."""
        if self.payload is None:
            raise PayloadError(self.id, "it has no payload")
        try:
            return json.loads(self.payload)
        except json.JSONDecodeError as exc:
            raise PayloadError(self.id, f"its payload is not JSON: {exc}") from None


def job_options(
    max_attempts: int | None,
    timeout: float | None,
    trace_parent: str | None = None,
    retry_timeouts: bool | None = None,
) -> str:
    """A job's own options as the options hash keeps them: ``"<max attempts>|<timeout ms>"`` (a part left
    empty for None: the queue's or the worker's default), then ``"|<traceparent>"`` when the enqueue ran in
    a traced span, then ``"|1"`` or ``"|0"`` when the job says whether a timeout is retried; "" when it has
    none of them. ``max_attempts``: 1 to 1,000; ``timeout``: 0 (none) to 30 days in seconds. ValueError for
    a bad one, naming it. The Lua scripts read only the leading number."""
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or not 1 <= max_attempts <= 1000
    ):
        raise ValueError(f"max_attempts must be a whole number from 1 to 1000, got {max_attempts!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 <= timeout <= 30 * 86400
    ):
        raise ValueError(f"timeout must be from 0 (none) to 2592000 seconds, got {timeout!r}")
    if retry_timeouts is not None and not isinstance(retry_timeouts, bool):
        raise ValueError(f"retry_timeouts must be True, False or None, got {retry_timeouts!r}")
    parts = [
        "" if max_attempts is None else str(max_attempts),
        "" if timeout is None else str(round(timeout * 1000)),
        trace_parent or "",
        "" if retry_timeouts is None else str(int(retry_timeouts)),
    ]
    while len(parts) > 2 and not parts[-1]:
        parts.pop()
    return "|".join(parts) if any(parts) else ""


def parse_job_options(stored: str | None) -> tuple[int | None, float | None]:
    """(max attempts, timeout in seconds) of a stored ``job_options`` text; None for a part not given (the
    default), and (None, None) for None or "". The traceparent is ``parse_trace_parent``'s, the timeout
    policy ``parse_retry_timeouts``'s."""
    if not stored:
        return None, None
    most, _, rest = stored.partition("|")
    timeout_ms = rest.partition("|")[0]
    return (int(most) if most else None), (int(timeout_ms) / 1000 if timeout_ms else None)


def parse_trace_parent(stored: str | None) -> str | None:
    """The traceparent kept in a stored ``job_options`` text (its third part), or None when it has none."""
    parts = (stored or "").split("|")
    return parts[2] or None if len(parts) >= 3 else None


def parse_retry_timeouts(stored: str | None) -> bool | None:
    """Whether the job's own options say a timeout is retried (their fourth part), or None: the worker's
    RETRY_TIMEOUTS decides."""
    parts = (stored or "").split("|")
    return parts[3] == "1" if len(parts) >= 4 and parts[3] else None


@dataclass(frozen=True, slots=True)
class AckResult:
    """What ``ack_many`` says of one lease."""

    acked: bool  # False: the lease was stale and nothing changed
    end_to_end_seconds: float | None  # joining the line -> done, by the Redis clock, when known


class RenewOutcome(enum.StrEnum):
    """What renewing one lease did (``renew_outcomes``)."""

    RENEWED = "renewed"  # the lease goes on
    LOST = "lost"  # its lock expired, or another claim owns the job now
    CANCELLED = "cancelled"  # lost because the job was cancelled: stop running it


class FailOutcome(enum.StrEnum):
    """What ``fail`` or ``release`` did with one lease."""

    RETRIED = "retried"  # to be tried again: at the back of its priority's line, or scheduled after a delay
    DEAD = "dead"  # moved into failed (dead-lettered)
    RELEASED = "released"  # back in its old place in the line without using up an attempt
    STALE = "stale"  # the lease was no longer ours; nothing changed


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one ``sweep`` did."""

    requeued: list[str]  # in_progress ids whose lock was gone, back in their place in the line
    dead_lettered: list[str]  # ... moved into failed instead: that claim was their last attempt
    done_trimmed: int  # ids dropped from done (and cancelled) by the age retention

    @property
    def total(self) -> int:
        """Ids moved out of in_progress: requeued plus dead-lettered."""
        return len(self.requeued) + len(self.dead_lettered)


# A failed job's error may go on with the traceback of its failure, from this line on.
TRACEBACK_MARK = "\nTraceback (most recent call last):\n"


@dataclass(frozen=True, slots=True)
class JobInfo:
    """Everything the queue knows of one job, in one snapshot (``inspect``). Times are Unix seconds by the
    Redis clock; None is "not known" or "does not apply", never 0."""

    id: str
    queue: str  # the name of the queue that holds it (a sharded queue's name, not its shard's)
    state: str  # one of keys.STATES: todos, in_progress, done, failed, scheduled, cancelled or waiting
    priority: int | None  # -10 to 10; None: not known (a job in done or cancelled)
    attempts: int | None  # claims so far (0: never claimed); None: not known
    payload: str | None
    error: str | None  # the reason of its last failure (first line: repr of the exception)
    enqueued_at: float | None  # when it was first enqueued (kept through retries, backoffs and requeues)
    done_at: float | None  # when it was acked into done (done only)
    due_at: float | None  # when it may run: scheduled, when it becomes due; waiting or running, when it
    # joined the line (its enqueue, its due time, or a retry's or requeue's); None once it ended
    finished_at: float | None  # when it reached done, failed or cancelled
    lock_token: str | None  # in progress: the token of the claim that owns it, while its lock lives
    lock_ttl_seconds: float | None  # ... and the time left on that lock
    max_attempts: int | None = None  # the job's own, given at enqueue (None: the queue's)
    timeout: float | None = None  # seconds; the job's own (None: the worker's)
    traceback: str | None = None  # of its last failure, when the handler raised
    trace_parent: str | None = None  # W3C traceparent of the span that enqueued it, until it is acked
    history: tuple[HistoryEntry, ...] = ()  # its transitions off the happy path, oldest first (the last ten)
    progress: Progress | None = None  # what its handler last said
    result: Any = None  # what its handler returned, while kept (see result_kept)
    result_kept: bool = False  # a result is kept: False for none, or one gone
    group: str | None = None  # the job group it was enqueued in (kept until it is done or cancelled)
    retry_timeouts: bool | None = None  # the job's own: a timeout retried, or dead-lettered (None: the worker's)
    task: TaskCall | None = None  # its payload read as a task call (None: not one)
    # Its dependencies, in the order given, and jobs that wait for it (each at most records.LINKS_SHOWN),
    # with their states now (docs/guide.md#dependencies).
    depends_on: tuple[Link, ...] = ()
    dependents: tuple[Link, ...] = ()
    waiting_on: WaitProgress | None = None  # how many of its dependencies ended, how (None: it has none)
    if_dependency_fails: str | None = None  # "fail" or "run" (None: it has no dependencies)


class PermanentJobError(Exception):
    """Raise from a job handler to dead-letter the job at once, without retries."""


# The task envelope (docs/reference.md#the-task-envelope): a task call's payload is a JSON object
# {"task": NAME, "args": [...], "kwargs": {...}, "v": ENVELOPE_VERSION}, with no other keys.
ENVELOPE_VERSION = 1
ENVELOPE_KEYS = frozenset({"task", "args", "kwargs", "v"})


@dataclass(frozen=True, slots=True)
class TaskCall:
    """A job's payload read as a task call: the task's name and its arguments."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]


def read_envelope(payload: str | None) -> TaskCall | None:
    """The task call a payload holds, or None for a payload that is not one (not a JSON object with a
    ``task`` key and no keys but the envelope's). One that says it is a task call but is malformed (a
    ``v`` other than ENVELOPE_VERSION, args not a list, kwargs not an object) raises PermanentJobError:
    no retry makes it right."""
    parts = envelope_parts(payload)
    return None if parts is None else TaskCall(*parts)


# json's own scanner, called without ``json.loads``' layers around it: a worker serving a registry reads
# an envelope on every run, and the scanner alone takes about half the instructions of ``loads``. (The
# type stub asks for a scanner as its argument; the decoder is the context it really takes.)
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_JSON_WHITE_SPACE = " \t\n\r"  # what JSON allows around a value (``str.strip()`` would take more)


def envelope_parts(payload: str | None) -> tuple[str, list[Any], dict[str, Any]] | None:
    """``read_envelope``'s answer as (name, args, kwargs), without building a TaskCall: what a worker's
    registry reads on every run. None and PermanentJobError as there."""
    if payload is None or not payload.startswith("{"):
        return None
    try:
        call, end = _scan_json(payload, 0)
    except (StopIteration, ValueError):  # StopIteration: no value at all; ValueError: a broken one
        return None
    if end != len(payload) and payload[end:].strip(_JSON_WHITE_SPACE):  # more after the object
        return None
    if "task" not in call or not call.keys() <= ENVELOPE_KEYS:  # an object: the payload starts with "{"
        return None
    if call.get("v", ENVELOPE_VERSION) != ENVELOPE_VERSION:
        raise PermanentJobError(f"task call of envelope version {call['v']!r}; this worker reads {ENVELOPE_VERSION}")
    name, args, kwargs = call["task"], call.get("args", []), call.get("kwargs", {})
    if type(name) is not str or type(args) is not list or type(kwargs) is not dict:  # JSON makes exact types
        raise PermanentJobError("malformed task call: task must be a string, args a list, kwargs an object")
    return name, args, kwargs


class PayloadError(PermanentJobError, ValueError):
    """``Lease.json()`` on a job with no payload, or one that is not JSON: it never will be, so the job is
    dead-lettered at once. Also a ValueError, as ``json()`` raised before."""

    def __init__(self, job_id: str, problem: str) -> None:
        super().__init__(f"job {job_id!r}: {problem}")
        self.job_id = job_id


class RetryLater(Exception):
    """Raise from a job handler to fail this attempt and retry the job after ``seconds`` (it uses an
    attempt like any failure; once attempts are used up the job is dead-lettered). ``reason`` becomes its
    error (default "retry in <seconds>s"). ValueError when ``seconds`` is not a finite number >= 0."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"RetryLater needs a finite number of seconds >= 0, got {seconds!r}")
        super().__init__(reason or f"retry in {seconds:g}s")
        self.seconds = float(seconds)


class MoveTo(Exception):
    """Raise from a job handler to move the job to another queue: the worker enqueues it there (same id,
    same payload, ``priority``) and then acks it here, so it runs there next. At least once: a worker that
    dies in between leaves it here to run again, and enqueue there is idempotent. ValueError (or
    TypeError) for a bad queue name or priority, at once where it is raised."""

    def __init__(self, queue: str, priority: int = 0) -> None:
        validate_queue_name(queue)
        validate_priority(priority)
        super().__init__(f"moved to queue {queue}")
        self.queue = queue
        self.priority = priority


class JobCancelled(BaseException):
    """Raised in a job's thread when the job is cancelled while it runs (an async job's task is cancelled
    instead). Like ``JobTimeout`` a BaseException: catch it to clean up, then let it go."""


class JobFailed(Exception):
    """What ``result()`` raises for a job that ended without a result: dead-lettered (``state`` "failed",
    with its ``error`` and ``traceback``) or cancelled (``state`` "cancelled")."""

    def __init__(self, job_id: str, state: str, error: str | None, traceback: str | None = None) -> None:
        super().__init__(f"job {job_id!r} {state}" + (f": {error}" if error else ""))
        self.job_id = job_id
        self.state = state
        self.error = error
        self.traceback = traceback


class ResultGone(LookupError):
    """What ``result()`` raises for a job that is done and returned a value, but whose result is not kept:
    past the result TTL (a sweep dropped it), or never written because Redis was full (out of memory) when
    the job was acked. (Once done's retention drops the id itself, the queue no longer knows it:
    ``UnknownJob``.)"""


class UnknownJob(LookupError):
    """What ``result()`` raises for an id the queue does not know (never enqueued, deleted, or dropped by
    done's retention)."""


def unknown_dependency(queue: str, job_id: str) -> UnknownJob:
    """The UnknownJob an enqueue raises for dependency ``job_id`` of ``queue`` (or shard) that it does not
    know."""
    return UnknownJob(
        f"dependency {job_id!r} is not in queue {queue!r} (never enqueued, deleted, or trimmed from done by "
        "its retention)"
    )


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One transition of a job off the happy path (``Queue.history``, ``JobInfo.history``)."""

    at: float  # Unix seconds, Redis clock
    kind: str  # lease lost, failed, timed out, handed back, cancelled, requeued
    worker: str  # host:pid of the worker that held the job (or of whoever acted: cancelled, requeued)
    detail: str  # at most 200 characters


@dataclass(frozen=True, slots=True)
class Progress:
    """What a running job's handler last said of its progress (``Lease.progress``)."""

    fraction: float  # 0 to 1
    at: float  # Unix seconds, Redis clock
    message: str


def encode_result(value: Any, most: int) -> str | None:
    """A handler's return value as the queue keeps it: None for None (nothing kept), ``"b"`` and base64
    for bytes, ``"j"`` and JSON for anything else. TypeError when it is neither bytes nor JSON-serialisable
    (NaN and infinities included), ValueError when the text is larger than ``most`` bytes."""
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
    """The value ``encode_result`` kept: bytes for ``"b"`` text, else what its JSON reads as (a tuple
    comes back a list)."""
    return base64.b64decode(text[1:]) if text.startswith("b") else json.loads(text[1:])


class JobTimeout(BaseException):
    """Raised in a job's thread when it runs past its timeout (an async job is cancelled instead). A
    BaseException, as Dramatiq's time limit is, so that a handler's ``except Exception`` does not swallow
    it; catch it to clean up, then let it go."""
