"""The key layout of a queue in Redis: the one place that spells key names.

Every key of queue ``Q`` starts with ``setqueue:{Q}:``. The braces are a Redis Cluster hash
tag, so all keys of one queue live in one slot and every Lua script can run there.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_ID_LENGTH = 1024
# The most ids one script call takes (the largest claim, and the chunk size of every batched call):
# it bounds one call's run time, and so the latency Redis adds for everyone else.
MAX_IDS_PER_CALL = 500
# Job priorities: higher runs first, 0 is the default. lua/includes/rank.lua holds the same bounds.
MIN_PRIORITY, MAX_PRIORITY = -10, 10
# The most shards of one queue (setqueue.sharded).
MAX_SHARDS = 1024


# The rank of a job in todos and in_progress (lua/includes/rank.lua): (MAX_PRIORITY - priority) *
# RANK_BAND + its place in line.
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
    """A job group's name (``enqueue(..., group=)``): like an id, 1 to MAX_ID_LENGTH characters of
    UTF-8 text, and no braces, white space or control characters, so that it shows as one word
    in ``setqueue groups`` and never touches a key's hash tag."""
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
        """ZSET id -> rank of ids claimed by a worker: the rank they had in todos, which they keep
        when they go back without their fault (lease lost, handed back, released)."""
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
        """SET of cancelled ids: a job cancelled before it ended, never run again (kept, like
        done, by the retention)."""
        return self.prefix + "cancelled"

    @property
    def pending(self) -> str:
        """ZSET id -> enqueue time (ms, Redis clock) of ids in todos or in_progress."""
        return self.prefix + "pending"

    @property
    def attempts(self) -> str:
        """HASH id -> how many times the id has been claimed."""
        return self.prefix + "attempts"

    @property
    def payloads(self) -> str:
        """HASH id -> payload, for jobs enqueued with one."""
        return self.prefix + "payloads"

    @property
    def results(self) -> str:
        """HASH id -> what the handler of a job in done returned ("j" + JSON text, or "b" + base64
        of bytes), kept for the result TTL (result_expiry) and with done's retention."""
        return self.prefix + "results"

    @property
    def result_expiry(self) -> str:
        """ZSET id -> when its result expires (ms, Redis clock): sweeps drop expired results."""
        return self.prefix + "result_expiry"

    @property
    def history(self) -> str:
        """HASH id -> the job's transitions off the happy path, one line each ("<ms>\t<kind>\t<worker>
        \t<detail>": lease lost and swept, failed, retried, timed out, handed back, released,
        cancelled, requeued), the last ten kept, gone with the job."""
        return self.prefix + "history"

    @property
    def progress(self) -> str:
        """HASH id -> "<fraction>|<ms>|<message>": what a running job's handler last reported."""
        return self.prefix + "progress"

    @property
    def ended_channel(self) -> str:
        """Pub/Sub channel (no key): the ids that ended ("done\n<id>..." and likewise "failed",
        "cancelled"), for whoever waits on a result."""
        return self.prefix + "ended"

    @property
    def cancel_channel(self) -> str:
        """Pub/Sub channel (no key): the ids of running jobs just cancelled, for their workers."""
        return self.prefix + "cancel"

    @property
    def options(self) -> str:
        """HASH id -> "<max attempts>|<timeout ms>" of a job enqueued with options of its own (either
        part empty: the default), from enqueue until it is acked or deleted."""
        return self.prefix + "options"

    @property
    def errors(self) -> str:
        """HASH id -> the reason given by the last fail (or lease expiry)."""
        return self.prefix + "errors"

    @property
    def owners(self) -> str:
        """HASH id -> lease token of the claim that owns an in_progress id: ack and fail check it.
        Unlike the lock it does not expire, so a worker whose lease ran out can still ack while
        nobody took over; the claim's lock only carries the TTL that the cleaner and renewals
        look at."""
        return self.prefix + "owners"

    @property
    def done_log(self) -> str:
        """ZSET id -> done time (ms), which the retention of done trims by count and age."""
        return self.prefix + "done_log"

    @property
    def scheduled(self) -> str:
        """ZSET id -> due time (ms, Redis clock) of ids that become claimable later (delayed
        enqueue, retry backoff); claim and the cleaner's sweep move due ones into todos."""
        return self.prefix + "scheduled"

    @property
    def finished(self) -> str:
        """HASH id -> "<enqueued ms>:<finished ms>:<attempts>" (Redis clock; enqueued empty if
        unknown) of an id in done or failed, kept as long as the id is, so that inspect can tell
        when a finished job was enqueued and finished and how many claims it took (its entry in
        attempts goes when it finishes)."""
        return self.prefix + "finished"

    @property
    def periodic(self) -> str:
        """HASH schedule name -> slot time (ms, UTC) of the latest run of that periodic schedule the
        cleaners created: a run is created only for a later slot, once, however many cleaners run."""
        return self.prefix + "periodic"

    @property
    def schedules(self) -> str:
        """HASH schedule name -> cron expression: the periodic jobs in force (SCHEDULES registers
        its own at the cleaner's start; ``setqueue schedules add|remove`` and the API change them),
        which every cleaner creates the runs of and the command line lists."""
        return self.prefix + "schedules"

    @property
    def seq(self) -> str:
        """STRING counter: the last place in line given out (a job's place orders it within its
        priority; enqueue, promotion and retries take the next ones)."""
        return self.prefix + "seq"

    @property
    def priorities(self) -> str:
        """HASH id -> priority of a scheduled or failed job whose priority is not 0 (in todos and
        in_progress the priority is part of the rank)."""
        return self.prefix + "priorities"

    @property
    def shards(self) -> str:
        """STRING: how many shards queue Q was first opened with, written only when more than one
        (setqueue.sharded); opening it with another number is refused, since ids would change shard."""
        return self.prefix + "shards"

    @property
    def swept(self) -> str:
        """STRING: when the queue was last swept (ms, Redis clock), by a cleaner or a worker standing
        in for one: a worker sweeps itself when nobody has for a while."""
        return self.prefix + "swept"

    # -- flow control (setqueue.flow; lua/claim.lua enforces it, docs/guide.md#flow-control) ----------

    @property
    def flow(self) -> str:
        """HASH of the queue's flow control, read by every claim: ``paused`` ("1" while paused),
        ``rate`` ("<count> <period ms> <burst>": at most that many starts a period), ``tat`` (the
        rate's state: its theoretical arrival time in ms, GCRA), ``group_concurrency`` and
        ``group_rate`` (every group's limits unless it has its own), ``grouped`` ("1" once a job
        had a group) and ``turn`` (the last turn given in groups_ready)."""
        return self.prefix + "flow"

    @property
    def grouped(self) -> str:
        """ZSET id -> rank of waiting jobs that have a group: with todos (the jobs without one), the
        todos state. Each is also in its group's line (group_lines)."""
        return self.prefix + "grouped"

    @property
    def group_lines(self) -> str:
        """ZSET, every score 0, of "<group>\\0<rank, 14 hex digits>\\0<id>" for each waiting job
        that has a group: in lexicographic order, each group's jobs lie together in rank order, so
        a claim reads the front of one group's line with ZRANGE BYLEX and never scans another's."""
        return self.prefix + "group_lines"

    @property
    def group_of(self) -> str:
        """HASH id -> the group of a job enqueued with one (until it is done, cancelled or deleted)."""
        return self.prefix + "group_of"

    @property
    def groups_ready(self) -> str:
        """ZSET group -> turn: the line of groups that have jobs waiting and may start one now;
        claims serve the front and send a group that took jobs to the back. The member "" is the
        turn of the jobs without a group, while groups are in use."""
        return self.prefix + "groups_ready"

    @property
    def groups_resting(self) -> str:
        """ZSET group -> when (ms) its rate lets it start another job: groups with jobs waiting that
        used up their rate; claims move them back to groups_ready when the time comes."""
        return self.prefix + "groups_resting"

    @property
    def groups_full(self) -> str:
        """SET of groups with jobs waiting that have their concurrency in progress: a job of theirs
        ending sends them back to groups_ready."""
        return self.prefix + "groups_full"

    @property
    def group_running(self) -> str:
        """HASH group -> its jobs in progress (groups with none have no field)."""
        return self.prefix + "group_running"

    @property
    def group_limits(self) -> str:
        """HASH group -> "<concurrency>|<count> <period ms> <burst>" (either part empty: the
        default in flow) for groups given limits of their own."""
        return self.prefix + "group_limits"

    @property
    def group_buckets(self) -> str:
        """ZSET group -> the theoretical arrival time (ms) of its rate (GCRA): a group whose time is
        past has its whole burst, the same as no entry, so sweeps drop those."""
        return self.prefix + "group_buckets"

    @property
    def wake(self) -> str:
        """LIST that enqueue pushes to and idle workers block on (BLPOP) to wake at once."""
        return self.prefix + "wake"

    # -- the registry of live workers (setqueue.registry; the console reads it) ------------------------

    @property
    def workers(self) -> str:
        """ZSET worker id -> its last heartbeat (ms, the worker's clock) of the workers serving the
        queue: an index of the ``worker`` keys to read; each heartbeat trims entries an hour old."""
        return self.prefix + "workers"

    def worker(self, worker_id: str) -> str:
        """STRING (JSON) with a TTL of three heartbeats: one live worker (host, pid, queues, slots,
        jobs held); it expires on its own when the worker stops beating."""
        return f"{self.prefix}worker:{worker_id}"

    # -- auditing (AUDIT=true: chaos runs; see setqueue.runtime.audit) --------------------------------

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
        """HASH id -> times the job went back to the line while a run of it may have gone on: the
        cleaner found its lease expired, or a worker handed it back still running at the end of its
        shutdown grace. Each allows one more successful run."""
        return self.prefix + "audit:lease_lost"

    def audit_run(self, token: str, job_id: str) -> str:
        """STRING, short TTL: the run of ``job_id`` under claim ``token`` is recorded (a resent
        record counts once)."""
        return f"{self.prefix}audit:run:{token}:{job_id}"

    def lock(self, token: str) -> str:
        """STRING: the lease of one claim (the call that claimed a batch of ids, named by its
        token): how many of its jobs are still held, with the lease TTL. Renewing it extends all
        of them; the cleaner requeues an in_progress id whose claim's lock is gone."""
        return f"{self.prefix}lock:{token}"

    def request(self, request_id: str) -> str:
        """STRING holding the result of one script call for a short while (idempotent resends)."""
        return f"{self.prefix}req:{request_id}"
