"""The set-model work queue: todos -> in_progress -> done, plus failed (the dead-letter set).

Every transition that touches more than one key is one Lua script (see ``lua/``), so no crash
and no concurrent cleaner can observe a half-done step. Mutating scripts take a fresh request
id and keep their result under ``setqueue:{Q}:req:<id>`` for ``request_ttl_seconds``: redis-py
resends a command after a connection error, and a resent claim, ack or fail then returns the
first result instead of applying twice. How each script is called (its KEYS, ARGV and reply) is
``setqueue.scripts``'s business; this module batches the calls and shapes their results.

Every key of a queue shares one Redis Cluster hash tag, so a queue lives in one slot and runs on a
Redis Cluster as it does on one Redis: ``Queue.from_url`` (through ``connect``) finds out on the
first command which of the two the URL names.
"""

from __future__ import annotations

import contextlib
import enum
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar, cast

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException, SlotNotCoveredError
from redis.retry import Retry

from setqueue.config import SettingError, default, redact_url
from setqueue.keys import (
    MAX_IDS_PER_CALL,
    STATES,
    QueueKeys,
    check_utf8,
    priority_of_rank,
    validate_job_id,
    validate_priority,
    validate_queue_name,
)
from setqueue.replication import ReplicaWait
from setqueue.scripts import QueueScripts
from setqueue.scripts import new_request_id as _new_request_id
from setqueue.scripts import text as _text

T = TypeVar("T")

# What a Queue runs on: one Redis, or a Redis Cluster (a queue's keys are all in one slot).
Client: TypeAlias = redis.Redis | RedisCluster


class ClusterUnavailable(redis.ConnectionError):
    """No node of the Redis Cluster could tell where a slot lives (all unreachable, or the slot
    not served during a failover): as transient as a refused connection, and reported as one."""


@contextlib.contextmanager
def _cluster_reachability() -> Iterator[None]:
    """redis-py reports a cluster it cannot map (while refreshing its slot table) with exceptions
    that are not RedisErrors; turn them into the ConnectionError every caller already waits out.
    Its other RedisClusterExceptions (a cross-slot transaction, ...) are bugs and pass through."""
    try:
        yield
    except SlotNotCoveredError as exc:
        raise ClusterUnavailable(str(exc)) from exc
    except RedisClusterException as exc:
        if type(exc) is not RedisClusterException:
            raise
        raise ClusterUnavailable(str(exc)) from exc


class _ClusterPipeline:
    """A RedisCluster pipeline (transaction=True: MULTI/EXEC on the node of its one slot) whose
    ``execute`` reports an unreachable cluster as a ConnectionError; everything else is the
    pipeline's own (commands queue on it, as redis-py's Pipeline does)."""

    def __init__(self, pipe: ClusterPipeline) -> None:
        self._pipe = pipe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

    def __enter__(self) -> _ClusterPipeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._pipe.reset()  # type: ignore[no-untyped-call]

    def __len__(self) -> int:
        return len(self._pipe)

    def __bool__(self) -> bool:
        return True

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        with _cluster_reachability():
            return self._pipe.execute(raise_on_error)


class ClusterAwareRedis(redis.Redis):
    """A ``redis.Redis`` for a URL that may name one Redis or any node of a Redis Cluster.

    Nothing connects until the first command, which first asks the node (``HELLO``, which every
    user may send, on a connection of its own to db 0) whether it runs in cluster mode. If not,
    this is the plain client it looks like. If so, every command from then on goes through a
    redis-py ``RedisCluster`` made from the same URL and options: it learns the other nodes from
    this one, sends each command to the master of its key's slot, follows MOVED and ASK, and
    finds the new master after a failover. A queue's keys share one hash tag, so its scripts,
    BLPOP on its wake-up list and its MULTI/EXEC pipelines each go to one node.

    A cluster has only database 0 and is reached over TCP: a URL asking otherwise raises
    ``SettingError`` for REDIS_URL (on every call, from the first on), before anything is sent."""

    def __init__(self, url: str, *, cluster: RedisCluster | None = None, **options: Any) -> None:
        super().__init__(connection_pool=redis.ConnectionPool.from_url(url, **options))
        self.auto_close_connection_pool = True
        self._url = url
        self._options = options
        self._cluster = cluster
        self._decided = cluster is not None
        self._refused: SettingError | None = None
        self._deciding = threading.Lock()

    @classmethod
    def around(cls, cluster: RedisCluster) -> ClusterAwareRedis:
        """A client whose every command goes through ``cluster`` (a RedisCluster made by hand)."""
        return cls("redis://", cluster=cluster)

    def cluster_client(self) -> RedisCluster | None:
        """The cluster client when the URL names a cluster node, else None (connects to decide)."""
        if not self._decided:
            with self._deciding:
                if not self._decided:
                    try:
                        self._cluster = self._connect_cluster() if self._is_cluster_node() else None
                    except SettingError as exc:
                        self._refused = exc
                    self._decided = True  # not when unreachable: the next command asks again
        if self._refused is not None:
            raise self._refused
        return self._cluster

    def _is_cluster_node(self) -> bool:
        pool = self.connection_pool
        kwargs = {**pool.connection_kwargs, "db": 0}  # a cluster node refuses SELECT of any other db
        probe = redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        try:
            reply = redis.Redis(connection_pool=probe).execute_command("HELLO")  # type: ignore[no-untyped-call]
        except redis.ResponseError:  # not an auth error (a ConnectionError): a Redis before 6, no cluster
            return False
        finally:
            probe.disconnect()
        if isinstance(reply, list):
            reply = dict(zip(reply[::2], reply[1::2], strict=False))
        mode = reply.get("mode", reply.get(b"mode")) if isinstance(reply, dict) else None
        return mode in ("cluster", b"cluster")

    def _connect_cluster(self) -> RedisCluster:
        kwargs = self.connection_pool.connection_kwargs
        where = redact_url(self._url)
        if "path" in kwargs:
            raise SettingError("REDIS_URL", f"{where} is a Redis Cluster node: reach it with redis:// or rediss://")
        if kwargs.get("db", 0) != 0:
            raise SettingError(
                "REDIS_URL", f"{where} is a Redis Cluster node: a cluster has only database 0 (end the URL in /0)"
            )
        with _cluster_reachability():
            # Not every slot need be served: a queue needs only its own, and a slot without a
            # master (during a failover) is an error of the commands on it, which are retried.
            return RedisCluster.from_url(self._url, require_full_coverage=False, **self._options)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        cluster = self.cluster_client()
        if cluster is None:
            return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        with _cluster_reachability():
            return cluster.execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        cluster = self.cluster_client()
        if cluster is None:
            return super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        # Not a redis.client.Pipeline, but it queues the same commands and executes them alike.
        return cast(Pipeline, _ClusterPipeline(cluster.pipeline(transaction=transaction)))  # type: ignore[no-untyped-call]

    def get_encoder(self) -> Any:
        return self._cluster.get_encoder() if self._cluster is not None else super().get_encoder()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        super().close()
        if self._cluster is not None:
            self._cluster.close()


def connect(
    url: str, *, socket_connect_timeout: float = 5, socket_timeout: float = 30, retries: int = 5
) -> ClusterAwareRedis:
    """The client ``Queue.from_url`` uses for ``url`` (redis:// rediss:// unix://), one Redis or a
    Redis Cluster node (see ``ClusterAwareRedis``; nothing connects before the first command).

    It resends a command after a connection error or timeout (``retries`` times, with backoff;
    every script is safe to resend), and its socket timeouts stop a call from hanging forever on
    a dead connection; a cluster client gets the same, plus following redirections and failovers.
    """
    # TCP keepalive is a TCP socket's option: a unix:// connection refuses the argument.
    tcp: dict[str, Any] = {} if url.startswith("unix:") else {"socket_keepalive": True}
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0) if retries else NoBackoff()
    return ClusterAwareRedis(
        url,
        retry=Retry(backoff, retries=retries),
        decode_responses=True,
        socket_connect_timeout=socket_connect_timeout,
        socket_timeout=socket_timeout,
        **tcp,
        health_check_interval=30,
    )


def until_due(due_in: float | None, timeout: float, block: Callable[[float], bool]) -> bool:
    """An idle worker's wait: ``block(seconds)`` (which waits for a wake-up), for at most ``timeout``
    seconds and never past ``due_in``, when the next scheduled job is due (True at once if it is)."""
    if due_in is not None:
        timeout = min(timeout, due_in)
        if timeout <= 0:
            return True
    return block(timeout)


def take_wake_token(client: redis.Redis, keys: Sequence[str], timeout: float) -> bool:
    """Block until one of the wake lists ``keys`` has a token, taking it (True), or ``timeout``
    passes (False): one BLPOP, so on a Redis Cluster the keys must share a slot."""
    # BLPOP's timeout has a resolution of 1 ms from Redis 6 on.
    return client.blpop(list(keys), timeout=max(timeout, 0.001)) is not None


def new_request_id() -> str:
    """A fresh id for one call of claim, ack_many, fail or release: passing the same id again
    retries that call (after a lost reply) instead of making a second one."""
    return _new_request_id()


def _part(request_id: str | None, number: int) -> str | None:
    """The request id of part ``number`` of a call that is split into several script calls."""
    return None if request_id is None else f"{request_id}-{number}"


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
    priority: int = 0  # -10 to 10, higher runs first
    queue: str = ""  # the name of the queue it came from

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


class RetryLater(Exception):
    """Raise from a job handler to fail this attempt and retry the job after ``seconds`` (it uses
    an attempt like any failure; once attempts are used up the job is dead-lettered)."""

    def __init__(self, seconds: float, reason: str = "") -> None:
        if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"RetryLater needs a finite number of seconds >= 0, got {seconds!r}")
        super().__init__(reason or f"retry in {seconds:g}s")
        self.seconds = float(seconds)


class MoveTo(Exception):
    """Raise from a job handler to move the job to another queue: the worker enqueues it there (same
    id, same payload, ``priority``) and then acks it here, so it runs there next. At least once: a
    worker that dies in between leaves it here to run again, and enqueue there is idempotent."""

    def __init__(self, queue: str, priority: int = 0) -> None:
        validate_queue_name(queue)
        validate_priority(priority)
        super().__init__(f"moved to queue {queue}")
        self.queue = queue
        self.priority = priority


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
    state: str  # todos, in_progress, done, failed or scheduled
    priority: int | None  # -10 to 10; None: not known (done, or from before 0.3)
    attempts: int | None  # claims so far (0: never claimed); None: not known (finished before 0.2)
    payload: str | None
    error: str | None
    enqueued_at: float | None  # Redis clock, seconds; None: not known
    done_at: float | None  # when it was acked into done
    due_at: float | None  # scheduled: when it becomes claimable (Unix seconds, Redis clock)
    finished_at: float | None  # when it reached done or failed
    lock_token: str | None
    lock_ttl_seconds: float | None


def _check_seconds(name: str, value: float) -> float:
    """A time in seconds: finite and not negative, or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


class Queue:
    """One named queue in one Redis (or one Redis Cluster slot).

    ``client``: a ``redis.Redis`` (used as it is), or a ``RedisCluster`` (wrapped so that the
    queue and the code handed ``queue.redis`` see a ``redis.Redis`` either way)."""

    def __init__(
        self,
        client: Client,
        name: str = default("QUEUE_NAME"),
        *,
        lease_seconds: float = default("LEASE_SECONDS"),
        max_attempts: int = default("MAX_ATTEMPTS"),
        done_max_count: int = default("DONE_MAX_COUNT"),
        done_max_age_seconds: float = default("DONE_MAX_AGE_SECONDS"),
        retry_backoff_seconds: float = default("RETRY_BACKOFF_SECONDS"),
        retry_backoff_max_seconds: float = default("RETRY_BACKOFF_MAX_SECONDS"),
        request_ttl_seconds: float = 120.0,
        wake_cap: int = 64,
        wait_replicas: int = default("WAIT_REPLICAS"),
        wait_timeout_seconds: float = default("WAIT_TIMEOUT_SECONDS"),
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
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise ValueError(f"wait_replicas must be a whole number >= 0, got {wait_replicas!r}")
        if not (isinstance(wait_timeout_seconds, int | float) and 0.001 <= wait_timeout_seconds < math.inf):
            raise ValueError(f"wait_timeout_seconds must be at least 0.001 and finite, got {wait_timeout_seconds!r}")
        _check_seconds("retry_backoff_seconds", retry_backoff_seconds)
        _check_seconds("retry_backoff_max_seconds", retry_backoff_max_seconds)
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
        self.next_due: float | None = None  # after an empty claim: when the next scheduled job is due
        self._next_due_seen = 0.0  # monotonic time of that claim
        self._lease_ms = max(1, round(lease_seconds * 1000))
        self.request_ttl_seconds = float(request_ttl_seconds)  # how long a call's result is kept for a resend
        self._request_ttl_ms = round(request_ttl_seconds * 1000)
        self.wait_replicas = wait_replicas
        self.wait_timeout_seconds = float(wait_timeout_seconds)
        # With wait_replicas, every write is confirmed by that many replicas (setqueue.replication).
        wait = ReplicaWait(wait_replicas, round(wait_timeout_seconds * 1000)) if wait_replicas else None
        self._scripts = QueueScripts(self.redis, self.keys, wait)
        self._sweep_cursor = 0

    @classmethod
    def from_url(cls, url: str, name: str = default("QUEUE_NAME"), **options: Any) -> Queue:
        """A queue on a new client for ``url`` (redis:// rediss:// unix://): one Redis, or any node
        of a Redis Cluster, found out on the first command (see ``connect``). The client resends
        a command after a connection error or timeout (a few times, with backoff): every script is
        safe to resend. ``options`` go to the constructor.
        """
        return cls(connect(url), name, **options)

    # -- producers ---------------------------------------------------------------------------

    def enqueue(
        self,
        ids: Iterable[str] | Mapping[str, str],
        *,
        delay: float | None = None,
        at: float | None = None,
        priority: int = 0,
    ) -> int:
        """Add job ids (or a mapping id -> payload) at the back of todos' line, in the order given;
        returns how many were new.

        ``priority`` (-10 to 10, default 0): a job is never claimed while a job of a higher priority
        waits in todos; within a priority, first in, first out. ``delay`` (seconds from now, Redis
        clock) or ``at`` (a Unix time in seconds) makes them due later: they wait in scheduled until
        then and join the line when due. Not both; a time in the past means now. An id already in
        todos, in_progress, done, failed or scheduled is not added again.
        """
        validate_priority(priority)
        if delay is not None and at is not None:
            raise ValueError("give delay or at, not both")
        delay_ms = 0 if delay is None else round(_check_seconds("delay", delay) * 1000)
        at_ms = None if at is None else round(_check_seconds("at", at) * 1000)
        with_payload = isinstance(ids, Mapping)
        items = list(ids.items()) if isinstance(ids, Mapping) else [(i, None) for i in ids]
        for job_id, payload in items:
            validate_job_id(job_id)
            if with_payload and not isinstance(payload, str):
                raise TypeError(f"payload of {job_id!r} must be a str")
            if payload is not None:
                check_utf8(f"payload of {job_id!r}", payload)
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
            )
        return added

    # -- workers -----------------------------------------------------------------------------

    def claim(self, count: int = 1, *, request_id: str | None = None) -> list[Lease]:
        """Claim up to ``count`` jobs from the front of todos in one script call (highest priority
        first, then first in, first out), returned in that order: each moves to in_progress, and one
        lease (a lock with a TTL) covers them all until each is acked, failed or released. Scheduled
        jobs that are due join the line first.

        ``request_id`` (see ``new_request_id``): give the same one to retry a call whose reply was
        lost (after redis-py's own resends gave up) and get the same leases, not a second claim.
        """
        if count < 1:
            raise ValueError("count must be at least 1")
        leases, now, next_due = self._scripts.claim(
            min(count, MAX_IDS_PER_CALL),
            Lease,
            request_ttl_ms=self._request_ttl_ms,
            lease_ms=self._lease_ms,
            promote=MAX_IDS_PER_CALL,
            wake_cap=self.wake_cap,
            token=request_id,
        )
        # Seconds until the next scheduled job is due, as of now: wait_for_work wakes up for it.
        self.next_due = None if next_due is None else max(0.0, next_due - now)
        self._next_due_seen = time.monotonic()
        return leases

    def due_in(self) -> float | None:
        """Seconds from now until the next scheduled job is due, as the last empty claim saw it
        (None: none was scheduled then)."""
        if self.next_due is None:
            return None
        return self.next_due - (time.monotonic() - self._next_due_seen)

    def wake_keys(self) -> list[str]:
        """The lists an idle worker of this queue blocks on (one; a sharded queue has one a shard)."""
        return [self.keys.wake]

    def wait_for_work(self, timeout: float) -> bool:
        """Block until an enqueue (or a requeue) wakes us, ``timeout`` seconds pass, or the next
        scheduled job (as the last empty claim saw it) is due."""
        return until_due(self.due_in(), timeout, lambda seconds: take_wake_token(self.redis, self.wake_keys(), seconds))

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

    def ack_many(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[AckResult]:
        """Ack a batch in one script call (per MAX_IDS_PER_CALL). ``request_id``: the same one
        retries a call whose reply was lost, and reports what that call did (acked, not stale)."""
        results: list[AckResult] = []
        for number, chunk in enumerate(_chunks(leases)):
            now, acked = self._scripts.ack(
                chunk,
                request_ttl_ms=self._request_ttl_ms,
                done_max_count=self.done_max_count,
                request_id=_part(request_id, number),
            )
            for lease, ok in zip(chunk, acked, strict=True):
                if not ok:
                    results.append(AckResult(False, None))
                elif lease.enqueued_at is None:
                    results.append(AckResult(True, None))
                else:
                    results.append(AckResult(True, max(0.0, now - lease.enqueued_at)))
        return results

    def fail(
        self,
        lease: Lease,
        reason: str = "",
        *,
        retry: bool = True,
        delay: float | None = None,
        request_id: str | None = None,
    ) -> FailOutcome:
        """Give up on this attempt. While attempts remain the job is retried (``RETRIED``): after
        ``delay`` seconds when given, else after the backoff delay of its attempt (see
        ``backoff_delay``), in scheduled until then, or at once in todos when that delay is 0.
        Once attempts are used up it goes into failed (``DEAD``).

        ``retry=False`` dead-letters at once (an error that no retry can fix). Failing a stale
        lease, or the same lease twice, changes nothing and returns ``FailOutcome.STALE``.
        ``request_id`` as for ``ack_many``.
        """
        seconds = self.backoff_delay(lease.attempt) if delay is None else _check_seconds("delay", delay)
        return self._fail([(lease, "retry" if retry else "dead", reason, round(seconds * 1000))], request_id)[0]

    def backoff_delay(self, attempt: int) -> float:
        """The wait before retrying after failed attempt ``attempt`` (1 = the first): drawn uniformly
        from [d/2, d], d = min(max, base * 2^(attempt-1)); 0 when the base is 0."""
        if self.retry_backoff_seconds <= 0:
            return 0.0
        exponent = min(max(attempt, 1) - 1, 64)  # 2^64 * base is past any max already
        d = min(self.retry_backoff_max_seconds, self.retry_backoff_seconds * 2.0**exponent)
        return random.uniform(d / 2, d)

    def release(self, leases: Sequence[Lease], *, request_id: str | None = None) -> list[FailOutcome]:
        """Hand jobs back to todos unprocessed, in their old place, without using up an attempt
        (graceful shutdown, or a job that waited too long for a slot). ``request_id`` as for ``ack_many``."""
        return self._fail([(lease, "release", "", 0) for lease in leases], request_id)

    def _fail(self, items: Sequence[tuple[Lease, str, str, int]], request_id: str | None) -> list[FailOutcome]:
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

    # -- the cleaner -------------------------------------------------------------------------

    def sweep(self, limit: int = 1000) -> SweepResult:
        """Requeue (or dead-letter) up to ``limit`` examined in_progress ids whose lock is gone.

        ZSCANs in_progress in pages and resumes where the last call stopped, so a large
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
            self._sweep_cursor, page = self._old_layout_adopted(
                lambda n=page_size: self.redis.zscan(k.in_progress, self._sweep_cursor, count=n)  # type: ignore[misc]
            )
            candidates = [_text(member) for member, _rank in page]  # type: ignore[arg-type]
            if candidates or trim_pending:
                # Who owned each candidate as we read it: the script checks that this still holds.
                owners = (
                    [None if o is None else _text(o) for o in self.redis.hmget(k.owners, candidates)]
                    if candidates
                    else []
                )
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

    # -- operators ---------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Sizes of the five states, todos per priority ({priority: jobs}, those with any) and the
        age of the oldest job not yet finished, in one snapshot."""
        todos, in_progress, done, failed, age_ms, scheduled, by_priority = self._scripts.stats()
        return {
            "todos": todos,
            "in_progress": in_progress,
            "done": done,
            "failed": failed,
            "scheduled": scheduled,
            "oldest_pending_age_seconds": age_ms / 1000,
            "todos_by_priority": by_priority,
        }

    def inspect(self, job_id: str) -> JobInfo | None:
        """Everything the queue knows about one id, or None if it knows nothing."""
        return self._old_layout_adopted(lambda: self._inspect(job_id))

    def _inspect(self, job_id: str) -> JobInfo | None:
        k = self.keys
        pipe = self.redis.pipeline(transaction=True)
        pipe.zscore(k.todos, job_id)
        pipe.zscore(k.in_progress, job_id)
        pipe.sismember(k.done, job_id)
        pipe.sismember(k.failed, job_id)
        pipe.sismember(k.legacy_todos, job_id)
        pipe.hget(k.priorities, job_id)
        pipe.hget(k.attempts, job_id)
        pipe.hget(k.payloads, job_id)
        pipe.hget(k.errors, job_id)
        pipe.zscore(k.pending, job_id)
        pipe.zscore(k.done_log, job_id)
        pipe.hget(k.owners, job_id)
        pipe.hget(k.finished, job_id)
        pipe.zscore(k.scheduled, job_id)
        todo_rank, running_rank, in_done, in_failed, in_legacy, kept_priority, *rest = pipe.execute()
        attempts, payload, error, enqueued, done_at, owner, finished, due = rest
        rank = todo_rank if todo_rank is not None else running_rank
        member = (todo_rank is not None or in_legacy, running_rank is not None, in_done, in_failed, due is not None)
        states = [name for name, is_member in zip(STATES, member, strict=True) if is_member]
        if not states:
            return None
        state = states[0]
        priority: int | None = None
        if rank is not None:
            priority = priority_of_rank(rank)
        elif state in ("scheduled", "failed") or in_legacy:
            priority = int(kept_priority) if kept_priority is not None else 0
        finished_at: float | None = None
        if state in ("done", "failed"):
            # What is kept of a finished job, in one field: "<enqueued ms>:<finished ms>:<attempts>".
            # A finished job without it is shown as unknown (None), never as 0.
            fields = _text(finished).split(":") if finished else []
            enqueued_ms, finished_ms, attempts = [*fields, "", "", ""][:3]
            enqueued = int(enqueued_ms) if enqueued_ms else None
            finished_at = int(finished_ms) / 1000 if finished_ms else None
            attempts = attempts or None
        elif attempts is None:
            attempts = 0  # never claimed yet
        token = None if owner is None else _text(owner)
        ttl_ms = self.redis.pttl(k.lock(token)) if token is not None else -2
        return JobInfo(
            id=job_id,
            state=state,
            priority=priority,
            attempts=None if attempts is None else int(attempts),
            payload=None if payload is None else _text(payload),
            error=None if error is None else _text(error),
            enqueued_at=None if enqueued is None else enqueued / 1000,
            done_at=None if done_at is None else done_at / 1000,
            finished_at=finished_at,
            due_at=None if due is None else due / 1000,
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

    def _old_layout_adopted(self, read: Callable[[], T]) -> T:
        """``read()``; on a queue whose layout is from before 0.3 (todos or in_progress a set: a
        WRONGTYPE error), first adopt it (a script call that changes nothing else) and read again."""
        try:
            return read()
        except redis.ResponseError as error:
            if "WRONGTYPE" not in str(error):  # a pipeline's error names the command first
                raise
        self._scripts.adopt_old_layout()
        return read()

    def ping(self) -> bool:
        """Redis answers, and this queue is not one that was sharded (see ``setqueue.sharded``):
        opened as one queue, its jobs would be out of reach (SettingError for QUEUE_SHARDS)."""
        answered = bool(self.redis.ping())
        sharded = self.redis.get(self.keys.shards)
        if sharded is not None and int(sharded) != 1:
            raise SettingError(
                "QUEUE_SHARDS", f"queue {self.name} has {int(sharded)} shards, not 1: open it with that many"
            )
        return answered

    def close(self) -> None:
        self.redis.close()
