"""The set-model work queue: todos -> in_progress -> done, plus failed (dead letters) and scheduled.

Each transition is one Lua script (atomic), safe to resend (docs/guide.md#resends). ``setqueue.scripts``
knows how each is called; this module batches the calls and shapes their results."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import redis

from setqueue.client import (
    Client,
    ClusterAwareRedis,
    EndedListener,
    OptionError,
    SnapshotReads,
    connect,
    take_wake_token,
    until_due,
)
from setqueue.flow import GroupInfo, GroupLimits, Limits, Rate, parse_concurrency
from setqueue.jobs import (
    TRACEBACK_MARK,
    AckResult,
    FailOutcome,
    HistoryEntry,
    JobFailed,
    JobInfo,
    Lease,
    Progress,
    RenewOutcome,
    ResultGone,
    SweepResult,
    UnknownJob,
    decode_result,
    encode_result,
    job_options,
    parse_job_options,
    parse_trace_parent,
)
from setqueue.keys import (
    MAX_IDS_PER_CALL,
    STATES,
    QueueKeys,
    check_seconds,
    check_utf8,
    check_whole,
    priority_of_rank,
    validate_group,
    validate_job_id,
    validate_priority,
)
from setqueue.replication import ReplicaWait
from setqueue.scripts import QueueScripts
from setqueue.scripts import text as _text
from setqueue.tracing import current_trace_parent

log = logging.getLogger("setqueue.queue")

# The sweep stamp's TTL (sweep.lua sets it).
SWEPT_STAMP_MS = 86_400_000


_RENEWALS = {1: RenewOutcome.RENEWED, 0: RenewOutcome.LOST, 2: RenewOutcome.CANCELLED}


def _part(request_id: str | None, number: int) -> str | None:
    return None if request_id is None else f"{request_id}-{number}"


def _chunks(items: Sequence[Any], size: int = MAX_IDS_PER_CALL) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def job_items(ids: Iterable[str] | Mapping[str, Any], payload_max_bytes: int) -> list[tuple[str, str | None]]:
    """(id, payload text or None) of what ``enqueue`` was given, all checked; a lone str is refused."""
    if isinstance(ids, str | bytes | bytearray):
        raise TypeError(
            f"ids must be a collection of job ids or a mapping id -> payload, not a {type(ids).__name__}: "
            f"enqueue([{ids!r}]) enqueues that one id"
        )
    if not isinstance(ids, Mapping):
        return [(validate_job_id(job_id), None) for job_id in ids]
    return [(validate_job_id(job_id), _payload_text(job_id, p, payload_max_bytes)) for job_id, p in ids.items()]


def _payload_text(job_id: str, payload: Any, most: int) -> str:
    """A payload as stored: str as is, bytes as UTF-8 text, anything else as JSON."""
    if isinstance(payload, bytes | bytearray):
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(
                f"payload of {job_id!r}: bytes that are not UTF-8 text (encode binary data first, e.g. base64)"
            ) from None
    elif isinstance(payload, str):
        text = check_utf8(f"payload of {job_id!r}", payload)
    else:
        try:
            text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"payload of {job_id!r} is neither text nor JSON-serialisable: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > most:
        raise ValueError(f"payload of {job_id!r} is {size:,} bytes, more than payload_max_bytes ({most:,})")
    return text


def _history(stored: Any) -> tuple[HistoryEntry, ...]:
    entries: list[HistoryEntry] = []
    for line in ("" if stored is None else _text(stored)).splitlines():
        at, kind, worker, detail = [*line.split("\t", 3), "", "", ""][:4]
        entries.append(HistoryEntry(int(at) / 1000 if at.isdigit() else 0.0, kind, worker, detail))
    return tuple(entries)


def _progress(stored: Any) -> Progress | None:
    if stored is None:
        return None
    fraction, at, message = [*_text(stored).split("|", 2), "", ""][:3]
    return Progress(float(fraction or 0), int(at or 0) / 1000, message)


def _rate(rate: Rate | str | None, burst: int | None) -> str:
    given = Rate.given(rate, burst)
    return "" if given is None else given.spec()


class Queue:
    """One named queue in one Redis (or one Redis Cluster slot).

    ``client``: a ``redis.Redis``, or a ``RedisCluster`` (wrapped: ``queue.redis`` is a ``redis.Redis`` either way)."""

    # The only place defaults are declared: the services' settings read this signature.
    def __init__(
        self,
        client: Client,
        name: str = "default",
        *,
        lease_seconds: float = 30.0,
        max_attempts: int = 5,
        done_max_count: int = 1_000_000,
        done_max_age_seconds: float = 604_800.0,
        retry_backoff_seconds: float = 1.0,
        retry_backoff_max_seconds: float = 300.0,
        request_ttl_seconds: float = 120.0,
        wake_cap: int = 64,
        wait_replicas: int = 0,
        wait_timeout_seconds: float = 1.0,
        payload_max_bytes: int = 1_048_576,
        result_ttl_seconds: float = 3600.0,
        result_max_bytes: int = 1_048_576,
    ) -> None:
        if not lease_seconds >= 0.001:
            raise ValueError(f"lease_seconds must be at least 0.001, got {lease_seconds}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if done_max_count < 0 or not done_max_age_seconds >= 0:
            raise ValueError("done_max_count and done_max_age_seconds must not be negative")
        if not request_ttl_seconds >= 1:
            raise ValueError("request_ttl_seconds must be at least 1")
        if wake_cap < 1:
            raise ValueError("wake_cap must be at least 1")
        check_whole("wait_replicas", wait_replicas, 0)
        if not (isinstance(wait_timeout_seconds, int | float) and 0.001 <= wait_timeout_seconds < math.inf):
            raise ValueError(f"wait_timeout_seconds must be at least 0.001 and finite, got {wait_timeout_seconds!r}")
        check_whole("payload_max_bytes", payload_max_bytes, 1)
        check_seconds("retry_backoff_seconds", retry_backoff_seconds)
        check_seconds("retry_backoff_max_seconds", retry_backoff_max_seconds)
        self.redis: redis.Redis = client if isinstance(client, redis.Redis) else ClusterAwareRedis.around(client)
        self.keys = QueueKeys(name)
        self.name = name
        self.lease_seconds = float(lease_seconds)
        self.max_attempts = max_attempts
        self.done_max_count = done_max_count
        self.done_max_age_seconds = float(done_max_age_seconds)
        self.wake_cap = wake_cap
        self.retry_backoff_seconds = float(retry_backoff_seconds)
        self.retry_backoff_max_seconds = float(retry_backoff_max_seconds)
        self.next_due: float | None = None  # after a short claim: when more could be claimed
        self._next_due_seen = 0.0  # monotonic time of that claim
        # As the last claim found it: a rate or group limits (claim only for free slots).
        self.flow_limited = False
        self.on_held: Callable[[str, str], None] | None = None  # (queue name, "paused"|"rate"|"group")
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self.request_ttl_seconds = float(request_ttl_seconds)
        self._request_ttl_ms = round(request_ttl_seconds * 1000)
        self.payload_max_bytes = payload_max_bytes
        self.result_ttl_seconds = check_seconds("result_ttl_seconds", result_ttl_seconds)
        self.result_max_bytes = check_whole("result_max_bytes", result_max_bytes, 1)
        self.wait_replicas = wait_replicas
        self.wait_timeout_seconds = float(wait_timeout_seconds)
        wait = ReplicaWait(wait_replicas, round(wait_timeout_seconds * 1000)) if wait_replicas else None
        self._scripts = QueueScripts(self.redis, self.keys, wait)
        self._sweep_cursor = 0
        self._ended: EndedListener | None = None  # the subscription result() waits on

    @classmethod
    def from_url(cls, url: str, name: str = "default", **options: Any) -> Queue:
        """A plain queue on a new client for ``url`` (``setqueue.client.connect``); any kind: ``open_queue``."""
        return cls(connect(url), name, **options)

    @property
    def queues(self) -> Sequence[Queue]:
        return (self,)

    @property
    def shards(self) -> Sequence[Queue]:
        return (self,)

    # -- producers

    def enqueue(
        self,
        ids: Iterable[str] | Mapping[str, Any],
        *,
        delay: float | None = None,
        at: float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        timeout: float | None = None,
        group: str | None = None,
    ) -> int:
        """Add job ids (or a mapping id -> payload, docs/guide.md#the-model) at the back of the line, in
        order; returns how many were new (a known id is not added again).

        ``priority`` (-10..10): higher first. ``delay`` (seconds) or ``at`` (Unix seconds), not both, holds
        them in scheduled; the past means now. ``max_attempts`` and ``timeout`` (0 = none) override the
        workers'. ``group``: groups take turns. Everything is checked before anything is sent."""
        validate_priority(priority)
        if group is not None:
            validate_group(group)
        if delay is not None and at is not None:
            raise ValueError("give delay or at, not both")
        delay_ms = 0 if delay is None else round(check_seconds("delay", delay) * 1000)
        at_ms = None if at is None else round(check_seconds("at", at) * 1000)
        own = job_options(max_attempts, timeout, current_trace_parent())
        items = job_items(ids, self.payload_max_bytes)
        with_payload = isinstance(ids, Mapping)
        added = 0
        for chunk in _chunks(items):
            added += self._scripts.enqueue(
                chunk,
                with_payloads=with_payload,
                request_ttl_ms=self._request_ttl_ms,
                wake_cap=self.wake_cap,
                delay_ms=delay_ms,
                at_ms=at_ms,
                priority=priority,
                job_options=own,
                group=group or "",
            )
        return added

    # -- workers

    def claim(self, count: int = 1, *, request_id: str | None = None) -> list[Lease]:
        """Claim up to ``count`` jobs from the front of the line (priority, then FIFO) in one script call;
        one lease covers them until each ends. Due scheduled jobs join the line first. The same
        ``request_id`` retries a call whose reply was lost and returns the same leases."""
        if count < 1:
            raise ValueError("count must be at least 1")
        leases, header = self._scripts.claim(
            min(count, MAX_IDS_PER_CALL),
            self._lease,
            request_ttl_ms=self._request_ttl_ms,
            lease_ms=self._lease_ms,
            promote=MAX_IDS_PER_CALL,
            wake_cap=self.wake_cap,
            token=request_id,
        )
        self.next_due = None if header.next_at is None else max(0.0, header.next_at - header.now)
        self._next_due_seen = time.monotonic()
        self.flow_limited = header.limited
        if header.held is not None and self.on_held is not None:
            self.on_held(self.name, header.held)
        return leases

    def _lease(  # noqa: PLR0917 - the fields of one job of claim.lua's reply, in its order
        self,
        job_id: str,
        token: str,
        attempt: int,
        payload: str | None,
        enqueued_at: float | None,
        claimed_at: float,
        priority: int,
        queue: str,
        own: str | None,
    ) -> Lease:
        max_attempts, timeout = parse_job_options(own)
        return Lease(
            job_id,
            token,
            attempt,
            payload,
            enqueued_at,
            claimed_at,
            priority,
            queue,
            max_attempts,
            timeout,
            trace_parent=parse_trace_parent(own),
            reporter=self.progress,
        )

    def due_in(self) -> float | None:
        """Seconds until more could be claimed, as the last short claim saw it (None: not known)."""
        if self.next_due is None:
            return None
        return self.next_due - (time.monotonic() - self._next_due_seen)

    def wake_keys(self) -> list[str]:
        """The lists an idle worker blocks on (one per shard)."""
        return [self.keys.wake]

    def wait_for_work(self, timeout: float) -> bool:
        """Block until woken by an enqueue or requeue, ``timeout`` passes, or ``due_in`` comes."""
        return until_due(self.due_in(), timeout, lambda seconds: take_wake_token(self.redis, self.wake_keys(), seconds))

    def renew(self, lease: Lease) -> bool:
        """Extend the lease while its claim still owns the job; a lost lock is never re-created."""
        return self.renew_many([lease])[0]

    def renew_many(self, leases: Sequence[Lease]) -> list[bool]:
        return [outcome is RenewOutcome.RENEWED for outcome in self.renew_outcomes(leases)]

    def renew_outcomes(self, leases: Sequence[Lease]) -> list[RenewOutcome]:
        """As ``renew_many``, telling a lost lease from a cancelled job."""
        outcomes: list[RenewOutcome] = []
        for chunk in _chunks(leases):
            outcomes += [_RENEWALS[r] for r in self._scripts.renew(chunk, lease_ms=self._lease_ms)]
        return outcomes

    def ack(self, lease: Lease, result: Any = None) -> bool:
        """Move the job to done keeping ``result`` (see ``ack_many``); False (nothing changed) if stale."""
        return self.ack_many([lease], results=[result])[0].acked

    def ack_many(
        self, leases: Sequence[Lease], *, results: Sequence[Any] | None = None, request_id: str | None = None
    ) -> list[AckResult]:
        """Ack a batch, one script call per MAX_IDS_PER_CALL. ``results`` (None: nothing) are kept for
        ``result()``, all checked first. ``request_id`` retries a call whose reply was lost. Out of
        memory, the jobs are acked without their results."""
        given = list(results) if results is not None else [None] * len(leases)
        if len(given) != len(leases):
            raise ValueError(f"{len(given)} results for {len(leases)} leases")
        kept = self.result_ttl_seconds > 0
        encoded = [encode_result(value, self.result_max_bytes) if kept else None for value in given]
        out: list[AckResult] = []
        for number, (chunk, texts) in enumerate(zip(_chunks(leases), _chunks(encoded), strict=True)):
            now, acked, dropped = self._scripts.ack(
                chunk,
                texts,
                request_ttl_ms=self._request_ttl_ms,
                done_max_count=self.done_max_count,
                result_ttl_ms=round(self.result_ttl_seconds * 1000),
                wake_cap=self.wake_cap,
                request_id=_part(request_id, number),
            )
            if dropped:
                log.warning(
                    "queue %s: Redis is full (out of memory): %d jobs done without keeping what their handlers "
                    "returned (result() says it is gone)",
                    self.name,
                    sum(1 for ok, kept_text in zip(acked, texts, strict=True) if ok and kept_text),
                )
            for lease, ok in zip(chunk, acked, strict=True):
                waited = None if not ok or lease.enqueued_at is None else max(0.0, now - lease.enqueued_at)
                out.append(AckResult(ok, waited))
        return out

    def fail(
        self,
        lease: Lease,
        reason: str = "",
        *,
        retry: bool = True,
        delay: float | None = None,
        request_id: str | None = None,
    ) -> FailOutcome:
        """Give up on this attempt: retried (``RETRIED``) after ``delay`` or ``backoff_delay`` while
        attempts remain, else (or with ``retry=False``) dead-lettered (``DEAD``). A stale or already
        failed lease changes nothing: ``STALE``. ``request_id`` as for ``ack_many``."""
        seconds = self.backoff_delay(lease.attempt) if delay is None else check_seconds("delay", delay)
        return self._end_attempts([(lease, "retry" if retry else "dead", reason, round(seconds * 1000))], request_id)[0]

    def backoff_delay(self, attempt: int) -> float:
        """The retry delay (docs/guide.md#retries-backoff-dead-letters)."""
        if self.retry_backoff_seconds <= 0:
            return 0.0
        exponent = min(max(attempt, 1) - 1, 64)  # 2^64 * base is past any max already
        d = min(self.retry_backoff_max_seconds, self.retry_backoff_seconds * 2.0**exponent)
        return random.uniform(d / 2, d)

    def release(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[FailOutcome]:
        """Hand jobs back unprocessed to their old place, no attempt used. ``request_id`` as for ``ack_many``."""
        return self._end_attempts([(lease, "release", "", 0) for lease in leases], request_id)

    def _end_attempts(self, items: Sequence[tuple[Lease, str, str, int]], request_id: str | None) -> list[FailOutcome]:
        """fail.lua for each (lease, mode, reason, delay ms)."""
        outcomes: list[FailOutcome] = []
        for number, chunk in enumerate(_chunks(items)):
            replied = self._scripts.fail(
                chunk,
                request_ttl_ms=self._request_ttl_ms,
                max_attempts=self.max_attempts,
                wake_cap=self.wake_cap,
                request_id=_part(request_id, number),
            )
            outcomes += [FailOutcome(o) for o in replied]
        return outcomes

    # -- the cleaner

    def sweep(self, limit: int = 1000) -> SweepResult:
        """Requeue (or dead-letter) in_progress ids whose lock is gone, examining up to ``limit`` from where
        the last call's ZSCAN stopped; also applies done's age retention."""
        k = self.keys
        requeued: list[str] = []
        dead: list[str] = []
        trimmed = 0
        examined = 0
        trim_pending = True
        while True:
            page_size = max(1, min(MAX_IDS_PER_CALL, limit - examined))
            self._sweep_cursor, page = self.redis.zscan(k.in_progress, self._sweep_cursor, count=page_size)  # type: ignore[misc]
            candidates = [_text(member) for member, _rank in page]  # type: ignore[arg-type]
            if candidates or trim_pending:
                # Owners as read: the script checks they still hold.
                read = self.redis.hmget(k.owners, candidates) if candidates else []
                owners = [None if o is None else _text(o) for o in read]
                page_requeued, page_dead, page_trimmed, _ = self._scripts.sweep(
                    candidates,
                    owners,
                    request_ttl_ms=self._request_ttl_ms,
                    max_attempts=self.max_attempts,
                    wake_cap=self.wake_cap,
                    done_max_age_ms=round(self.done_max_age_seconds * 1000) if trim_pending else 0,
                    trim_limit=MAX_IDS_PER_CALL,
                )
                requeued += page_requeued
                dead += page_dead
                trimmed += page_trimmed
                trim_pending = False
            examined += len(candidates)
            if self._sweep_cursor == 0 or examined >= limit:
                return SweepResult(requeued, dead, trimmed)

    # -- operators

    def stats(self) -> dict[str, Any]:
        """Sizes of the six states, todos per priority and the oldest unfinished job's age, in one snapshot."""
        sizes, age_ms, by_priority = self._scripts.stats()
        return {**sizes, "oldest_pending_age_seconds": age_ms / 1000, "todos_by_priority": by_priority}

    def inspect(self, job_id: str) -> JobInfo | None:
        """Everything the queue knows about one id, or None."""
        validate_job_id(job_id)
        k = self.keys
        pipe = SnapshotReads(self.redis)
        pipe.zscore(k.todos, job_id)
        pipe.zscore(k.in_progress, job_id)
        pipe.sismember(k.done, job_id)
        pipe.sismember(k.failed, job_id)
        pipe.zscore(k.scheduled, job_id)
        pipe.sismember(k.cancelled, job_id)
        for hash_key in (
            k.priorities,
            k.attempts,
            k.payloads,
            k.errors,
            k.owners,
            k.finished,
            k.options,
            k.history,
            k.progress,
            k.results,
        ):
            pipe.hget(hash_key, job_id)
        pipe.zscore(k.pending, job_id)
        pipe.zscore(k.done_log, job_id)
        pipe.zscore(k.grouped, job_id)
        pipe.hget(k.group_of, job_id)
        todo_rank, running_rank, in_done, in_failed, due, in_cancelled, *rest = pipe.execute()
        kept_priority, attempts, payload, error, owner, finished, own, history, progress, result = rest[:10]
        enqueued, done_at, grouped_rank, group = rest[10:]
        if todo_rank is None:
            todo_rank = grouped_rank  # waiting in its group's line
        member = (todo_rank is not None, running_rank is not None, in_done, in_failed, due is not None, in_cancelled)
        states = [name for name, is_member in zip(STATES, member, strict=True) if is_member]
        if not states:
            return None
        state = states[0]
        rank = todo_rank if todo_rank is not None else running_rank
        priority: int | None = None
        if rank is not None:
            priority = priority_of_rank(rank)
        elif state in ("scheduled", "failed"):
            priority = int(kept_priority) if kept_priority is not None else 0
        finished_at: float | None = None
        if state in ("done", "failed", "cancelled"):
            # "<enqueued ms>:<finished ms>:<attempts>[:1]" (":1": returned a result); missing: None, never 0.
            fields = _text(finished).split(":") if finished else []
            enqueued_ms, finished_ms, attempts = [*fields, "", "", ""][:3]
            enqueued = int(enqueued_ms) if enqueued_ms else None
            finished_at = int(finished_ms) / 1000 if finished_ms else None
            attempts = attempts or None
        elif attempts is None:
            attempts = 0  # never claimed yet
        token = None if owner is None else _text(owner)
        ttl_ms = self.redis.pttl(k.lock(token)) if token is not None else -2
        own = None if own is None else _text(own)
        max_attempts, timeout = parse_job_options(own)
        reason, mark, trace = ("" if error is None else _text(error)).partition(TRACEBACK_MARK)
        return JobInfo(
            id=job_id,
            queue=self.name,
            state=state,
            priority=priority,
            attempts=None if attempts is None else int(attempts),
            payload=None if payload is None else _text(payload),
            error=None if error is None else reason,
            enqueued_at=None if enqueued is None else enqueued / 1000,
            done_at=None if done_at is None or state != "done" else done_at / 1000,
            finished_at=finished_at,
            due_at=None if due is None else due / 1000,
            lock_token=token if ttl_ms >= 0 else None,  # type: ignore[operator]
            lock_ttl_seconds=ttl_ms / 1000 if ttl_ms >= 0 else None,  # type: ignore[operator]
            max_attempts=max_attempts,
            timeout=timeout,
            traceback=mark.lstrip("\n") + trace if mark else None,
            trace_parent=parse_trace_parent(own),
            history=_history(history),
            progress=_progress(progress),
            result=None if result is None else decode_result(_text(result)),
            result_kept=result is not None,
            group=None if group is None else _text(group),
        )

    def history(self, job_id: str) -> list[HistoryEntry]:
        """The job's off-happy-path transitions, oldest first (the last ten)."""
        return list(_history(self.redis.hget(self.keys.history, validate_job_id(job_id))))

    def progress(self, lease: Lease, fraction: float, message: str = "") -> bool:
        """Keep the handler's progress report; False when the lease no longer owns the job. A full Redis
        drops the report instead of raising."""
        try:
            return self._scripts.progress(lease, fraction, message)
        except redis.OutOfMemoryError:
            return self._owner(lease.id) == lease.token

    def _owner(self, job_id: str) -> str | None:
        owner = self.redis.hget(self.keys.owners, validate_job_id(job_id))
        return None if owner is None else _text(owner)  # type: ignore[arg-type]

    def cancel(self, job_id: str) -> str | None:
        """Cancel a waiting or running job (docs/guide.md#results-cancel-history-progress); returns the state
        it was in (an ended job's, unchanged), or None if unknown. Idempotent."""
        token = self._owner(job_id)
        return self._scripts.cancel(job_id, token, request_ttl_ms=self._request_ttl_ms, wake_cap=self.wake_cap)

    # -- results

    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """What ``job_id``'s handler returned, once it ends (TimeoutError after ``timeout``; None: wait
        forever). Raises JobFailed (dead-lettered or cancelled), ResultGone (not kept), UnknownJob."""
        return self.results([job_id], timeout)[job_id]

    async def result_async(self, job_id: str, timeout: float | None = None) -> Any:
        """``result`` in a thread, for asyncio."""
        return await asyncio.to_thread(self.result, job_id, timeout)

    def results(self, job_ids: Iterable[str], timeout: float | None = None) -> dict[str, Any]:
        """``result`` of several jobs: id -> value; raises as ``result`` for the first that does. Calls
        share one subscription."""
        wanted = list(dict.fromkeys(validate_job_id(job_id) for job_id in job_ids))
        if timeout is not None:
            check_seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        ended: dict[str, Any] = {}
        if self._ended is None:
            self._ended = EndedListener(self.redis, self.keys.ended_channel)
        woken = self._ended.watch(wanted)  # first: no job can end unseen between a look and the wait
        try:
            waiting = self._look(wanted, ended)
            while waiting:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{len(waiting)} of {len(wanted)} jobs have not ended (e.g. {waiting[0]!r})")
                if woken.wait(left):
                    woken.clear()
                    self._ended.check()
                    waiting = self._look(waiting, ended)
        finally:
            self._ended.forget(wanted, woken)
        return {job_id: ended[job_id] for job_id in wanted}

    def _look(self, job_ids: Sequence[str], ended: dict[str, Any]) -> list[str]:
        """One round trip: each ended job's value into ``ended`` (raising as ``result``); returns the rest.
        One snapshot, or an ack between a job's done and pending reads would make it look unknown."""
        k = self.keys
        pipe = SnapshotReads(self.redis)
        for job_id in job_ids:
            pipe.sismember(k.done, job_id)
            pipe.hget(k.results, job_id)
            pipe.hget(k.finished, job_id)
            pipe.sismember(k.failed, job_id)
            pipe.sismember(k.cancelled, job_id)
            pipe.hget(k.errors, job_id)
            pipe.zscore(k.pending, job_id)
            pipe.zscore(k.scheduled, job_id)
        replies = pipe.execute()
        waiting: list[str] = []
        for n, job_id in enumerate(job_ids):
            in_done, result, finished, in_failed, in_cancelled, error, pending, due = replies[8 * n : 8 * n + 8]
            if in_done:
                if result is not None:
                    ended[job_id] = decode_result(_text(result))
                elif finished is not None and _text(finished).split(":")[3:4] == ["1"]:  # it returned one
                    why = "past its TTL, or Redis was full as it ended"
                    raise ResultGone(f"job {job_id!r} is done, but its result is not kept ({why})")
                else:
                    ended[job_id] = None
            elif in_failed or in_cancelled:
                reason, mark, trace = ("" if error is None else _text(error)).partition(TRACEBACK_MARK)
                state = "failed" if in_failed else "cancelled"
                raise JobFailed(job_id, state, reason or None, mark.lstrip("\n") + trace if mark else None)
            elif pending is None and due is None:
                raise UnknownJob(f"job {job_id!r} is not in queue {self.name!r}")
            else:
                waiting.append(job_id)
        return waiting

    def requeue_failed(self, ids: Iterable[str] | None = None, *, limit: int = 1000) -> int:
        """Move dead-lettered jobs (the ids given, or all up to ``limit``) back to todos; returns how many."""
        k = self.keys
        if ids is None:
            check_whole("limit", limit, 1)
            wanted: list[str] = []
            for job_id in self.redis.sscan_iter(k.failed, count=MAX_IDS_PER_CALL):
                wanted.append(_text(job_id))
                if len(wanted) >= limit:
                    break
        else:
            wanted = [validate_job_id(i) for i in ids]
        moved = 0
        for chunk in _chunks(wanted):
            moved += self._scripts.requeue_failed(chunk, request_ttl_ms=self._request_ttl_ms, wake_cap=self.wake_cap)
        return moved

    def delete(self, job_id: str) -> str | None:
        """Remove a job whatever its state; returns that state, or None if unknown."""
        token = self._owner(job_id)
        return self._scripts.delete(job_id, token, request_ttl_ms=self._request_ttl_ms, wake_cap=self.wake_cap)

    # -- flow control

    def pause(self) -> bool:
        """Stop jobs from starting: once this returns no claim takes one. Running jobs, enqueues, due
        jobs and the cleaner go on. Whether it was running."""
        return self._scripts.set_limits("pause", "", wake_cap=self.wake_cap)

    def resume(self) -> bool:
        """Let jobs start again, waking idle workers. Whether it was paused."""
        return self._scripts.set_limits("resume", "", wake_cap=self.wake_cap)

    def set_rate(self, rate: Rate | str | None, *, burst: int | None = None) -> None:
        """At most ``rate`` starts across all workers (``Rate`` or ``"100/s"``; None: no limit), ``burst``
        at once (docs/guide.md#flow-control); in force from the next claim."""
        self._scripts.set_limits("rate", _rate(rate, burst), wake_cap=self.wake_cap)

    def set_group_limits(
        self,
        group: str | None = None,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        burst: int | None = None,
    ) -> None:
        """Limits of ``group`` (None: every group's default): ``concurrency`` in progress and ``rate`` of
        starts (None: no limit). Own limits replace the default wholly; both None restores it."""
        if group is not None:
            validate_group(group)
        limits = GroupLimits(None if concurrency is None else parse_concurrency(concurrency), Rate.given(rate, burst))
        if group is not None:
            spec = "" if limits == GroupLimits() else limits.spec()
            self._scripts.set_limits(f"group:{group}", spec, wake_cap=self.wake_cap)
            return
        self._scripts.set_limits("group_concurrency", str(limits.concurrency or ""), wake_cap=self.wake_cap)
        self._scripts.set_limits("group_rate", limits.rate.spec() if limits.rate else "", wake_cap=self.wake_cap)

    def limits(self) -> Limits:
        k = self.keys
        pipe = self.redis.pipeline(transaction=True)
        pipe.hmget(k.flow, ["paused", "rate", "group_concurrency", "group_rate"])
        pipe.hgetall(k.group_limits)
        (paused, rate, concurrency, group_rate), own = pipe.execute()
        return Limits(
            paused=paused is not None,
            rate=None if rate is None else Rate.from_spec(_text(rate)),
            group_default=GroupLimits(
                None if concurrency is None else int(concurrency),
                None if group_rate is None else Rate.from_spec(_text(group_rate)),
            ),
            groups={_text(name): GroupLimits.from_spec(_text(spec)) for name, spec in own.items()},
        )

    def groups(self, most: int = 100) -> list[GroupInfo]:
        """Groups with jobs waiting or running (at most ``most``, turn-takers first), with state and limits."""
        if most < 1:
            raise ValueError("most must be at least 1")
        _total, rows = self._scripts.list_groups(min(most, 10_000))
        limits = self.limits()
        return [
            GroupInfo(name, waiting, running, state, limits.groups.get(name, limits.group_default))
            for name, waiting, running, state in rows
        ]

    def seconds_since_sweep(self) -> float | None:
        """Seconds since anyone swept this queue (Redis clock; None: not within a day)."""
        ttl_ms = self.redis.pttl(self.keys.swept)
        return None if ttl_ms < 0 else (SWEPT_STAMP_MS - ttl_ms) / 1000  # type: ignore[operator]

    def ping(self, *, record: bool = False) -> bool:
        """Redis answers and the queue was not opened sharded (else OptionError)."""
        answered = bool(self.redis.ping())
        sharded = self.redis.get(self.keys.shards)
        if sharded is not None and int(sharded) != 1:
            raise OptionError("shards", f"queue {self.name} has {int(sharded)} shards, not 1: open it with that many")
        return answered

    # -- periodic jobs

    def create_periodic_runs(self, runs: Sequence[tuple[str, int, str, str | None]]) -> tuple[list[str], list[str]]:
        """For each (name, slot ms, run id, payload), enqueue the run unless one of that slot or later
        exists; returns the names created and those seen first (slot recorded, no run)."""
        created: list[str] = []
        first_seen: list[str] = []
        for chunk in _chunks(runs):
            made, first = self._scripts.periodic(chunk, request_ttl_ms=self._request_ttl_ms, wake_cap=self.wake_cap)
            created += made
            first_seen += first
        return created, first_seen

    def periodic_slots(self) -> dict[str, float]:
        """Schedule name -> its latest slot (Unix seconds)."""
        slots = self.redis.hgetall(self.keys.periodic)
        return {_text(name): int(ms) / 1000 for name, ms in slots.items()}  # type: ignore[union-attr]

    def close(self) -> None:
        if self._ended is not None:
            self._ended.close()
        self.redis.close()
