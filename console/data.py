"""What the console reads from Redis, in bounded steps (docs/console.md has each read's cost): no
command costs more than O(log N + page) on a queue of N jobs, and none reads a whole set; and none
waits long on a Redis that does not answer (``console_client``).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from setqueue.client import ClusterAwareRedis, TlsFiles, connect
from setqueue.factory import open_queue
from setqueue.interface import JobQueue, Shard
from setqueue.jobs import TRACEBACK_MARK, Link
from setqueue.keys import MAX_SHARDS, QueueKeys, priority_of_rank, validate_queue_name
from setqueue.limits import LIMIT_STATS, GroupInfo, Limits
from setqueue.registry import WorkerRecord, all_live_workers, live_workers
from setqueue.scripts import text
from setqueue.sharded import shard_of

PAGE_SIZE = 50
DONE_READS = 20  # most ranges of done_log read for one page of done
THROUGHPUT_MINUTES = 15
GROUPS_SHOWN = 50
DISCOVERY_SECONDS = 5.0  # how long one SCAN's list of queues is used
# The key names that tell a queue is there (one SCAN pattern matches them all).
MARKS = ("seq", "scheduled", "done", "failed", "workers", "shards")
_KEY = re.compile(r"setqueue:\{([^{}]+)\}:(\w+)")
_SHARD = re.compile(r"(.+)~(\d+)")
LIST_STATES = ("todos", "in_progress", "scheduled", "waiting", "done", "failed", "cancelled")
# The queue tables' order; waiting: held by dependencies (docs/guide.md#dependencies).
COLUMN_STATES = ("todos", "scheduled", "waiting", "in_progress", "done", "failed", "cancelled")
SET_STATES = ("failed", "cancelled")  # paged by SSCAN cursor


def console_client(url: str, timeout: float, tls: TlsFiles | None = None) -> ClusterAwareRedis:
    """The console's client: as the services' (``connect``), but a reply, or a connection, is waited
    for ``timeout`` seconds (CONSOLE_REDIS_TIMEOUT_SECONDS), not 30, and a command is not resent (a
    resend waits again, and a new connection's handshake would wait twice). A connection Redis closed
    (a restart) is still replaced before use, by redis-py's pool."""
    return connect(url, socket_connect_timeout=timeout, socket_timeout=timeout, retries=0, **(tls or {}))


class NotFound(LookupError): ...


class BadInput(ValueError): ...


@dataclass(frozen=True)
class QueueRef:
    name: str
    shards: int  # 1: a plain queue


@dataclass
class ShardView:
    name: str  # the shard's queue name (the queue's own for an unsharded one)
    stats: dict[str, Any]
    done_per_minute: list[int]  # oldest first; the last is this minute so far


@dataclass
class QueueView:
    ref: QueueRef
    shards: list[ShardView]
    totals: dict[str, Any] = field(default_factory=dict)
    done_per_minute: list[int] = field(default_factory=list)
    workers: int = 0

    @property
    def name(self) -> str:
        return self.ref.name


@dataclass
class LimitsView:
    limits: Limits  # the whole queue's
    groups: list[GroupInfo]  # at most GROUPS_SHOWN


@dataclass(frozen=True)
class LinkView:
    """One end of a dependency as the job page shows it: the ``queue`` whose job page has it, the
    ``shard`` holding it (None: the queue is not sharded), its id and state (None: no longer known)."""

    queue: str
    shard: str | None
    id: str
    state: str | None


@dataclass
class JobRow:
    id: str
    priority: int | None = None
    attempts: int | None = None
    at: float | None = None  # first enqueued (todos, in_progress), due (scheduled), done (done)
    owner: str | None = None
    lock_ttl: float | None = None
    error: str | None = None  # failed: its last error; cancelled: what it was doing (from its history)


@dataclass
class JobPage:
    state: str
    shard: int
    rows: list[JobRow]
    total: int
    page: int | None
    pages: int | None
    cursor: int | None  # failed, cancelled: this page's cursor
    next_cursor: int | None  # failed, cancelled: the next page's (None: this is the last)


def parse_page(raw: str | None) -> int:
    if not raw:
        return 1
    if not raw.isdigit() or len(raw) > 18 or int(raw) < 1:
        raise BadInput(f"page must be a whole number from 1, not {raw[:40]!r}")
    return int(raw)


def parse_cursor(raw: str | None) -> int:
    if not raw:
        return 0
    if not raw.isdigit() or len(raw) > 20 or int(raw) >= 2**64:
        raise BadInput(f"cursor must be a whole number below 2^64 (from a page of this list), not {raw[:40]!r}")
    return int(raw)


def parse_shard(raw: str | None, shards: int) -> int:
    if not raw:
        return 0
    if not raw.isdigit() or len(raw) > 5:
        raise BadInput(f"shard must be a whole number, not {raw[:40]!r}")
    if int(raw) >= shards:
        raise NotFound(f"this queue has {shards} shard{'s' if shards != 1 else ''} (0 to {shards - 1}), not {raw}")
    return int(raw)


class Catalog:
    """The queues of one Redis (or Cluster): found by SCAN, opened on one client."""

    def __init__(
        self, client: redis.Redis, url: str, named: Sequence[str], shards: int, options: dict[str, Any] | None = None
    ) -> None:
        self.client = client
        self.options = options or {}
        self.url = url
        self.named = list(named)  # QUEUE_NAME's: listed first, even empty
        self.named_shards = shards
        self._lock = threading.Lock()
        self._found: list[QueueRef] = []
        self._found_at = -math.inf
        self._opened: dict[QueueRef, JobQueue] = {}

    def _scan(self) -> list[str]:
        """The keys whose last part starts with s, d, f or w (MARKS, and others)."""
        pattern = "setqueue:{*}:[sdfw]*"
        cluster = self.client.cluster_client() if isinstance(self.client, ClusterAwareRedis) else None
        source: Any = cluster if cluster is not None else self.client
        return [text(k) for k in source.scan_iter(match=pattern, count=1000)]

    def discover(self) -> list[QueueRef]:
        """QUEUE_NAME's first, then by name."""
        with self._lock:
            if time.monotonic() - self._found_at < DISCOVERY_SECONDS:
                return self._found
        shard_counts: dict[str, int] = {}
        plain: set[str] = set()
        declared: dict[str, int] = {}
        for key in self._scan():
            match = _KEY.fullmatch(key)
            if match is None or match[2] not in MARKS:
                continue
            name, mark = match[1], match[2]
            if mark == "shards":
                declared[name] = 0
                continue
            shard = _SHARD.fullmatch(name)
            if shard is not None and mark != "workers":
                base, index = shard[1], int(shard[2])
                shard_counts[base] = max(shard_counts.get(base, 0), index + 1)
            else:
                plain.add(name)
        for name in declared:
            stored = self.client.get(QueueKeys(name).shards)
            if stored is not None and 1 < int(stored) <= MAX_SHARDS:
                shard_counts[name] = int(stored)
        refs = {name: QueueRef(name, n) for name, n in shard_counts.items()}
        for name in plain:
            refs.setdefault(name, QueueRef(name, 1))
        for name in self.named:
            refs.setdefault(name, QueueRef(name, self.named_shards))
        ordered = [refs[n] for n in self.named] + sorted(
            (r for n, r in refs.items() if n not in self.named), key=lambda r: r.name
        )
        with self._lock:
            self._found, self._found_at = ordered, time.monotonic()
        return ordered

    def ref(self, name: str) -> QueueRef:
        try:
            validate_queue_name(name)
        except ValueError as exc:
            raise NotFound(f"no queue can be named {name[:80]!r}: {exc}") from None
        for ref in self.discover():
            if ref.name == name:
                return ref
        raise NotFound(f"no queue {name!r} in this Redis (a queue is found by its keys: it shows once it has jobs)")

    def open(self, ref: QueueRef) -> JobQueue:
        with self._lock:
            queue = self._opened.get(ref)
            if queue is None:
                queue = open_queue(self.url, ref.name, shards=ref.shards, client=self.client, **self.options)
                self._opened[ref] = queue
            return queue

    def linked(self, links: Sequence[Link]) -> list[LinkView]:
        """Each end of a dependency (``JobInfo.depends_on`` or ``dependents``) with the queue whose job page
        shows it: a shard "Q~3" is queue Q's, unless a queue of that very name is known."""
        known = {ref.name for ref in self.discover()}
        views: list[LinkView] = []
        for link in links:
            shard = _SHARD.fullmatch(link.queue)
            queue = shard[1] if shard is not None and link.queue not in known else link.queue
            views.append(LinkView(queue, None if queue == link.queue else link.queue, link.id, link.state))
        return views

    def overview(self, ref: QueueRef, *, with_workers: bool = True) -> QueueView:
        queue = self.open(ref)
        now_ms = _redis_ms(self.client)
        shards = [shard_overview(shard, now_ms) for shard in queue.shards]
        view = QueueView(ref, shards)
        view.totals = _summed([s.stats for s in shards])
        view.done_per_minute = [sum(column) for column in zip(*(s.done_per_minute for s in shards), strict=True)]
        if with_workers:
            view.workers = len(live_workers(self.client, ref.name))
        return view

    def limits(self, ref: QueueRef) -> LimitsView:
        queue = self.open(ref)
        return LimitsView(queue.limits(), queue.groups(GROUPS_SHOWN))

    def workers(self, refs: Sequence[QueueRef] | None = None) -> list[WorkerRecord]:
        names = [r.name for r in (self.discover() if refs is None else refs)]
        return all_live_workers(self.client, names)

    def job_page(self, ref: QueueRef, state: str, shard_index: int, page: int, cursor: int) -> JobPage:
        if state not in LIST_STATES:
            raise NotFound(f"no state {state[:40]!r}: the states are {', '.join(LIST_STATES)}")
        shard = self.open(ref).shards[shard_index]
        if state in SET_STATES:
            return _set_page(shard, state, shard_index, cursor)
        if state == "done":
            return _done_page(shard, shard_index, cursor)
        return _ordered_page(shard, state, shard_index, page)


def result_gone(queue: JobQueue, job_id: str) -> bool:
    """Whether a done job had a result that expired: its finished record ends in ":1" (finish.lua)."""
    shards = queue.shards
    shard = shards[shard_of(job_id, len(shards))] if len(shards) > 1 else shards[0]
    record = shard.redis.hget(shard.keys.finished, job_id)
    return record is not None and text(record).split(":")[3:4] == ["1"]  # type: ignore[arg-type]


def _redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()  # type: ignore[misc]
    return int(seconds) * 1000 + int(micros) // 1000


def shard_overview(shard: Shard, now_ms: int) -> ShardView:
    stats = shard.stats()
    minute = 60_000
    start = now_ms - now_ms % minute - (THROUGHPUT_MINUTES - 1) * minute
    with shard.redis.pipeline(transaction=False) as pipe:
        for m in range(THROUGHPUT_MINUTES):
            low = start + m * minute
            pipe.zcount(shard.keys.done_log, low, low + minute - 1)
        counts = [int(n) for n in pipe.execute()]
    return ShardView(shard.name, stats, counts)


def _summed(each: Sequence[dict[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {name: sum(s.get(name, 0) for s in each) for name in (*LIST_STATES, *LIMIT_STATS)}
    total["oldest_pending_age_seconds"] = max((s["oldest_pending_age_seconds"] for s in each), default=0)
    by_priority: dict[int, int] = {}
    for s in each:
        for priority, n in s["todos_by_priority"].items():
            by_priority[int(priority)] = by_priority.get(int(priority), 0) + n
    total["todos_by_priority"] = dict(sorted(by_priority.items(), reverse=True))
    return total


def _ordered_page(shard: Shard, state: str, shard_index: int, page: int) -> JobPage:
    k = shard.keys
    key = {"todos": k.todos, "in_progress": k.in_progress, "scheduled": k.scheduled, "waiting": k.waiting}[state]
    total = int(shard.redis.zcard(key))  # type: ignore[arg-type]
    pages = max(1, math.ceil(total / PAGE_SIZE))
    if page > pages:
        raise NotFound(f"no page {page} of {state}: it has {pages} page{'s' if pages != 1 else ''} now")
    start = (page - 1) * PAGE_SIZE
    members = shard.redis.zrange(key, start, start + PAGE_SIZE - 1, withscores=True)
    pairs: list[tuple[Any, float]] = list(members)  # type: ignore[arg-type]
    rows = [JobRow(text(m)) for m, _ in pairs]
    scores = [float(s) for _, s in pairs]
    ids = [r.id for r in rows]
    if not ids:
        return JobPage(state, shard_index, rows, total, page, pages, None, None)
    with shard.redis.pipeline(transaction=False) as pipe:
        pipe.hmget(k.attempts, ids)
        pipe.zmscore(k.pending, ids)
        pipe.hmget(k.owners, ids)
        pipe.hmget(k.priorities, ids)
        pipe.hmget(k.enqueued, ids)  # the first enqueue time, when it joined the line later
        attempts, enqueued, owners, kept, first = pipe.execute()
    tokens = sorted({text(o) for o in owners if o is not None}) if state == "in_progress" else []
    ttls: dict[str, int] = {}
    if tokens:
        with shard.redis.pipeline(transaction=False) as pipe:
            for token in tokens:
                pipe.pttl(k.lock(token))
            ttls = dict(zip(tokens, (int(t) for t in pipe.execute()), strict=True))
    rows_read = zip(rows, scores, attempts, enqueued, owners, kept, first, strict=True)
    for row, score, tries, since, owner, priority, enqueued_ms in rows_read:
        row.attempts = None if tries is None else int(tries)
        if state in ("todos", "in_progress"):
            row.priority = priority_of_rank(score)
            at_ms = since if enqueued_ms is None else int(text(enqueued_ms))
            row.at = None if at_ms is None else at_ms / 1000
        elif state == "waiting":  # the score is its enqueue time; its priority is in deps (below)
            row.at = score / 1000
        else:  # scheduled: the score is the due time
            row.priority = int(priority) if priority is not None else 0
            row.at = score / 1000
        if state == "in_progress" and owner is not None:
            row.owner = text(owner)
            ttl = ttls.get(row.owner, -2)
            row.lock_ttl = ttl / 1000 if ttl >= 0 else None
    if state == "waiting":
        # keys.QueueKeys.deps: "<count>|<fail or run>|<due ms or empty>|<generation>|<priority>".
        records = shard.redis.hmget(k.deps, ids)
        for row, record in zip(rows, records, strict=True):  # type: ignore[call-overload]
            fields = text(record).split("|") if record is not None else []
            row.priority = int(fields[4]) if len(fields) > 4 and fields[4].lstrip("-").isdigit() else None
    return JobPage(state, shard_index, rows, total, page, pages, None, None)


def _done_page(shard: Shard, shard_index: int, offset: int) -> JobPage:
    """Newest first, from ``offset`` into done_log, which holds the cancelled jobs too: ranges are
    read and the ids not in done skipped until a page is full, the log ends or DONE_READS ranges."""
    k = shard.keys
    total = int(shard.redis.scard(k.done))  # type: ignore[arg-type]
    rows: list[JobRow] = []
    at, end = offset, False
    for _ in range(DONE_READS):
        members = shard.redis.zrevrange(k.done_log, at, at + PAGE_SIZE - 1, withscores=True)
        pairs: list[tuple[Any, float]] = list(members)  # type: ignore[arg-type]
        if not pairs:
            end = True
            break
        is_done = shard.redis.smismember(k.done, [m for m, _ in pairs])  # type: ignore[arg-type]
        for (member, score), kept in zip(pairs, is_done, strict=True):
            at += 1
            if kept:
                rows.append(JobRow(text(member), at=score / 1000))
                if len(rows) == PAGE_SIZE:
                    break
        if len(rows) == PAGE_SIZE:
            break
        if len(pairs) < PAGE_SIZE:
            end = True
            break
    more = not end and bool(shard.redis.zrevrange(k.done_log, at, at))
    return JobPage("done", shard_index, rows, total, None, None, offset, at if more else None)


def _set_page(shard: Shard, state: str, shard_index: int, cursor: int) -> JobPage:
    k = shard.keys
    key = k.failed if state == "failed" else k.cancelled
    total = int(shard.redis.scard(key))  # type: ignore[arg-type]
    rows: list[JobRow] = []
    next_cursor = cursor
    # SSCAN returns about COUNT ids a call, sometimes none.
    for _ in range(20):
        next_cursor, members = shard.redis.sscan(key, next_cursor, count=PAGE_SIZE)  # type: ignore[misc]
        rows += [JobRow(text(m)) for m in members]
        if next_cursor == 0 or len(rows) >= PAGE_SIZE:
            break
    if rows:
        ids = [r.id for r in rows]
        with shard.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(k.errors if state == "failed" else k.history, ids)
            pipe.hmget(k.finished, ids)
            pipe.hmget(k.priorities, ids)
            notes, finished, kept = pipe.execute()
        for row, note, done, priority in zip(rows, notes, finished, kept, strict=True):
            if state == "failed":
                row.error = None if note is None else text(note).partition(TRACEBACK_MARK)[0][:300]
                row.priority = int(priority) if priority is not None else 0
            else:  # the detail of its last history line, "<ms>\t<kind>\t<worker>\t<detail>"
                last = text(note).splitlines()[-1].split("\t", 3) if note else []
                row.error = last[3][:300] if len(last) == 4 and last[1] == "cancelled" else None
            fields = text(done).split(":") if done else []  # "<enqueued>:<finished>:<attempts>[:1]"
            if len(fields) >= 3:
                row.at = int(fields[1]) / 1000 if fields[1] else None
                row.attempts = int(fields[2]) if fields[2] else None
    return JobPage(state, shard_index, rows, total, None, None, cursor, next_cursor or None)
