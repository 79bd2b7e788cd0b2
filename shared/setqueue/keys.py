"""The key layout of a queue in Redis: the one place that spells key names (the table in
docs/reference.md#key-layout lists the same keys).

Every key of queue ``Q`` starts with ``setqueue:{Q}:``. The braces are a Redis Cluster hash tag: all
the keys of one queue hash to one slot, so every Lua script can be given all of them in ``KEYS`` and
run there. A shard ``Q~i`` of a sharded queue has this whole layout under ``{Q~i}``.

Each key's docstring below starts with its Redis type and says what its members, fields, values or
scores hold. Times are whole milliseconds since the Unix epoch by the Redis clock (``TIME``), the
queue's only clock, unless a docstring says otherwise."""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

# The longest job id and job group name, in characters.
MAX_ID_LENGTH = 1024
# The most ids one script call takes (the largest claim, and the chunk size of every batched call):
# it bounds one call's run time, and so the latency Redis adds for every other client meanwhile.
MAX_IDS_PER_CALL = 500
# Job priorities: higher runs first, 0 is the default. lua/includes/rank.lua holds the same bounds
# (TOP_PRIORITY).
MIN_PRIORITY, MAX_PRIORITY = -10, 10
# The most shards of one queue (setqueue.sharded).
MAX_SHARDS = 1024
# The version of this key layout (docs/reference.md#layout-versions). A queue records the one it was
# written with in its ``layout`` key; a client of another version refuses the queue before it writes
# anything (setqueue.layout). Bump it with any change an older client would misread: a key added that
# it would not keep up, a key's type, or what a member, field, value or score holds.
LAYOUT_VERSION = 4
# The version of a queue written before queues recorded theirs: keys, but no ``layout`` key.
UNRECORDED_LAYOUT_VERSION = 1


# The most dependents one release.lua call tells, and the most dependencies one register.lua call
# registers: it bounds how long one call blocks Redis however many jobs a callback waits for
# (docs/reference.md#dependencies states the measured bound).
LINKS_PER_CALL = 500
# What a job's dependencies can end as, from a dependent's side: done, failed (dead-lettered),
# cancelled, deleted, or unknown (trimmed by retention or deleted before it was registered).
DEPENDENCY_OUTCOMES = ("done", "failed", "cancelled", "deleted", "unknown")
# if_dependency_fails: what a dependency that ends other than done does to its dependent.
IF_DEPENDENCY_FAILS = ("fail", "run")


# A job's rank, its score in todos, grouped and in_progress (lua/includes/rank.lua):
# (MAX_PRIORITY - priority) * RANK_BAND + its place in line (from seq). So every priority has 2^48
# places, a higher priority always ranks lower (claimed first), and the highest rank, 21 * 2^48, stays
# below 2^53: exact as a double, which is how Lua and the scores hold it.
RANK_BAND = 2**48
# The states a job can be in, in the order inspect looks (JobInfo.state is one of them). "todos" also
# covers jobs in line that have a group (the grouped key); "waiting" is a job held by its dependencies.
STATES = ("todos", "in_progress", "done", "failed", "scheduled", "cancelled", "waiting")


def shard_name(name: str, shard: int) -> str:
    """The name of shard ``shard`` of queue ``name``: ``name~shard`` (its keys are under ``{name~shard}``)."""
    return f"{name}~{shard}"


def queue_of_shard(name: str) -> str | None:
    """The queue whose shard ``name`` is (``shard_name`` undone): ``Q`` for ``Q~i``; None for a name that
    is not a shard's."""
    queue, tilde, shard = name.rpartition("~")
    return queue if tilde and queue and shard.isascii() and shard.isdigit() else None


def shard_of(job_id: str, shards: int) -> int:
    """The shard that holds ``job_id``, for good: crc32 of its UTF-8 bytes, mod the shard count."""
    return zlib.crc32(job_id.encode("utf-8")) % shards


def priority_of_rank(rank: float) -> int:
    """The priority (MIN_PRIORITY to MAX_PRIORITY) a rank in todos, grouped or in_progress stands for:
    the inverse of rank = (MAX_PRIORITY - priority) * RANK_BAND + place."""
    return MAX_PRIORITY - int(rank // RANK_BAND)


def check_seconds(name: str, value: float) -> float:
    """``value`` as a float, when it is a finite int or float >= 0 (a bool is not a number here).
    ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def check_whole(name: str, value: int, least: int) -> int:
    """``value`` unchanged, when it is an int (not a bool) of at least ``least``. ValueError naming
    ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return value


def validate_priority(priority: int) -> int:
    """``priority`` unchanged when it is an int from MIN_PRIORITY to MAX_PRIORITY. TypeError when it is
    not an int (or is a bool), ValueError when it is out of range."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an int, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY} (higher runs first), got {priority}")
    return priority


def validate_queue_name(name: str) -> str:
    """``name`` unchanged when it can name a queue: 1 to 200 characters of UTF-8 text, without braces
    (they would break the hash tag), white space or a comma (a comma separates the names of queues in
    QUEUE_NAME). ValueError saying which rule it breaks otherwise."""
    if not name or len(name) > 200:
        raise ValueError("queue name must be 1 to 200 characters")
    if any(c in name for c in "{}") or any(c.isspace() for c in name):
        raise ValueError(f"queue name {name!r} must not contain braces or white space")
    if "," in name:
        raise ValueError(f"queue name {name!r} must not contain a comma (a comma separates the names of queues)")
    return check_utf8("queue name", name)


def parse_queue_names(text: str) -> tuple[str, ...]:
    """QUEUE_NAME: one queue name, or several separated by commas (served in that order). Returns the
    names, white space around each stripped. ValueError for a bad name (``validate_queue_name``) or a
    name given twice."""
    names = tuple(name.strip() for name in text.split(","))
    for name in names:
        validate_queue_name(name)
    if len(set(names)) != len(names):
        raise ValueError(f"{text!r} names a queue twice")
    return names


def check_utf8(what: str, text: str) -> str:
    """``text`` unchanged when Redis can store it as UTF-8: no lone surrogates (what undecodable input
    bytes become with Python's surrogateescape). ValueError naming ``what`` otherwise."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {text!r} is not valid UTF-8 (an undecodable byte?)") from None
    return text


def validate_group(group: str) -> str:
    """``group`` unchanged when it can name a job group (``enqueue(..., group=)``): like an id, 1 to
    MAX_ID_LENGTH characters of UTF-8 text, and no braces, white space or control characters, so that it
    shows as one word in ``setqueue groups`` and never touches a key's hash tag. TypeError when it is not
    a str, ValueError when it breaks a rule."""
    if not isinstance(group, str):
        raise TypeError(f"group must be a str, not {type(group).__name__}")
    if not group or len(group) > MAX_ID_LENGTH:
        raise ValueError(f"group name must be 1 to {MAX_ID_LENGTH} characters, got {len(group)}")
    if any(c in "{}" or c.isspace() or not c.isprintable() for c in group):
        raise ValueError(f"group name {group!r} must not contain braces, white space or control characters")
    check_utf8("group name", group)
    return group


def validate_job_id(job_id: str) -> str:
    """``job_id`` unchanged when it can name a job: 1 to MAX_ID_LENGTH characters of UTF-8 text, without
    line breaks (ids travel one a line on the ended channel and in request records) or NUL. TypeError when
    it is not a str, ValueError when it breaks a rule."""
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
    """Names of every key queue ``name`` uses. ValueError for a bad name (``validate_queue_name``).

    A job's state is which of todos (or grouped), in_progress, done, failed, scheduled and cancelled
    holds its id; its bookkeeping (owners, pending, enqueued, attempts, errors, options) goes when it
    reaches done or cancelled, while a done job keeps a small payload and a dead letter its payload and
    error."""

    name: str

    def __post_init__(self) -> None:
        validate_queue_name(self.name)

    @property
    def prefix(self) -> str:
        """Not a key: ``setqueue:{<name>}:``, the start of every key name below. The braces are the
        Redis Cluster hash tag that keeps the whole queue in one slot."""
        return f"setqueue:{{{self.name}}}:"

    @property
    def todos(self) -> str:
        """Sorted set: member = job id of each job waiting to be claimed that has no group (a waiting job
        with a group is in grouped instead); score = its rank, (MAX_PRIORITY - priority) * RANK_BAND +
        place in line (lua/includes/rank.lua). A claim takes the lowest ranks (ZPOPMIN): the highest
        priority first, then the earliest place. A job joins at the back of its priority (a new place from
        seq) when enqueued, due, retried or requeued from failed, and keeps its old rank when it comes back
        through no fault of its own (lease lost, handed back, released)."""
        return self.prefix + "todos"

    @property
    def in_progress(self) -> str:
        """Sorted set: member = job id of each claimed job; score = the rank it had in todos (or grouped),
        which it takes back there if it returns through no fault of its own (lease lost and swept, handed
        back, released). The cleaner's sweep scans it (ZSCAN) for ids whose claim's lock is gone."""
        return self.prefix + "in_progress"

    @property
    def done(self) -> str:
        """Set: member = job id of each job that finished successfully (acked). Bounded by the retention
        (done_log: DONE_MAX_COUNT, DONE_MAX_AGE_SECONDS), which drops the oldest with all kept of them."""
        return self.prefix + "done"

    @property
    def failed(self) -> str:
        """Set: member = job id of each dead-lettered job: out of attempts, failed as permanent
        (PermanentJobError), or its lease expired on its last attempt. No retention: it stays, with its
        payload, error and finished entry, until ``requeue_failed`` or ``delete``."""
        return self.prefix + "failed"

    @property
    def cancelled(self) -> str:
        """Set: member = job id of each job cancelled before it ended (waiting, scheduled or running); it
        never runs again. Kept like done, by done's retention (it is in done_log too)."""
        return self.prefix + "cancelled"

    @property
    def pending(self) -> str:
        """Sorted set: member = job id of every unfinished job in the line or in progress (todos, grouped,
        in_progress); score = when it joined the line (ms): its enqueue time, or for a job that was
        scheduled its due time (queue wait counts from then), or when it was requeued from failed. A retry
        at once keeps it; a delayed retry leaves pending until due. Gone when the job ends; the lowest
        score is the oldest unfinished job (``stats``). When the score is not the first enqueue time,
        ``enqueued`` keeps that."""
        return self.prefix + "pending"

    @property
    def enqueued(self) -> str:
        """Hash: field = job id of an unfinished job that joined the line (pending) later than it was first
        enqueued: enqueued with a delay or ``at`` or with dependencies (written at the enqueue: its
        release writes nothing more), retried after a backoff, or requeued from failed; value = when it
        was first enqueued (ms). A job enqueued to run at once never has one (its pending score is
        that time), so it costs nothing on the happy path. Gone when the job ends (its time goes into
        finished) or is deleted; a requeue from failed takes it back from finished."""
        return self.prefix + "enqueued"

    @property
    def attempts(self) -> str:
        """Hash: field = job id; value = how many times it has been claimed (a release gives one back).
        Kept while the job is unfinished (waiting, scheduled for a retry, in progress); when it ends the
        count moves into finished, and a requeue from failed starts it again."""
        return self.prefix + "attempts"

    @property
    def payloads(self) -> str:
        """Hash: field = job id of a job enqueued with a payload; value = that payload (UTF-8 text, as
        given). A done job keeps one of at most PAYLOAD_KEEP_BYTES (the acker's ``payload_keep_bytes``; 0:
        none) for inspect, until done's retention drops the id; a dead letter keeps it whatever its size,
        for a requeue; dropped when the job is cancelled or deleted."""
        return self.prefix + "payloads"

    @property
    def results(self) -> str:
        """Hash: field = job id of a job in done whose handler returned something other than None; value =
        that value, "j" + JSON text or "b" + base64 of bytes (``jobs.encode_result``). Kept for
        RESULT_TTL_SECONDS (result_expiry) and at most as long as done keeps the id; not written when the
        TTL is 0 or Redis was full at the ack."""
        return self.prefix + "results"

    @property
    def result_expiry(self) -> str:
        """Sorted set: member = job id with a kept result; score = when that result expires (ms: the ack's
        time plus the result TTL). Sweeps drop expired results, a batch at a time."""
        return self.prefix + "result_expiry"

    @property
    def history(self) -> str:
        """Hash: field = job id; value = its last ten transitions off the happy path, one a line:
        "<ms>\\t<kind>\\t<worker>\\t<detail>" (kind: lease lost, failed, timed out, handed back, cancelled,
        requeued; worker: host:pid of the holder or of whoever acted; detail at most 200 characters, tabs
        and line breaks made spaces). Gone with the job (retention, delete)."""
        return self.prefix + "history"

    @property
    def progress(self) -> str:
        """Hash: field = job id; value = "<fraction>|<ms>|<message>": the last progress its handler
        reported (``Lease.progress``; fraction 0 to 1, message at most 200 characters), kept only while
        the reporting claim owned the job. Gone with the job (retention, delete)."""
        return self.prefix + "progress"

    @property
    def ended_channel(self) -> str:
        """Pub/Sub channel (no key): each message is "done", "failed" or "cancelled", then the ids that
        just ended in that state, one a line ("done\\n<id>\\n<id>..."), for whoever waits on a result."""
        return self.prefix + "ended"

    @property
    def cancel_channel(self) -> str:
        """Pub/Sub channel (no key): each message is the id of a running job just cancelled, for the worker
        running it to stop it."""
        return self.prefix + "cancel"

    @property
    def options(self) -> str:
        """Hash: field = job id of a job enqueued with options of its own or inside a traced span; value =
        "<max attempts>|<timeout ms>" (either part empty: the queue's or the worker's default), then
        "|<traceparent>" when enqueued in a span, then "|1" or "|0" when it says whether a timeout is retried
        (``jobs.job_options``; Lua reads the leading number only). From enqueue until the job is done,
        cancelled or deleted."""
        return self.prefix + "options"

    @property
    def errors(self) -> str:
        """Hash: field = job id; value = the reason given by its last failure. The worker writes ``repr`` of
        the exception (at most 500 characters), then its traceback from a "Traceback (most recent call
        last):" line (at most about 3,000 characters; ``jobs.TRACEBACK_MARK``), or "timeout: ..." for a
        timed-out run; a sweep writes "lease expired on attempt <n> of <most>" for a job whose lease ran out
        on its last attempt. Written by a retry or a dead letter; dropped when the job is done, cancelled,
        deleted or requeued from failed."""
        return self.prefix + "errors"

    @property
    def owners(self) -> str:
        """Hash: field = job id of each job in in_progress; value = the token of the claim that owns it
        (random hex, then "@<host>:<pid>" of the claiming process). Ack, fail, renew and progress check it:
        a call with another token is stale and changes nothing. Unlike the lock it does not expire, so a
        worker whose lease ran out can still ack while nobody took over; the claim's lock only carries the
        TTL that the cleaner and renewals look at. Gone when the job leaves in_progress."""
        return self.prefix + "owners"

    @property
    def done_log(self) -> str:
        """Sorted set: member = job id in done or cancelled; score = when it got there (ms). The retention
        of both: an ack drops the oldest past DONE_MAX_COUNT, a sweep those older than
        DONE_MAX_AGE_SECONDS, each with its finished, results, history, progress and payloads entries."""
        return self.prefix + "done_log"

    @property
    def scheduled(self) -> str:
        """Sorted set: member = job id of each job that becomes claimable later (enqueued with a delay or
        ``at``, or a retry waiting out its backoff); score = its due time (ms). Claims and the cleaner's
        sweep move due ones to the back of their priority's line, in due order."""
        return self.prefix + "scheduled"

    @property
    def finished(self) -> str:
        """Hash: field = job id of each ended job (in done, failed or cancelled); value = "<enqueued
        ms>:<finished ms>:<attempts>[:1]" (enqueued or attempts empty when unknown), ":1" when its handler
        returned a result to keep, so that ``result()`` can tell a result that expired or was dropped for
        lack of memory (ResultGone) from none. Kept as long as the id is (done's retention, requeue from
        failed, delete), so inspect can tell when a finished job was enqueued and finished and how many
        claims it took."""
        return self.prefix + "finished"

    @property
    def periodic(self) -> str:
        """Hash: field = schedule name; value = the slot (ms since the epoch, UTC) of the latest run of that
        periodic schedule the cleaners created, or of the slot it was first seen at (no run then). A run is
        created only for a later slot, in the step that records it, so once however many cleaners run."""
        return self.prefix + "periodic"

    @property
    def schedules(self) -> str:
        """Hash: field = schedule name; value = its cron expression (UTC): the periodic jobs in force.
        SCHEDULES registers its own at the cleaner's start; ``setqueue schedules add|remove`` and the API
        change them; every cleaner creates their runs and the command line lists them."""
        return self.prefix + "schedules"

    @property
    def layout(self) -> str:
        """String: a whole number, the key-layout version (LAYOUT_VERSION) the queue was written with.
        Written once (SET NX) by the first client that uses the queue, never changed; a client of another
        version refuses the queue (LayoutVersionError) before it writes anything (setqueue.layout)."""
        return self.prefix + "layout"

    @property
    def seq(self) -> str:
        """String: an integer counter, the last place in line given out (INCRBY). A job's place orders it
        within its priority; enqueue, promotion of due jobs, retries, requeues and periodic runs take the
        next ones."""
        return self.prefix + "seq"

    @property
    def priorities(self) -> str:
        """Hash: field = job id of a scheduled or dead-lettered job whose priority is not 0; value = that
        priority (-10 to 10). In todos, grouped and in_progress the priority is part of the rank instead,
        so the entry goes when the job rejoins the line."""
        return self.prefix + "priorities"

    @property
    def shards(self) -> str:
        """String: N, the number of shards queue Q was first opened with, written once (SET NX) and only
        when more than one (setqueue.sharded); opening it with another N is refused (OptionError), since
        ids would change shard. It lives under the queue's own name, not a shard's."""
        return self.prefix + "shards"

    @property
    def swept(self) -> str:
        """String with a TTL of one day: the time (ms) of the queue's last sweep, by a cleaner or a worker
        standing in for one. Its age is read from its TTL (a day less PTTL), so by the Redis clock alone;
        no key: nobody swept within a day. A worker sweeps itself when nobody has for a while."""
        return self.prefix + "swept"

    # -- dependencies (enqueue's depends_on; lua/includes/links.lua; docs/reference.md#dependencies) ------

    @property
    def waiting(self) -> str:
        """Sorted set: member = job id of each job held by dependencies that have not all ended (the
        waiting state: never claimed); score = when it was enqueued (ms). When the last one ends it goes
        to the line (or scheduled, with a delay), or to failed when one failed and it was enqueued with
        if_dependency_fails "fail"."""
        return self.prefix + "waiting"

    @property
    def released(self) -> str:
        """List, in pairs: a linked value naming a job released by an ack ("<deps entry> <id>", as
        ``linked`` held it), then the id of its dependency that ack ended done. Such a job (one dependency,
        of this queue, no delay, priority 0: the common chain step) stays in waiting until the next claim
        or the cleaner's sweep moves it to the line (includes/released.lua: if it still waits in that run,
        its arrival written, todos and pending), oldest first, DRAIN_MOST a call: the ack records the
        release and nothing more. Empty once they have."""
        return self.prefix + "released"

    @property
    def deps(self) -> str:
        """Hash: field = job id enqueued with dependencies; value = "<count>|<fail or run>|<due ms or
        empty>|<generation>|<priority>": how many dependencies it has, what one that fails does, when
        it may run once released, the enqueue call that made it (a registration or release made for an
        earlier run of the id is ignored) and its priority. Kept as long as the id (retention, delete),
        so inspect can show its dependencies after it ran."""
        return self.prefix + "deps"

    @property
    def linked(self) -> str:
        """Hash: field = job id that others wait for (it has ``dependents`` entries); value = "<deps entry>
        <id>" while its only dependent is that job of this queue, with one dependency, no delay and
        priority 0, else "*". A job ending or forgotten looks here (one HMGET a batch) before it tells
        or drops them, so queues where no job has dependents pay one EXISTS a call; an ack records the
        release of a sole dependent from the value alone (``released``), without reading ``dependents``
        (its one link, the common chain step). Gone with the job, once they are told."""
        return self.prefix + "linked"

    @property
    def registering(self) -> str:
        """Sorted set: member = job id whose dependencies are still being registered with them (each in
        its dependency's queue: ``dependents``); score = when that began (ms). The enqueuer registers at
        once and removes it; a cleaner finishes one older than LINK_GRACE_SECONDS that an enqueuer
        left (registering is idempotent). An enqueue call that registers its jobs itself (all its links
        in its slot, few: enqueue.lua's given_links) writes none."""
        return self.prefix + "registering"

    @property
    def releasing(self) -> str:
        """Sorted set: member = job id that ended (done, failed, cancelled, deleted) while it had
        dependents still to be told; score = when it ended (ms). The worker (or whoever ended it)
        tells them at once, a page at a time (LINKS_PER_CALL), and removes it; a cleaner finishes one
        older than LINK_GRACE_SECONDS (telling is idempotent: a dependent counts a dependency once)."""
        return self.prefix + "releasing"

    @property
    def release_outcomes(self) -> str:
        """Hash: field = job id in releasing; value = how it ended, as its dependents are told: done,
        failed, cancelled or deleted. Gone with its releasing entry."""
        return self.prefix + "release_outcomes"

    @property
    def dep_lines(self) -> str:
        """Sorted set, every score 0: member = "<id>\\0<place, 8 hex digits>\\0<queue> <dependency id>" for
        each dependency of each job enqueued with some, in the order given (the queue, or the shard of a
        sharded queue, that holds it: queue names have no spaces). In lexicographic order one job's
        dependencies lie together in order, so ZRANGE BYLEX reads a page of them from any place. Gone
        with the job."""
        return self.prefix + "dep_lines"

    @property
    def forgetting(self) -> str:
        """Sorted set: member = job id the queue forgot (retention, delete, rerun) while it had more than
        LINKS_PER_CALL dependencies or dependents; score = when (ms). Its ``dep_lines`` entries with
        their ``arrived`` fields, then its ``dependents`` entries, are dropped a page a call (forget.lua):
        by the call that deleted it, by sweeps, and, before a new run of the id registers or is
        registered with, by its registering caller. Gone once they are."""
        return self.prefix + "forgetting"

    @property
    def arrived(self) -> str:
        """Hash: field = "<id>\\0<queue> <dependency id>" of each dependency of a job that has ended; value =
        how (done, failed, cancelled, deleted, unknown). Written with HSETNX, so a dependency told twice
        counts once. Gone with the job."""
        return self.prefix + "arrived"

    @property
    def arrived_count(self) -> str:
        """Hash: field = id of a job enqueued with dependencies of which some ended; value = how many
        (its ``arrived`` fields): it is released when that reaches its ``deps`` count. Gone with the job."""
        return self.prefix + "arrived_count"

    @property
    def dependents(self) -> str:
        """Sorted set, every score 0: member = "<id>\\0<queue> <generation> <dependent id>" of each job that
        waits for job ``id`` (registered while it had not ended). One job's dependents lie together, read a
        page at a time (ZRANGE BYLEX from the last one read) to tell them when it ends; kept until it is
        forgotten, so inspect can list them."""
        return self.prefix + "dependents"

    def staging(self, request_id: str) -> str:
        """List with a TTL of a day: the dependency list of one enqueue call ("<queue> <id>" each), named
        by the call's request id (its links' generation), written in pages (RPUSH) before the call so that
        no script takes a long list as arguments; register.lua copies it into ``dep_lines`` a page a call
        for each new job, and the enqueuer deletes it once they registered (one an enqueuer left expires,
        after a sweep finished its registrations). A call that registers its jobs itself has none."""
        return f"{self.prefix}staging:{request_id}"

    # -- limits (setqueue.limits; lua/claim.lua enforces it, docs/guide.md#limits) -------------

    @property
    def limits(self) -> str:
        """Hash of the queue's limits, read by every claim. Fields: ``paused`` ("1" while paused),
        ``rate`` ("<count> <period ms> <burst>": at most count starts a period, burst at once), ``tat``
        (the rate's state: its theoretical arrival time in ms, GCRA; gone with the rate),
        ``group_concurrency`` (a number) and ``group_rate`` (a rate as above): every group's limits unless
        it has its own, ``grouped`` ("1" once a job was enqueued with a group: claims then serve the line
        of groups) and ``turn`` (a counter: the last turn given in groups_ready)."""
        return self.prefix + "limits"

    @property
    def grouped(self) -> str:
        """Sorted set: member = job id of each waiting job that has a group; score = its rank, as in todos.
        With todos (the jobs without one) it makes the todos state. Each is also in its group's line
        (group_lines)."""
        return self.prefix + "grouped"

    @property
    def group_lines(self) -> str:
        """Sorted set, every score 0: member = "<group>\\0<rank, 14 hex digits>\\0<job id>" for each waiting
        job that has a group. In lexicographic order each group's jobs lie together in rank order, so a
        claim reads the front of one group's line with ZRANGE BYLEX and never scans another's."""
        return self.prefix + "group_lines"

    @property
    def group_of(self) -> str:
        """Hash: field = job id of a job enqueued with a group; value = that group. From enqueue until the
        job is done, cancelled or deleted (retries and dead letters keep it, to rejoin the group's line)."""
        return self.prefix + "group_of"

    @property
    def groups_ready(self) -> str:
        """Sorted set: member = group that has jobs waiting and may start one now; score = its turn (from
        limits's ``turn`` counter): the line of groups. Claims take an equal share from the groups at the
        front (up to four jobs a turn) and send a group that still has jobs to the back, so a big backlog
        cannot starve a small group. The member "" is the turn of the jobs without a group (todos), while
        groups are in use."""
        return self.prefix + "groups_ready"

    @property
    def groups_resting(self) -> str:
        """Sorted set: member = group with jobs waiting that used up its rate; score = when (ms) its rate
        lets it start another job. Claims move it back to groups_ready when the time comes."""
        return self.prefix + "groups_resting"

    @property
    def groups_full(self) -> str:
        """Set: member = group with jobs waiting that has its concurrency in progress. A job of its leaving
        in_progress sends it back to groups_ready."""
        return self.prefix + "groups_full"

    @property
    def group_running(self) -> str:
        """Hash: field = group; value = how many of its jobs are in progress (a group with none has no
        field). Kept even without limits, so that a limit set later counts right."""
        return self.prefix + "group_running"

    @property
    def group_limits(self) -> str:
        """Hash: field = group given limits of its own; value = "<concurrency>|<count> <period ms> <burst>"
        (``limits.GroupLimits.spec``; either part empty: limits's group_concurrency or group_rate)."""
        return self.prefix + "group_limits"

    @property
    def group_buckets(self) -> str:
        """Sorted set: member = group with a rate that started jobs; score = its rate's theoretical arrival
        time (ms, GCRA). A group whose time is past has its whole burst, the same as no entry, so sweeps
        drop those."""
        return self.prefix + "group_buckets"

    @property
    def wake(self) -> str:
        """List of wake-up tokens ("1"): scripts push up to one a job that became claimable (enqueue, due
        jobs, retries, requeues, a group's slot freed), or the whole cap when limits change (LPUSH, trimmed to
        the wake cap), and idle workers block on it (BLPOP) to wake at once. On a Cluster a sharded queue's
        own list serves all its shards (one BLPOP cannot span slots)."""
        return self.prefix + "wake"

    # -- the registry of live workers (setqueue.registry; the console reads it) ---------------------------

    @property
    def workers(self) -> str:
        """Sorted set: member = worker id of each worker serving the queue; score = its last heartbeat (ms,
        the worker's clock). An index of the ``worker`` keys to read; each heartbeat drops entries an hour
        old."""
        return self.prefix + "workers"

    def worker(self, worker_id: str) -> str:
        """String (JSON) with a TTL of three heartbeats: one live worker's record (host, pid, queues, slots,
        jobs held, start and beat times; ``registry.WorkerRecord``). It expires on its own when the worker
        stops beating, and is deleted when it stops cleanly."""
        return f"{self.prefix}worker:{worker_id}"

    # -- auditing (AUDIT=true: chaos runs; see setqueue.runtime.audit) -----------------------------------

    @property
    def audit_created(self) -> str:
        """Hash: field = creator id prefix; value = n: that creator enqueued the ids <prefix>-1 to
        <prefix>-n (only ever raised)."""
        return self.prefix + "audit:created"

    @property
    def audit_successes(self) -> str:
        """Hash: field = job id; value = its runs that succeeded (the demo handler returned), each claim's
        run counted once."""
        return self.prefix + "audit:successes"

    @property
    def audit_failures(self) -> str:
        """Hash: field = job id; value = its runs that failed (the demo handler raised)."""
        return self.prefix + "audit:failures"

    @property
    def audit_lease_lost(self) -> str:
        """Hash: field = job id; value = times the job went back to the line while a run of it may have
        gone on: the cleaner found its lease expired, or a worker handed it back still running at the end
        of its shutdown grace. Each allows one more successful run."""
        return self.prefix + "audit:lease_lost"

    def audit_run(self, token: str, job_id: str) -> str:
        """String ("1") with a short TTL: the run of ``job_id`` under claim ``token`` is counted (SET NX),
        so a resent record counts once."""
        return f"{self.prefix}audit:run:{token}:{job_id}"

    # -- per claim and per call ----------------------------------------------------------------------------

    def lock(self, token: str) -> str:
        """String with a TTL of the lease: the lease of one claim (the call that claimed a batch of ids,
        named by its token); value = how many of its jobs are still held. Acks, fails, cancels and deletes
        count it down, and it goes at none. Renewing it extends all its jobs at once; the cleaner requeues
        an in_progress id whose claim's lock is gone. A gone lock is never re-created."""
        return f"{self.prefix}lock:{token}"

    def request(self, request_id: str) -> str:
        """String with a TTL of REQUEST_TTL_SECONDS: the result of one mutating script call (a claim's: its
        ids, one a line), so that a call resent after a lost reply returns the first result instead of
        running twice."""
        return f"{self.prefix}req:{request_id}"
