"""The key layout of a queue in Redis: the one place that spells key names (described in
docs/reference.md#key-layout).

Every key of queue ``Q`` starts with ``setqueue:{Q}:``: a Redis Cluster hash tag, so a queue's keys
share one slot, where every Lua script can run."""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_ID_LENGTH = 1024
# The most ids one script call takes: bounds one call's run time, so the latency Redis adds for others.
MAX_IDS_PER_CALL = 500
# Higher runs first; lua/includes/rank.lua holds the same bounds.
MIN_PRIORITY, MAX_PRIORITY = -10, 10
MAX_SHARDS = 1024


# A job's rank in todos and in_progress (lua/includes/rank.lua).
RANK_BAND = 2**48
STATES = ("todos", "in_progress", "done", "failed", "scheduled", "cancelled")


def priority_of_rank(rank: float) -> int:
    return MAX_PRIORITY - int(rank // RANK_BAND)


def check_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def check_whole(name: str, value: int, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return value


def validate_priority(priority: int) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY} (higher runs first), got {priority}")
    return priority


def validate_queue_name(name: str) -> str:
    if not name or len(name) > 200:
        raise ValueError("queue name must be 1 to 200 characters")
    if any(c in name for c in "{}") or any(c.isspace() for c in name):
        raise ValueError(f"queue name {name!r} must not contain braces or white space")
    if "," in name:
        raise ValueError(f"queue name {name!r} must not contain a comma (a comma separates the names of queues)")
    return check_utf8("queue name", name)


def parse_queue_names(text: str) -> tuple[str, ...]:
    """QUEUE_NAME: one queue name, or several separated by commas (served in that order)."""
    names = tuple(name.strip() for name in text.split(","))
    for name in names:
        validate_queue_name(name)
    if len(set(names)) != len(names):
        raise ValueError(f"{text!r} names a queue twice")
    return names


def check_utf8(what: str, text: str) -> str:
    """Text Redis can store as UTF-8: no lone surrogates (what undecodable input bytes become)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {text!r} is not valid UTF-8 (an undecodable byte?)") from None
    return text


def validate_group(group: str) -> str:
    """A group name: 1 to MAX_ID_LENGTH chars of UTF-8, no braces, white space or control characters."""
    if not isinstance(group, str):
        raise TypeError(f"group must be a str, not {type(group).__name__}")
    if not group or len(group) > MAX_ID_LENGTH:
        raise ValueError(f"group name must be 1 to {MAX_ID_LENGTH} characters, got {len(group)}")
    if any(c in "{}" or c.isspace() or not c.isprintable() for c in group):
        raise ValueError(f"group name {group!r} must not contain braces, white space or control characters")
    check_utf8("group name", group)
    return group


def validate_job_id(job_id: str) -> str:
    if not isinstance(job_id, str):
        raise TypeError(f"job id must be a str, not {type(job_id).__name__}")
    if not job_id or len(job_id) > MAX_ID_LENGTH:
        raise ValueError(f"job id must be 1 to {MAX_ID_LENGTH} characters, got {len(job_id)}")
    if any(c in job_id for c in "\r\n\0"):
        raise ValueError(f"job id {job_id!r} must not contain line breaks or NUL")
    check_utf8("job id", job_id)
    return job_id


@dataclass(frozen=True)
class QueueKeys:
    """Names of every key queue ``name`` uses."""

    name: str

    def __post_init__(self) -> None:
        validate_queue_name(self.name)

    @property
    def prefix(self) -> str:
        return f"setqueue:{{{self.name}}}:"

    @property
    def todos(self) -> str:
        return self.prefix + "todos"

    @property
    def in_progress(self) -> str:
        return self.prefix + "in_progress"

    @property
    def done(self) -> str:
        return self.prefix + "done"

    @property
    def failed(self) -> str:
        return self.prefix + "failed"

    @property
    def cancelled(self) -> str:
        return self.prefix + "cancelled"

    @property
    def pending(self) -> str:
        return self.prefix + "pending"

    @property
    def attempts(self) -> str:
        return self.prefix + "attempts"

    @property
    def payloads(self) -> str:
        return self.prefix + "payloads"

    @property
    def results(self) -> str:
        return self.prefix + "results"

    @property
    def result_expiry(self) -> str:
        return self.prefix + "result_expiry"

    @property
    def history(self) -> str:
        return self.prefix + "history"

    @property
    def progress(self) -> str:
        return self.prefix + "progress"

    @property
    def ended_channel(self) -> str:
        return self.prefix + "ended"

    @property
    def cancel_channel(self) -> str:
        return self.prefix + "cancel"

    @property
    def options(self) -> str:
        return self.prefix + "options"

    @property
    def errors(self) -> str:
        return self.prefix + "errors"

    @property
    def owners(self) -> str:
        """Unlike the lock it does not expire: a worker past its lease can still ack while nobody took over."""
        return self.prefix + "owners"

    @property
    def done_log(self) -> str:
        return self.prefix + "done_log"

    @property
    def scheduled(self) -> str:
        return self.prefix + "scheduled"

    @property
    def finished(self) -> str:
        return self.prefix + "finished"

    @property
    def periodic(self) -> str:
        return self.prefix + "periodic"

    @property
    def schedules(self) -> str:
        return self.prefix + "schedules"

    @property
    def seq(self) -> str:
        return self.prefix + "seq"

    @property
    def priorities(self) -> str:
        return self.prefix + "priorities"

    @property
    def shards(self) -> str:
        return self.prefix + "shards"

    @property
    def swept(self) -> str:
        return self.prefix + "swept"

    # -- flow control (setqueue.flow)

    @property
    def flow(self) -> str:
        return self.prefix + "flow"

    @property
    def grouped(self) -> str:
        return self.prefix + "grouped"

    @property
    def group_lines(self) -> str:
        return self.prefix + "group_lines"

    @property
    def group_of(self) -> str:
        return self.prefix + "group_of"

    @property
    def groups_ready(self) -> str:
        return self.prefix + "groups_ready"

    @property
    def groups_resting(self) -> str:
        return self.prefix + "groups_resting"

    @property
    def groups_full(self) -> str:
        return self.prefix + "groups_full"

    @property
    def group_running(self) -> str:
        return self.prefix + "group_running"

    @property
    def group_limits(self) -> str:
        return self.prefix + "group_limits"

    @property
    def group_buckets(self) -> str:
        return self.prefix + "group_buckets"

    @property
    def wake(self) -> str:
        return self.prefix + "wake"

    # -- the registry of live workers (setqueue.registry)

    @property
    def workers(self) -> str:
        return self.prefix + "workers"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}worker:{worker_id}"

    # -- auditing (AUDIT=true: chaos runs; see setqueue.runtime.audit)

    @property
    def audit_created(self) -> str:
        return self.prefix + "audit:created"

    @property
    def audit_successes(self) -> str:
        return self.prefix + "audit:successes"

    @property
    def audit_failures(self) -> str:
        return self.prefix + "audit:failures"

    @property
    def audit_lease_lost(self) -> str:
        return self.prefix + "audit:lease_lost"

    def audit_run(self, token: str, job_id: str) -> str:
        return f"{self.prefix}audit:run:{token}:{job_id}"

    def lock(self, token: str) -> str:
        return f"{self.prefix}lock:{token}"

    def request(self, request_id: str) -> str:
        return f"{self.prefix}req:{request_id}"
