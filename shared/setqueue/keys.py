"""The key layout of a queue in Redis: the one place that spells and describes key names.

Every key of queue ``Q`` starts with ``setqueue:{Q}:``: a Redis Cluster hash tag, so a queue's keys
share one slot, where every Lua script can run."""

from __future__ import annotations

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
        """ZSET id -> rank of ids waiting to be claimed, in line: claims take the lowest rank
        (highest priority, then earliest place; see lua/includes/rank.lua)."""
        return self.prefix + "todos"

    @property
    def in_progress(self) -> str:
        """ZSET id -> rank of claimed ids: their todos rank, kept when they go back through no fault of theirs."""
        return self.prefix + "in_progress"

    @property
    def done(self) -> str:
        """SET of ids finished successfully (bounded by the retention)."""
        return self.prefix + "done"

    @property
    def failed(self) -> str:
        """SET of dead-lettered ids."""
        return self.prefix + "failed"

    @property
    def cancelled(self) -> str:
        """SET of cancelled ids, never run again (kept by done's retention)."""
        return self.prefix + "cancelled"

    @property
    def pending(self) -> str:
        """ZSET id -> enqueue time (ms, Redis clock) of ids in todos or in_progress."""
        return self.prefix + "pending"

    @property
    def attempts(self) -> str:
        """HASH id -> how many times it was claimed."""
        return self.prefix + "attempts"

    @property
    def payloads(self) -> str:
        """HASH id -> payload, for jobs enqueued with one."""
        return self.prefix + "payloads"

    @property
    def results(self) -> str:
        """HASH id -> what a done job's handler returned ("j" + JSON or "b" + base64), kept the result TTL."""
        return self.prefix + "results"

    @property
    def result_expiry(self) -> str:
        """ZSET id -> when its result expires (ms); sweeps drop expired ones."""
        return self.prefix + "result_expiry"

    @property
    def history(self) -> str:
        """HASH id -> the last ten off-happy-path transitions, "<ms>\t<kind>\t<worker>\t<detail>" a line."""
        return self.prefix + "history"

    @property
    def progress(self) -> str:
        """HASH id -> "<fraction>|<ms>|<message>": what a running job's handler last reported."""
        return self.prefix + "progress"

    @property
    def ended_channel(self) -> str:
        """Pub/Sub channel: "done\n<id>..." (likewise "failed", "cancelled"), for result waiters."""
        return self.prefix + "ended"

    @property
    def cancel_channel(self) -> str:
        """Pub/Sub channel: ids of running jobs just cancelled, for their workers."""
        return self.prefix + "cancel"

    @property
    def options(self) -> str:
        """HASH id -> "<max attempts>|<timeout ms>" (empty part: default) of a job with its own."""
        return self.prefix + "options"

    @property
    def errors(self) -> str:
        """HASH id -> the last fail's (or lease expiry's) reason."""
        return self.prefix + "errors"

    @property
    def owners(self) -> str:
        """HASH id -> token of the claim owning an in_progress id; ack and fail check it. It does not expire,
        so a worker past its lease can still ack while nobody took over; the lock carries the TTL."""
        return self.prefix + "owners"

    @property
    def done_log(self) -> str:
        """ZSET id -> done time (ms): done's retention trims by count and age."""
        return self.prefix + "done_log"

    @property
    def scheduled(self) -> str:
        """ZSET id -> due time (ms) of delayed jobs and backed-off retries; claim and sweep promote due ones."""
        return self.prefix + "scheduled"

    @property
    def finished(self) -> str:
        """HASH id -> "<enqueued ms>:<finished ms>:<attempts>[:1]" of an ended id, kept as long as the id
        (attempts drops its entry then)."""
        return self.prefix + "finished"

    @property
    def periodic(self) -> str:
        """HASH schedule -> slot (ms) of its latest run created: a run only for a later slot, once."""
        return self.prefix + "periodic"

    @property
    def schedules(self) -> str:
        """HASH schedule -> cron expression of the periodic jobs in force (SCHEDULES, ``setqueue
        schedules``, the API)."""
        return self.prefix + "schedules"

    @property
    def seq(self) -> str:
        """STRING counter: the last place in line given out."""
        return self.prefix + "seq"

    @property
    def priorities(self) -> str:
        """HASH id -> non-zero priority of a scheduled or failed job (elsewhere it is in the rank)."""
        return self.prefix + "priorities"

    @property
    def shards(self) -> str:
        """STRING: the shard count Q was first opened with, if more than one; another is refused (ids would move)."""
        return self.prefix + "shards"

    @property
    def swept(self) -> str:
        """STRING: the last sweep (ms), by a cleaner or a worker standing in; TTL a day."""
        return self.prefix + "swept"

    # -- flow control (setqueue.flow; lua/claim.lua enforces it, docs/guide.md#flow-control)

    @property
    def flow(self) -> str:
        """HASH of flow control, read by every claim: ``paused``, ``rate`` ("<count> <period ms> <burst>"),
        ``tat`` (its GCRA state, ms), ``group_concurrency`` and ``group_rate`` (groups' defaults),
        ``grouped`` ("1" once a job had a group), ``turn`` (the last turn in groups_ready)."""
        return self.prefix + "flow"

    @property
    def grouped(self) -> str:
        """ZSET id -> rank of waiting jobs with a group (with todos, the todos state); each also in group_lines."""
        return self.prefix + "grouped"

    @property
    def group_lines(self) -> str:
        """ZSET (scores 0) of "<group>\\0<rank, 14 hex>\\0<id>" per waiting grouped job: ZRANGE BYLEX reads
        one group's front in rank order without scanning others."""
        return self.prefix + "group_lines"

    @property
    def group_of(self) -> str:
        """HASH id -> its group, until done, cancelled or deleted."""
        return self.prefix + "group_of"

    @property
    def groups_ready(self) -> str:
        """ZSET group -> turn: groups that may start a job now; claims serve the front and send it to the
        back. Member "": the ungrouped jobs' turn."""
        return self.prefix + "groups_ready"

    @property
    def groups_resting(self) -> str:
        """ZSET group -> when (ms) its rate allows another start."""
        return self.prefix + "groups_resting"

    @property
    def groups_full(self) -> str:
        """SET of waiting groups with their concurrency in progress, until a job of theirs ends."""
        return self.prefix + "groups_full"

    @property
    def group_running(self) -> str:
        """HASH group -> its jobs in progress (none: no field)."""
        return self.prefix + "group_running"

    @property
    def group_limits(self) -> str:
        """HASH group -> its own "<concurrency>|<count> <period ms> <burst>" (empty part: the default)."""
        return self.prefix + "group_limits"

    @property
    def group_buckets(self) -> str:
        """ZSET group -> its rate's GCRA time (ms); a past one equals no entry, so sweeps drop those."""
        return self.prefix + "group_buckets"

    @property
    def wake(self) -> str:
        """LIST idle workers BLPOP; enqueue and others push to wake them."""
        return self.prefix + "wake"

    # -- the registry of live workers (setqueue.registry; the console reads it)

    @property
    def workers(self) -> str:
        """ZSET worker id -> last heartbeat (ms, worker clock): an index of ``worker`` keys; an hour old is trimmed."""
        return self.prefix + "workers"

    def worker(self, worker_id: str) -> str:
        """STRING (JSON), TTL three heartbeats: one live worker (host, pid, queues, slots, jobs held)."""
        return f"{self.prefix}worker:{worker_id}"

    # -- auditing (AUDIT=true: chaos runs; see setqueue.runtime.audit)

    @property
    def audit_created(self) -> str:
        """HASH creator id prefix -> n: that creator enqueued the ids <prefix>-1 .. <prefix>-n."""
        return self.prefix + "audit:created"

    @property
    def audit_successes(self) -> str:
        """HASH id -> runs of the job that succeeded (the demo handler returned)."""
        return self.prefix + "audit:successes"

    @property
    def audit_failures(self) -> str:
        """HASH id -> runs of the job that failed (the demo handler raised)."""
        return self.prefix + "audit:failures"

    @property
    def audit_lease_lost(self) -> str:
        """HASH id -> times it went back to the line while a run may have gone on (swept, or handed back
        still running at shutdown): each allows one more successful run."""
        return self.prefix + "audit:lease_lost"

    def audit_run(self, token: str, job_id: str) -> str:
        """STRING, short TTL: this run under ``token`` is recorded (a resend counts once)."""
        return f"{self.prefix}audit:run:{token}:{job_id}"

    def lock(self, token: str) -> str:
        """STRING: one claim's lease: its jobs still held, with the lease TTL. Renewing extends them all;
        the cleaner requeues in_progress ids whose claim's lock is gone."""
        return f"{self.prefix}lock:{token}"

    def request(self, request_id: str) -> str:
        """STRING: one script call's result, briefly (idempotent resends)."""
        return f"{self.prefix}req:{request_id}"
