"""Connecting to Redis (one Redis or any Cluster node, found out on the first command), transient
errors, and the idle wait."""

from __future__ import annotations

import contextlib
import inspect
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any, Generic, Protocol, TypeAlias, TypedDict, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import redis
from redis import exceptions as rexc
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException, SlotNotCoveredError
from redis.retry import Retry


class OptionError(ValueError):
    """A queue option that does not fit what Redis holds or the URL reaches; ``option`` names the
    parameter (``url``, ``shards``); ``str()`` is one line."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"{option}: {problem}")
        self.option = option
        self.problem = problem


Client: TypeAlias = redis.Redis | RedisCluster

# "Redis is not there right now": wait and resend (every script is safe to resend).
TRANSIENT_REDIS_ERRORS: tuple[type[Exception], ...] = (
    rexc.ConnectionError,  # includes BusyLoadingError, auth errors, ClusterUnavailable
    rexc.TimeoutError,  # includes NotReplicated
    rexc.ReadOnlyError,  # a replica during a failover
    rexc.TryAgainError,  # a slot being migrated
    rexc.ClusterError,  # ClusterDownError, MasterDownError, endless redirections
    rexc.AskError,  # includes MovedError the cluster client could not follow
    rexc.OutOfMemoryError,  # maxmemory with noeviction: writes refused until space frees up
)


def redact_url(url: str) -> str:
    """The URL without its passwords (the user's, and a ``password=`` or ``sentinel_password=``
    option), for logs and error messages; a Sentinel URL's several hosts are kept."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number: unparsable
    except ValueError:
        if not url.split("://", 1)[0].lower().endswith("+sentinel"):  # several host:port pairs
            return "<unparsable URL>"
        parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    netloc = f"{userinfo.partition(':')[0]}:***@{hosts}" if at and ":" in userinfo else parts.netloc
    query = re.sub(r"(^|&)((?:sentinel_)?password)=[^&]*", r"\1\2=***", parts.query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


class ClusterUnavailable(redis.ConnectionError):
    """No cluster node could say where a slot lives (unreachable, or failing over): transient."""


@contextlib.contextmanager
def _cluster_reachability() -> Iterator[None]:
    """redis-py's non-RedisError reports of an unmappable cluster as ClusterUnavailable; other
    RedisClusterExceptions (cross-slot, ...) are bugs and pass through."""
    try:
        yield
    except SlotNotCoveredError as exc:
        raise ClusterUnavailable(str(exc)) from exc
    except RedisClusterException as exc:
        if type(exc) is not RedisClusterException:
            raise
        raise ClusterUnavailable(str(exc)) from exc


class _ClusterPipeline:
    """A RedisCluster pipeline (MULTI/EXEC on its one slot's node) whose ``execute`` raises
    ClusterUnavailable for an unreachable cluster."""

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
    """A ``redis.Redis`` for a URL naming one Redis or any Redis Cluster node (docs/guide.md#redis-cluster).

    The first command asks the node (``HELLO``) whether it is in cluster mode; if so every command goes
    through a ``RedisCluster`` from the same URL and options. A cluster URL must be TCP, db 0, else
    every call raises ``OptionError``."""

    def __init__(self, url: str, *, cluster: RedisCluster | None = None, **options: Any) -> None:
        # setqueue.sentinel builds on this module: imported when a URL names sentinels.
        from setqueue import sentinel  # noqa: PLC0415

        by_sentinels = sentinel.is_sentinel_url(url)  # a master found through sentinels, never a cluster node
        pool = sentinel.master_pool(url, **options) if by_sentinels else redis.ConnectionPool.from_url(url, **options)
        super().__init__(connection_pool=pool)
        self.auto_close_connection_pool = True
        self._url = url
        self._options = options
        self._cluster = cluster
        self._decided = cluster is not None or by_sentinels
        self._refused: OptionError | None = None
        self._deciding = threading.Lock()

    @classmethod
    def around(cls, cluster: RedisCluster) -> ClusterAwareRedis:
        """A client sending everything through ``cluster``."""
        return cls("redis://", cluster=cluster)

    def cluster_client(self) -> RedisCluster | None:
        """The cluster client if the URL names a cluster node, else None (connects to decide)."""
        if not self._decided:
            with self._deciding:
                if not self._decided:
                    try:
                        self._cluster = self._connect_cluster() if self._is_cluster_node() else None
                    except OptionError as exc:
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
            raise OptionError("url", f"{where} is a Redis Cluster node: reach it with redis:// or rediss://")
        if kwargs.get("db", 0) != 0:
            raise OptionError(
                "url", f"{where} is a Redis Cluster node: a cluster has only database 0 (end the URL in /0)"
            )
        with _cluster_reachability():
            # A queue needs only its slot; one without a master (failover) fails its commands, which are retried.
            return RedisCluster.from_url(self._url, require_full_coverage=False, **self._options)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            cluster = self.cluster_client()
            if cluster is None:
                return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
            with _cluster_reachability():
                return cluster.execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except rexc.AuthenticationError as exc:
            if isinstance(exc, PasswordRequired) or not _asks_for_a_password(exc):
                raise
            raise PasswordRequired(
                "Redis requires a password and the URL gives none (redis://:PASSWORD@host:port/db)"
            ) from exc

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        cluster = self.cluster_client()
        if cluster is None:
            return super().pipeline(transaction, shard_hint)  # type: ignore[no-untyped-call]
        # Not a redis.client.Pipeline, but it queues and executes alike.
        return cast(Pipeline, _ClusterPipeline(cluster.pipeline(transaction=transaction)))  # type: ignore[no-untyped-call]

    def get_encoder(self) -> Any:
        return self._cluster.get_encoder() if self._cluster is not None else super().get_encoder()  # type: ignore[no-untyped-call]

    def close(self) -> None:
        super().close()
        if self._cluster is not None:
            self._cluster.close()


class PasswordRequired(rexc.AuthenticationError):
    """Redis requires a password and the URL gives none."""


def _asks_for_a_password(error: rexc.AuthenticationError) -> bool:
    """Redis asks to authenticate first (NOAUTH, HELLO before AUTH), as against a wrong password."""
    text = str(error)
    return "NOAUTH" in text or "Authentication required" in text or "must be called with the client already" in text


class _Retry(Retry):
    """redis-py's Retry, but a refused password or failed TLS handshake is final."""

    def call_with_retry(
        self,
        do: Callable[[], Any],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> Any:
        def retryable(error: Exception) -> bool:
            if isinstance(error, rexc.AuthenticationError) or tls_failure(error) is not None:
                return False
            return is_retryable is None or is_retryable(error)

        return super().call_with_retry(do, fail, retryable, with_failure_count)


class TlsFiles(TypedDict, total=False):
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None


def tls_failure(error: BaseException) -> ssl.SSLError | None:
    """The TLS error behind a connection error, if any: no resend makes it succeed."""
    seen: BaseException | None = error
    for _ in range(5):
        if seen is None or isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def tls_options(
    url: str, tls_ca_file: str | None = None, tls_cert_file: str | None = None, tls_key_file: str | None = None
) -> dict[str, Any]:
    """redis-py's keyword arguments for a rediss:// URL (or rediss+sentinel://): the server's certificate
    and host name are verified (against ``tls_ca_file``, else the system CAs);
    ``tls_cert_file``/``tls_key_file``: a client certificate. OptionError for a tls file on a
    non-rediss URL, or a key without certificate."""
    given = {"tls_ca_file": tls_ca_file, "tls_cert_file": tls_cert_file, "tls_key_file": tls_key_file}
    if not url.startswith(("rediss:", "rediss+sentinel:")):
        for name, value in given.items():
            if value:
                raise OptionError(name, f"is for a rediss:// URL (TLS), and {redact_url(url)} is not one")
        return {}
    if tls_key_file and not tls_cert_file:
        raise OptionError("tls_key_file", "goes with tls_cert_file, the certificate it is the key of")
    options: dict[str, Any] = {"ssl_cert_reqs": "required", "ssl_check_hostname": True}
    if tls_ca_file:
        options["ssl_ca_certs"] = tls_ca_file
    if tls_cert_file:
        options["ssl_certfile"] = tls_cert_file
        options["ssl_keyfile"] = tls_key_file or None  # None: the key is in the certificate's file
    return options


# No CLIENT SETINFO: a least-privilege user lacks it (Redis 7.0 refuses an ACL rule naming it) and
# each refusal fills the ACL LOG. redis-py 8: driver_info=None; before: lib_*.
NO_CLIENT_SETINFO: dict[str, Any] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.connection.AbstractConnection.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)


def connect(
    url: str,
    *,
    socket_connect_timeout: float = 5,
    socket_timeout: float = 30,
    retries: int = 5,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
) -> ClusterAwareRedis:
    """The client ``Queue.from_url`` uses: it resends after a connection error or timeout (``retries``
    times, with backoff); socket timeouts stop a call hanging on a dead connection. rediss://: see
    ``tls_options``; a failed TLS handshake is not resent."""
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0) if retries else NoBackoff()
    options = connection_options(
        url,
        socket_connect_timeout=socket_connect_timeout,
        socket_timeout=socket_timeout,
        tls_ca_file=tls_ca_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
    )
    return ClusterAwareRedis(url, retry=_Retry(backoff, retries=retries), **options)


# TCP keepalive: an idle connection whose host vanished (no FIN nor RST) is found dead by the kernel
# within 15 + 3 x 5 = 30 s; a busy one is given up at the socket timeout first.
KEEPALIVE_OPTIONS: dict[int, int] = (
    {socket.TCP_KEEPIDLE: 15, socket.TCP_KEEPINTVL: 5, socket.TCP_KEEPCNT: 3}
    if hasattr(socket, "TCP_KEEPIDLE")  # Linux; elsewhere the system's own keepalive times
    else {}
)


def connection_options(
    url: str,
    *,
    socket_connect_timeout: float,
    socket_timeout: float,
    tls_ca_file: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
) -> dict[str, Any]:
    """The keyword arguments of a client for ``url``, blocking or asyncio alike (``connect``'s, but the
    retry policy). Raises OptionError as ``tls_options``."""
    tls = tls_options(url, tls_ca_file, tls_cert_file, tls_key_file)
    # unix:// refuses the TCP keepalive argument.
    tcp: dict[str, Any] = (
        {} if url.startswith("unix:") else {"socket_keepalive": True, "socket_keepalive_options": KEEPALIVE_OPTIONS}
    )
    return {
        "decode_responses": True,
        "socket_connect_timeout": socket_connect_timeout,
        "socket_timeout": socket_timeout,
        **tcp,
        **tls,
        "health_check_interval": 30,
        **NO_CLIENT_SETINFO,
    }


def until_due(due_in: float | None, timeout: float, block: Callable[[float], bool]) -> bool:
    """``block`` for at most ``timeout``, never past ``due_in`` (True at once if due)."""
    if due_in is not None:
        timeout = min(timeout, due_in)
        if timeout <= 0:
            return True
    return block(timeout)


def blocking_limit(client: Any, timeout: float) -> float:
    """``timeout`` cut so that a blocking command (BLPOP) replies before the client's socket timeout:
    a wait that outlasts it would read as a dead connection. The margin covers a slow round trip."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    socket_timeout = kwargs.get("socket_timeout")
    if socket_timeout:
        margin = min(0.5, socket_timeout / 2)  # half a second, or half a short timeout
        timeout = min(timeout, socket_timeout - margin)
    return max(timeout, 0.001)


def take_wake_token(client: redis.Redis, keys: Sequence[str], timeout: float) -> bool:
    """One BLPOP on the wake lists (one slot on a Cluster): True if a token was taken, False on timeout.
    The BLPOP blocks at most ``blocking_limit``: a half-open connection is given up at the socket timeout."""
    return client.blpop(list(keys), timeout=blocking_limit(client, timeout)) is not None


# The longest one BLPOP of a ClusterWaiter blocks (a BLPOP cannot be called off).
CLUSTER_WAKE_SLICE_SECONDS = 0.25


class ClusterWaiter:
    """Waits on wake lists in different Cluster slots, one BLPOP thread per list; the first token wakes
    the wait. A BLPOP still blocked when a wait returns is kept, so its token is seen next wait, not lost."""

    def __init__(self, client: Any, keys: Sequence[str]) -> None:
        self._client = client
        self._keys = list(keys)
        self._pool = ThreadPoolExecutor(max_workers=len(self._keys), thread_name_prefix="setqueue-wake")
        self._blocked: dict[str, Future[Any]] = {}

    def wait(self, timeout: float) -> bool:
        """True when a token was taken, False when ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            for key in self._keys:
                if key not in self._blocked:
                    slice_ = max(min(remaining, CLUSTER_WAKE_SLICE_SECONDS), 0.001)
                    self._blocked[key] = self._pool.submit(self._client.blpop, [key], timeout=slice_)
            finished, _ = futures_wait(self._blocked.values(), max(remaining, 0), FIRST_COMPLETED)
            woken = False
            for key, future in list(self._blocked.items()):
                if future in finished:
                    del self._blocked[key]
                    woken = future.result() is not None or woken  # a Redis error is the caller's
            if woken:
                return True
            if deadline - time.monotonic() <= 0:
                return False

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def on_a_cluster(client: Any) -> bool:
    """Whether ``client`` runs on a Redis Cluster (connects to find out)."""
    if isinstance(client, ClusterAwareRedis):
        return client.cluster_client() is not None
    return isinstance(client, RedisCluster)


class _Settable(Protocol):
    def set(self) -> None: ...


E = TypeVar("E", bound=_Settable)


class Waiters(Generic[E]):
    """The events of the ``result()`` calls waiting on one ended channel, by job id (thread-safe): what
    both clients' listeners keep, whatever kind of event their waiters wait on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, list[E]] = {}

    def add(self, job_ids: Sequence[str], event: E) -> None:
        """``event`` is set when any of ``job_ids`` ends (or by ``wake(None)``)."""
        with self._lock:
            for job_id in job_ids:
                self._by_id.setdefault(job_id, []).append(event)

    def forget(self, job_ids: Sequence[str], event: E) -> None:
        with self._lock:
            for job_id in job_ids:
                events = self._by_id.get(job_id, [])
                if event in events:
                    events.remove(event)
                if not events:
                    self._by_id.pop(job_id, None)

    def wake(self, job_ids: Sequence[str] | None) -> None:
        """Set the events waiting on ``job_ids`` (None: every one, to look again)."""
        with self._lock:
            if job_ids is None:
                events = [event for waiting in self._by_id.values() for event in waiting]
            else:
                events = [event for job_id in job_ids for event in self._by_id.get(job_id, ())]
        for event in events:
            event.set()


# A subscription hears from Redis at least every LISTENER_PING_SECONDS: when nothing came for that
# long it sends a PING, and a PING unanswered for LISTENER_DEAD_SECONDS means a dead connection (half-
# open: no FIN nor RST ever comes, and a socket timeout never fires on a connection that only reads).
# The listener then closes it and subscribes on a new one, so a silently lost subscription is found
# within LISTENER_PING_SECONDS + LISTENER_DEAD_SECONDS (3 s) plus one listening slice.
LISTENER_PING_SECONDS = 1.0
LISTENER_DEAD_SECONDS = 2.0
LISTEN_SLICE_SECONDS = 0.5
LIVENESS_MESSAGE = "setqueue-liveness"


class SubscriptionLost(rexc.ConnectionError):
    """A subscription's PING went unanswered: its connection is dead, whatever the socket says."""


class Liveness:
    """When a subscription last heard from Redis: whether to PING it, or give it up for dead."""

    def __init__(self) -> None:
        self._heard = time.monotonic()
        self._pinged: float | None = None

    def heard(self) -> None:
        self._heard, self._pinged = time.monotonic(), None

    def ping_due(self) -> bool:
        """True once per silence of LISTENER_PING_SECONDS: send a PING now."""
        now = time.monotonic()
        if self._pinged is None and now - self._heard >= LISTENER_PING_SECONDS:
            self._pinged = now
            return True
        return False

    def check(self) -> None:
        """Raise SubscriptionLost when a PING went unanswered for LISTENER_DEAD_SECONDS."""
        if self._pinged is not None and time.monotonic() - self._pinged > LISTENER_DEAD_SECONDS:
            raise SubscriptionLost(f"no reply to a PING within {LISTENER_DEAD_SECONDS:g}s")


class _Tally:
    """A process-wide count, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def add(self) -> None:
        with self._lock:
            self._count += 1

    def __int__(self) -> int:
        with self._lock:
            return self._count


# Catch-ups of this process's result listeners (both clients'): each a resubscription after a lost or
# dead subscription, followed by a fresh read of every awaited job (what ended in the gap is seen).
CATCH_UPS = _Tally()


def listener_catch_ups() -> int:
    """How many times this process's ``result()`` listeners caught up after a resubscription."""
    return int(CATCH_UPS)


class EndedListener:
    """One subscription to a queue's ended channel shared by its ``result()`` calls: a daemon thread
    wakes waiters as their ids end. A dropped or silent subscription (``Liveness``) is replaced; once
    Redis confirms the new one every waiter is woken to read its jobs again (a catch-up, counted in
    ``catch_ups`` and ``CATCH_UPS``), so a job that ended in the gap is not missed. NOPERM is no
    outage: the listener stops and ``watch``/``check`` raise it to every waiter."""

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self._client = client
        self._channel = channel
        self._lock = threading.Lock()  # starts one listening thread
        self._waiting: Waiters[threading.Event] = Waiters()
        self._subscribed = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._refused: rexc.NoPermissionError | None = None
        self.catch_ups = 0

    def watch(self, job_ids: Sequence[str]) -> threading.Event:
        """An event set when any of ``job_ids`` ends or the subscription was renewed; subscribes if not yet."""
        event = threading.Event()
        self._waiting.add(job_ids, event)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._listen, name="setqueue-results", daemon=True)
                self._thread.start()
        if not self._subscribed.wait(30):
            raise rexc.ConnectionError(f"could not subscribe to {self._channel}")
        self.check()
        return event

    def check(self) -> None:
        """Raise NoPermissionError if Redis refused the subscription."""
        if self._refused is not None:
            raise rexc.NoPermissionError(str(self._refused))

    def forget(self, job_ids: Sequence[str], event: threading.Event) -> None:
        self._waiting.forget(job_ids, event)

    def close(self) -> None:
        self._closed = True

    def _listen(self) -> None:
        confirmed = False  # Redis confirmed a subscription before: another one follows a gap
        while not self._closed:
            pubsub = self._client.pubsub()  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(self._channel)
                alive = Liveness()
                while not self._closed:
                    message = pubsub.get_message(timeout=LISTEN_SLICE_SECONDS)
                    if message is None:
                        alive.check()
                        if alive.ping_due():
                            pubsub.ping(LIVENESS_MESSAGE)
                        continue
                    alive.heard()
                    kind = message.get("type")
                    if kind == "message":
                        self._wake(str(message["data"]).split("\n")[1:])
                    elif kind == "subscribe":
                        self._subscribed.set()
                        # Not the first (ours after a drop, or redis-py's own after a reconnect):
                        # jobs may have ended unseen, so every waiter reads again.
                        if confirmed:
                            self.catch_ups += 1
                            CATCH_UPS.add()
                            self._wake(None)
                        confirmed = True
            except rexc.NoPermissionError as exc:  # no resubscription helps: every waiter is told
                self._refused = exc
                self._subscribed.set()
                self._wake(None)
                return
            except Exception:  # dropped, dead (or closed): subscribe again, then waiters look again
                self._subscribed.clear()
                if not self._closed:
                    time.sleep(0.1)
            finally:
                pubsub.close()

    def _wake(self, job_ids: Sequence[str] | None) -> None:
        self._waiting.wake(job_ids)
