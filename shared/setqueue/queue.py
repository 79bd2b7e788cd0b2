"""The set-model work queue: todos -> in_progress -> done, plus failed (the dead-letter set).

Every transition that touches more than one key is one Lua script (see ``lua/``), so no crash
and no concurrent cleaner can observe a half-done step. Mutating scripts take a fresh request
id and keep their result under ``setqueue:{Q}:req:<id>`` for ``request_ttl_seconds``: redis-py
resends a command after a connection error, and a resent claim, ack or fail then returns the
first result instead of applying twice. How each script is called (its KEYS, ARGV and reply) is
``setqueue.scripts``'s business; this module batches the calls and shapes their results.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from setqueue.config import default
from setqueue.keys import MAX_IDS_PER_CALL, QueueKeys, validate_job_id
from setqueue.scripts import QueueScripts
from setqueue.scripts import text as _text


def _chunks(items: Sequence[Any], size: int = MAX_IDS_PER_CALL) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on one job. ``token`` proves ownership; ``attempt`` counts claims (1 = first)."""

    id: str
    token: str
    attempt: int
    payload: str | None
    enqueued_at: float | None  # Redis clock, seconds since the epoch; None if enqueued by other means
    claimed_at: float  # Redis clock

    @property
    def queue_wait_seconds(self) -> float | None:
        return None if self.enqueued_at is None else max(0.0, self.claimed_at - self.enqueued_at)


@dataclass(frozen=True, slots=True)
class AckResult:
    acked: bool  # False: the lease was stale and nothing changed
    end_to_end_seconds: float | None  # enqueue -> done by the Redis clock, when known


class FailOutcome(enum.StrEnum):
    RETRIED = "retried"  # back in todos for another attempt
    DEAD = "dead"  # moved into failed
    RELEASED = "released"  # back in todos without using up an attempt
    STALE = "stale"  # the lease was no longer ours; nothing changed


class PermanentJobError(Exception):
    """Raise from a job handler to dead-letter the job at once, without retries."""


class JobTimeout(BaseException):
    """Raised in a job's thread when it runs past JOB_TIMEOUT_SECONDS (an async job is cancelled
    instead). A BaseException, as Dramatiq's time limit is, so that a handler's ``except
    Exception`` does not swallow it; catch it to clean up, then let it go."""


@dataclass(frozen=True, slots=True)
class SweepResult:
    requeued: list[str]
    dead_lettered: list[str]
    done_trimmed: int

    @property
    def total(self) -> int:
        """Ids moved out of in_progress."""
        return len(self.requeued) + len(self.dead_lettered)


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: str
    state: str  # todos, in_progress, done or failed
    attempts: int | None  # claims so far (0: never claimed); None: not known (finished before 0.2)
    payload: str | None
    error: str | None
    enqueued_at: float | None  # Redis clock, seconds; None: not known
    done_at: float | None  # when it was acked into done
    finished_at: float | None  # when it reached done or failed
    lock_token: str | None
    lock_ttl_seconds: float | None


class Queue:
    """One named queue in one Redis (or one Redis Cluster slot)."""

    def __init__(
        self,
        client: redis.Redis,
        name: str = default("QUEUE_NAME"),
        *,
        lease_seconds: float = default("LEASE_SECONDS"),
        max_attempts: int = default("MAX_ATTEMPTS"),
        done_max_count: int = default("DONE_MAX_COUNT"),
        done_max_age_seconds: float = default("DONE_MAX_AGE_SECONDS"),
        request_ttl_seconds: float = 120.0,
        wake_cap: int = 64,
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
        self.redis = client
        self.keys = QueueKeys(name)
        self.name = name
        self.lease_seconds = float(lease_seconds)
        self.max_attempts = max_attempts
        self.done_max_count = done_max_count
        self.done_max_age_seconds = float(done_max_age_seconds)
        self.wake_cap = wake_cap
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self._request_ttl_ms = round(request_ttl_seconds * 1000)
        self._scripts = QueueScripts(client, self.keys)
        self._sweep_cursor = 0

    @classmethod
    def from_url(cls, url: str, name: str = default("QUEUE_NAME"), **options: Any) -> Queue:
        """A queue on a new client for ``url`` (redis:// rediss:// unix://).

        The client resends a command after a connection error or timeout (a few times, with
        backoff): every script is safe to resend. Socket timeouts stop a call from hanging
        forever on a dead connection. ``options`` go to the constructor.
        """
        client = redis.Redis.from_url(
            url,
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), retries=5),
            decode_responses=True,
            socket_connect_timeout=5,
            socket_timeout=30,
            socket_keepalive=True,
            health_check_interval=30,
        )
        return cls(client, name, **options)

    # -- producers ---------------------------------------------------------------------------

    def enqueue(self, ids: Iterable[str] | Mapping[str, str]) -> int:
        """Add job ids (or a mapping id -> payload) to todos; returns how many were new.

        An id already in todos, in_progress, done or failed is not added again.
        """
        with_payload = isinstance(ids, Mapping)
        items = list(ids.items()) if isinstance(ids, Mapping) else [(i, None) for i in ids]
        for job_id, payload in items:
            validate_job_id(job_id)
            if with_payload and not isinstance(payload, str):
                raise TypeError(f"payload of {job_id!r} must be a str")
        added = 0
        for chunk in _chunks(items):
            added += self._scripts.enqueue(
                chunk, with_payloads=with_payload, request_ttl_ms=self._request_ttl_ms, wake_cap=self.wake_cap
            )
        return added

    # -- workers -----------------------------------------------------------------------------

    def claim(self, count: int = 1) -> list[Lease]:
        """Claim up to ``count`` random jobs from todos in one script call: each moves to
        in_progress, and one lease (a lock with a TTL) covers them all until each is acked,
        failed or released."""
        if count < 1:
            raise ValueError("count must be at least 1")
        return self._scripts.claim(
            min(count, MAX_IDS_PER_CALL), Lease, request_ttl_ms=self._request_ttl_ms, lease_ms=self._lease_ms
        )

    def wait_for_work(self, timeout: float) -> bool:
        """Block until an enqueue (or a requeue) wakes us, or ``timeout`` seconds pass."""
        return self.redis.blpop([self.keys.wake], timeout=max(timeout, 0.01)) is not None

    def renew(self, lease: Lease) -> bool:
        """Extend the lease if the lock still holds its token; never re-creates a lost lock."""
        return self.renew_many([lease])[0]

    def renew_many(self, leases: Sequence[Lease]) -> list[bool]:
        """One PEXPIRE per claim extends all of its jobs that are still ours."""
        renewed: list[bool] = []
        for chunk in _chunks(leases):
            renewed += self._scripts.renew(chunk, lease_ms=self._lease_ms)
        return renewed

    def ack(self, lease: Lease) -> bool:
        """Move the job to done. False when the lease is stale: then nothing changed."""
        return self.ack_many([lease])[0].acked

    def ack_many(self, leases: Sequence[Lease]) -> list[AckResult]:
        results: list[AckResult] = []
        for chunk in _chunks(leases):
            now, acked = self._scripts.ack(
                chunk, request_ttl_ms=self._request_ttl_ms, done_max_count=self.done_max_count
            )
            for lease, ok in zip(chunk, acked, strict=True):
                if not ok:
                    results.append(AckResult(False, None))
                elif lease.enqueued_at is None:
                    results.append(AckResult(True, None))
                else:
                    results.append(AckResult(True, max(0.0, now - lease.enqueued_at)))
        return results

    def fail(self, lease: Lease, reason: str = "", *, retry: bool = True) -> FailOutcome:
        """Give up on this attempt: back to todos while attempts remain, else into failed.

        ``retry=False`` dead-letters at once (an error that no retry can fix). Failing a stale
        lease, or the same lease twice, changes nothing and returns ``FailOutcome.STALE``.
        """
        return self._fail([(lease, "retry" if retry else "dead", reason)])[0]

    def release(self, leases: Sequence[Lease]) -> list[FailOutcome]:
        """Hand jobs back to todos unprocessed, without using up an attempt (graceful shutdown)."""
        return self._fail([(lease, "release", "") for lease in leases])

    def _fail(self, items: Sequence[tuple[Lease, str, str]]) -> list[FailOutcome]:
        outcomes: list[FailOutcome] = []
        for chunk in _chunks(items):
            replied = self._scripts.fail(
                chunk, request_ttl_ms=self._request_ttl_ms, max_attempts=self.max_attempts, wake_cap=self.wake_cap
            )
            outcomes += [FailOutcome(o) for o in replied]
        return outcomes

    # -- the cleaner -------------------------------------------------------------------------

    def sweep(self, limit: int = 1000) -> SweepResult:
        """Requeue (or dead-letter) up to ``limit`` examined in_progress ids whose lock is gone.

        SSCANs in_progress in pages and resumes where the last call stopped, so a large
        in_progress set is covered over several calls. Also applies the age retention of done.
        """
        k = self.keys
        requeued: list[str] = []
        dead: list[str] = []
        trimmed = 0
        examined = 0
        trim_pending = True
        while True:
            page_size = max(1, min(MAX_IDS_PER_CALL, limit - examined))
            self._sweep_cursor, page = self.redis.sscan(k.in_progress, self._sweep_cursor, count=page_size)  # type: ignore[misc]
            candidates = [_text(c) for c in page]
            if candidates or trim_pending:
                # Who owned each candidate as we read it: the script checks that this still holds.
                owners = (
                    [None if o is None else _text(o) for o in self.redis.hmget(k.owners, candidates)]
                    if candidates
                    else []
                )
                page_requeued, page_dead, page_trimmed = self._scripts.sweep(
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

    # -- operators ---------------------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """Sizes of the four sets and the age of the oldest job not yet finished, in one snapshot."""
        todos, in_progress, done, failed, age_ms = self._scripts.stats()
        return {
            "todos": todos,
            "in_progress": in_progress,
            "done": done,
            "failed": failed,
            "oldest_pending_age_seconds": age_ms / 1000,
        }

    def inspect(self, job_id: str) -> JobInfo | None:
        """Everything the queue knows about one id, or None if it knows nothing."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=True)
        for key in k.sets.values():
            pipe.sismember(key, job_id)
        pipe.hget(k.attempts, job_id)
        pipe.hget(k.payloads, job_id)
        pipe.hget(k.errors, job_id)
        pipe.zscore(k.pending, job_id)
        pipe.zscore(k.done_log, job_id)
        pipe.hget(k.owners, job_id)
        pipe.hget(k.finished, job_id)
        *member, attempts, payload, error, enqueued, done_at, owner, finished = pipe.execute()
        states = [name for name, is_member in zip(k.sets, member, strict=True) if is_member]
        if not states:
            return None
        state = states[0]
        finished_at: float | None = None
        if state in ("done", "failed"):
            # What is kept of a finished job, in one field: "<enqueued ms>:<finished ms>:<attempts>".
            # A finished job without it is shown as unknown (None), never as 0.
            enqueued_ms, finished_ms, attempts = ([*_text(finished).split(":"), "", ""] if finished else ["", "", ""])[
                :3
            ]
            enqueued = int(enqueued_ms) if enqueued_ms else None
            finished_at = int(finished_ms) / 1000 if finished_ms else None
            attempts = attempts or None
        token = None if owner is None else _text(owner)
        ttl_ms = self.redis.pttl(k.lock(token)) if token is not None else -2
        return JobInfo(
            id=job_id,
            state=state,
            # A finished job without a count finished before counts were kept: unknown, not 0.
            attempts=int(attempts)
            if attempts is not None
            else (None if finished_at is None and state in ("done", "failed") else 0),
            payload=None if payload is None else _text(payload),
            error=None if error is None else _text(error),
            enqueued_at=None if enqueued is None else enqueued / 1000,
            done_at=None if done_at is None else done_at / 1000,
            finished_at=finished_at,
            lock_token=token if ttl_ms >= 0 else None,  # type: ignore[operator]
            lock_ttl_seconds=ttl_ms / 1000 if ttl_ms >= 0 else None,  # type: ignore[operator]
        )

    def requeue_failed(self, ids: Iterable[str] | None = None, *, limit: int = 1000) -> int:
        """Move dead-lettered jobs (all of them, up to ``limit``, or the ids given) back to todos."""
        k = self.keys
        if ids is None:
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
        """Remove a job from the queue whatever its state; returns that state, or None if unknown."""
        owner = self.redis.hget(self.keys.owners, validate_job_id(job_id))
        token = None if owner is None else _text(owner)  # type: ignore[arg-type]
        return self._scripts.delete(job_id, token, request_ttl_ms=self._request_ttl_ms)

    def ping(self) -> bool:
        return bool(self.redis.ping())

    def close(self) -> None:
        self.redis.close()
