"""A master found through Redis Sentinel: ``redis+sentinel://`` URLs (docs/guide.md#redis-sentinel).

The form::

    redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB][?OPTIONS]
    rediss+sentinel://...   TLS to the sentinels and to the master

- ``HOST[:PORT]``: the sentinels, comma-separated (port 26379 unless given; ``[::1]:26379`` for IPv6);
  any one that answers is enough.
- ``MASTER``: the master's name in the sentinels' configuration (``sentinel monitor MASTER ...``).
- ``DB``: the master's database, 0 unless given.
- ``USER``/``PASSWORD``: the master's (and its replicas'), as in a ``redis://`` URL.
- ``OPTIONS``: ``sentinel_password`` and ``sentinel_username`` for sentinels that require a password
  of their own (``requirepass`` in sentinel.conf); ``protocol``, ``socket_timeout``,
  ``socket_connect_timeout``, ``health_check_interval``, ``ssl_check_hostname`` for the master's
  connections, as in a ``redis://`` URL. Percent-encode what a password holds of ``@:/,?&%``.

Every connect to the master, a reconnect inside a command's resends too, first asks a sentinel where
it is (redis-py's ``SentinelConnectionPool`` with ``FollowingConnection``): after a failover a dropped
connection reconnects to the promoted replica, and a demoted master's ``READONLY`` drops the
connection. A pool also asks again every RECHECK_SECONDS as it hands out a connection (``FollowingPool``),
for a switch that leaves the old master alive and taking writes. Each sentinel is asked with the
connect timeout for both connecting and its reply, and never resent there: the call that needed the
master is what resends (the client's retries)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.sentinel
import redis.connection
import redis.sentinel
from redis import exceptions as rexc
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.connection import URL_QUERY_ARGUMENT_PARSERS
from redis.retry import Retry

from setqueue.client import NO_CLIENT_SETINFO, OptionError, redact_url

SCHEMES = ("redis+sentinel", "rediss+sentinel")
DEFAULT_SENTINEL_PORT = 26379
# The master's connection options a URL may set (redis-py's names and parsers).
MASTER_URL_OPTIONS = (
    *("protocol", "socket_timeout", "socket_connect_timeout"),
    *("health_check_interval", "ssl_check_hostname"),
)
SENTINEL_URL_OPTIONS = ("sentinel_username", "sentinel_password")


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` names a master through sentinels (``redis+sentinel://`` or ``rediss+sentinel://``)."""
    return url.split("://", 1)[0].lower() in SCHEMES


@dataclass(frozen=True)
class SentinelUrl:
    """A ``redis+sentinel://`` URL, taken apart (``parse_sentinel_url``)."""

    master: str  # the master's name the sentinels monitor
    sentinels: tuple[tuple[str, int], ...]  # (host, port) of each sentinel, in the URL's order
    db: int
    tls: bool  # rediss+sentinel://: TLS to the sentinels and the master
    username: str | None  # the master's
    password: str | None
    sentinel_username: str | None
    sentinel_password: str | None
    options: Mapping[str, Any] = field(default_factory=dict)  # MASTER_URL_OPTIONS given, parsed

    def sentinel_options(self, timeout: float, tls: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of a client of one sentinel: ``timeout`` to connect and for a reply,
        no resend (``retry`` is added by the caller: sync and asyncio differ), the sentinels' password."""
        options: dict[str, Any] = {"socket_connect_timeout": timeout, "socket_timeout": timeout, **NO_CLIENT_SETINFO}
        if self.sentinel_username:
            options["username"] = self.sentinel_username
        if self.sentinel_password:
            options["password"] = self.sentinel_password
        if self.tls:
            options.update({"ssl": True, **tls})
        return options

    def master_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` (``setqueue.client.connection_options``'s) for the master's connections, with the
        URL's db, user, password and options (which win, as in a ``redis://`` URL)."""
        merged: dict[str, Any] = {**options, "db": self.db, **self.options}
        if self.username:
            merged["username"] = self.username
        if self.password:
            merged["password"] = self.password
        return merged


def parse_sentinel_url(url: str) -> SentinelUrl:
    """``url`` taken apart (the form: this module's docstring). Raises OptionError("url", one line)
    for what does not fit: no sentinel, a bad port, no master name, a db that is not a number, an
    unknown option."""
    where = redact_url(url)

    def bad(problem: str) -> OptionError:
        return OptionError("url", f"{where}: {problem}")

    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise bad(f"not a URL ({exc})") from None
    if parts.scheme.lower() not in SCHEMES:
        raise bad("a Sentinel URL starts with redis+sentinel:// or rediss+sentinel://")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    sentinels = tuple(_sentinel_address(each, bad) for each in hosts.split(","))
    path = [unquote(step) for step in parts.path.split("/")[1:]]
    if not path or not path[0]:
        raise bad("names no master: end it in /MASTER or /MASTER/DB (the name in sentinel monitor)")
    if len(path) > 2 or (len(path) == 2 and not (path[1].isdigit() and int(path[1]) < 2**31)):
        raise bad("after /MASTER comes at most /DB, a number")
    options: dict[str, Any] = {}
    given: dict[str, str] = {}
    for name, values in parse_qs(parts.query, keep_blank_values=True).items():
        if name not in MASTER_URL_OPTIONS + SENTINEL_URL_OPTIONS:
            known = ", ".join(MASTER_URL_OPTIONS + SENTINEL_URL_OPTIONS)
            raise bad(f"unknown option {name!r} (known: {known})")
        given[name] = values[-1]
        if name.startswith("ssl_") and parts.scheme.lower() != "rediss+sentinel":
            raise bad(f"option {name} is for a rediss+sentinel:// URL (TLS)")
        if name in MASTER_URL_OPTIONS:
            try:
                options[name] = URL_QUERY_ARGUMENT_PARSERS[name](values[-1])  # type: ignore[operator]
            except (TypeError, ValueError):
                raise bad(f"option {name}={values[-1]!r} is not valid") from None
    return SentinelUrl(
        master=path[0],
        sentinels=sentinels,
        db=int(path[1]) if len(path) == 2 else 0,
        tls=parts.scheme.lower() == "rediss+sentinel",
        username=unquote(username) or None,
        password=unquote(password) or None,
        sentinel_username=given.get("sentinel_username") or None,
        sentinel_password=given.get("sentinel_password") or None,
        options=options,
    )


def _sentinel_address(text: str, bad: Any) -> tuple[str, int]:
    """``host``, ``host:port`` or ``[v6]:port`` as (host, port)."""
    try:
        address = urlsplit("//" + text)
        port = address.port
    except ValueError:
        raise bad(f"{text!r} is not a sentinel's host[:port]") from None
    if not address.hostname:
        raise bad("names no sentinel: HOST[:PORT],... after //" if not text else f"{text!r} names no host")
    if port == 0:
        raise bad(f"{text!r} has port 0")
    return address.hostname, port or DEFAULT_SENTINEL_PORT


class _Round:
    """One round of asking each sentinel for the master (both clients' ``discover_master``): what
    failed, and the one line that says why no master was found."""

    def __init__(self, found: SentinelUrl) -> None:
        self.found = found
        self.problems: list[str] = []
        self.errors: list[BaseException] = []
        self.known: set[str] = set()  # the master names the answering sentinels monitor
        self.answered = False  # a sentinel replied (none may name the master up: a failover)

    def failed(self, sentinel: Any, error: BaseException) -> None:
        where = sentinel.connection_pool.connection_kwargs
        self.problems.append(f"{where.get('host')}:{where.get('port')}: {error}")
        self.errors.append(error)

    def master(self, masters: dict[str, Any], healthy: Any) -> tuple[str, int] | None:
        """The master's (host, port) in one sentinel's SENTINEL MASTERS reply if it is up there, else None."""
        self.answered = True
        self.known.update(masters)
        state = masters.get(self.found.master)
        if state and healthy(state, self.found.master):
            return str(state["ip"]), int(state["port"])
        return None

    def error(self, count: int, not_found: type[Exception]) -> Exception:
        """AuthenticationError when all ``count`` sentinels refused the password (final), else
        ``not_found`` (a ConnectionError: transient) saying why."""
        refused = [e for e in self.errors if isinstance(e, rexc.AuthenticationError)]
        if refused and len(refused) == count:
            return rexc.AuthenticationError(f"the sentinels refused sentinel_username/sentinel_password: {refused[0]}")
        if self.problems:
            said = "; ".join(self.problems)
        elif self.known:
            said = f"none knows a master named {self.found.master!r} (they know {', '.join(sorted(self.known))})"
        else:
            said = f"none has a master {self.found.master!r} up (failing over, or none monitored)"
        return not_found(f"no sentinel gave the master {self.found.master!r}: {said}")


class Sentinels(redis.sentinel.Sentinel):
    """redis-py's Sentinel, saying in one line why no master was found (MasterNotFoundError, a
    ConnectionError: transient), and raising AuthenticationError when every sentinel refused the password."""

    def __init__(self, found: SentinelUrl, timeout: float, tls: Mapping[str, Any]) -> None:
        options = {**found.sentinel_options(timeout, tls), "retry": Retry(NoBackoff(), 0)}
        super().__init__(list(found.sentinels), sentinel_kwargs=options)  # type: ignore[no-untyped-call]
        self.found = found
        self.last_round = _Round(found)  # what the last discover_master found

    def discover_master(self, service_name: str) -> tuple[str, int]:
        """The (host, port) of the URL's master (``service_name`` is that name) from the first sentinel
        that names it up; that sentinel is asked first next time."""
        round_ = self.last_round = _Round(self.found)
        for index, sentinel in enumerate(self.sentinels):
            try:
                masters: dict[str, Any] = sentinel.sentinel_masters()  # type: ignore[assignment]
            except (rexc.ConnectionError, rexc.TimeoutError, rexc.ResponseError) as exc:
                round_.failed(sentinel, exc)
                continue
            address = round_.master(masters, self.check_master_state)
            if address is not None:
                self.sentinels[0], self.sentinels[index] = sentinel, self.sentinels[0]
                return address
        raise round_.error(len(self.sentinels), redis.sentinel.MasterNotFoundError)


class AsyncSentinels(redis.asyncio.sentinel.Sentinel):
    """``Sentinels`` on asyncio."""

    def __init__(self, found: SentinelUrl, timeout: float, tls: Mapping[str, Any]) -> None:
        options = {**found.sentinel_options(timeout, tls), "retry": AsyncRetry(NoBackoff(), 0)}
        super().__init__(list(found.sentinels), sentinel_kwargs=options)  # type: ignore[no-untyped-call]
        self.found = found
        self.last_round = _Round(found)  # what the last discover_master found

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        """As ``Sentinels.discover_master``."""
        round_ = self.last_round = _Round(self.found)
        for index, sentinel in enumerate(self.sentinels):
            try:
                masters: dict[str, Any] = await sentinel.sentinel_masters()  # type: ignore[assignment]
            except (rexc.ConnectionError, rexc.TimeoutError, rexc.ResponseError) as exc:
                round_.failed(sentinel, exc)
                continue
            address = round_.master(masters, self.check_master_state)
            if address is not None:
                self.sentinels[0], self.sentinels[index] = sentinel, self.sentinels[0]
                return address
        raise round_.error(len(self.sentinels), redis.asyncio.sentinel.MasterNotFoundError)


class FollowingConnection(redis.sentinel.SentinelManagedConnection):
    """A connection to the master that asks the sentinels where it is on *every* connect. redis-py's
    asks only when the pool hands out a new connection: one dropped inside a command's resends (by a
    demoted master's READONLY, or a dead one) reconnects to the address it had, until the resends run out."""

    def _connect_retry(self) -> None:
        if self._sock:
            return
        self.connect_check_health(check_health=self.connection_pool.check_connection, retry_socket_connect=False)

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if self._sock is None and self.connection_pool.is_master:
            self.host, self.port = self.connection_pool.get_master_address()
        super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)


class FollowingSSLConnection(FollowingConnection, redis.connection.SSLConnection):
    """``FollowingConnection`` over TLS."""


class AsyncFollowingConnection(redis.asyncio.sentinel.SentinelManagedConnection):
    """``FollowingConnection`` on asyncio."""

    async def _connect_retry(self) -> None:
        if self._reader:
            return
        await self.connect_check_health(check_health=self.connection_pool.check_connection, retry_socket_connect=False)

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        if not self.is_connected and self.connection_pool.is_master:
            self.host, self.port = await self.connection_pool.get_master_address()
        await super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)


class AsyncFollowingSSLConnection(AsyncFollowingConnection, redis.asyncio.connection.SSLConnection):
    """``AsyncFollowingConnection`` over TLS."""


def _tls_only(options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ssl_*`` options (``setqueue.client.tls_options``'s), for the sentinels as for the master."""
    return {name: value for name, value in options.items() if name.startswith("ssl_")}


# How often a pool asks the sentinels again, as it hands out a connection, whether the master moved:
# a switch of master (SENTINEL FAILOVER, a partition) leaves the old one taking writes until the
# sentinels make it a replica on their next INFO of it, up to 10 s later; open connections would
# write there all that while. After a check no sentinel answered, the next waits longer, so
# sentinels that are down do not slow every call.
RECHECK_SECONDS = 1.0
RECHECK_AFTER_FAILURE_SECONDS = 30.0


class _Recheck:
    """When a pool asks again (RECHECK_SECONDS); not before it has found a master once."""

    def __init__(self) -> None:
        self.next_at = 0.0

    def due(self, master_address: object) -> bool:
        now = time.monotonic()
        if master_address is None or now < self.next_at:
            return False
        self.next_at = now + RECHECK_SECONDS  # set first: one check at a time, whatever the callers
        return True

    def failed(self, answered: bool) -> None:
        """No master found: sentinels that answered (a failover under way) are asked again as usual;
        none answering, not before RECHECK_AFTER_FAILURE_SECONDS."""
        if not answered:
            self.next_at = time.monotonic() + RECHECK_AFTER_FAILURE_SECONDS


class FollowingPool(redis.sentinel.SentinelConnectionPool):
    """redis-py's Sentinel pool, but asking the sentinels again at most every RECHECK_SECONDS as it
    hands out a connection: when the master moved, its idle connections to the old one are dropped
    (and busy ones when they come back), so the next command goes to the new master."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._recheck = _Recheck()

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self._recheck.due(self.master_address):
            try:
                self.get_master_address()  # type: ignore[no-untyped-call] # drops the idle connections if it moved
            except (rexc.ConnectionError, rexc.TimeoutError):  # the connect itself asks, and says why
                self._recheck.failed(self.sentinel_manager.last_round.answered)
        return super().get_connection(*args, **kwargs)


def master_pool(url: str, **options: Any) -> redis.sentinel.SentinelConnectionPool:
    """A blocking client's pool of connections to the master ``url`` names, found through its
    sentinels on every (re)connect; ``options``: ``setqueue.client.connection_options``' (and
    ``retry``). Raises OptionError for a URL that does not fit."""
    found = parse_sentinel_url(url)
    timeout = float(found.options.get("socket_connect_timeout", options.get("socket_connect_timeout", 5)))
    sentinels = Sentinels(found, timeout, _tls_only(options))
    connection = FollowingSSLConnection if found.tls else FollowingConnection
    return FollowingPool(found.master, sentinels, connection_class=connection, **found.master_options(options))


class _BlockingSentinelPool(redis.asyncio.sentinel.SentinelConnectionPool, redis.asyncio.BlockingConnectionPool):
    """redis.asyncio's Sentinel pool, but waiting for a free connection (as ``setqueue.aio.AsyncRedis``'s
    plain pool) instead of failing past ``max_connections``, and asking the sentinels again as
    ``FollowingPool`` does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._recheck = _Recheck()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if self._recheck.due(self.master_address):
            try:
                await self.get_master_address()  # type: ignore[no-untyped-call]
            except (rexc.ConnectionError, rexc.TimeoutError):
                self._recheck.failed(self.sentinel_manager.last_round.answered)
        return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


def async_master_pool(
    url: str, *, max_connections: int, timeout: float | None, **options: Any
) -> redis.asyncio.sentinel.SentinelConnectionPool:
    """``master_pool`` on asyncio: at most ``max_connections`` connections, a coroutine waiting at most
    ``timeout`` seconds for one."""
    found = parse_sentinel_url(url)
    connect_timeout = float(found.options.get("socket_connect_timeout", options.get("socket_connect_timeout", 5)))
    sentinels = AsyncSentinels(found, connect_timeout, _tls_only(options))
    return _BlockingSentinelPool(  # type: ignore[no-untyped-call]
        found.master,
        sentinels,
        connection_class=AsyncFollowingSSLConnection if found.tls else AsyncFollowingConnection,
        max_connections=max_connections,
        timeout=timeout,
        **found.master_options(options),
    )
