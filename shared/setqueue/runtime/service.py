"""The runtime the three services share: signals, Redis outages, liveness, and ``main()``.

A service is a ``Service`` subclass with a ``run()`` main loop; ``main()`` loads its settings (a bad
one: exit 2 before Redis is touched), serves /metrics and /healthz and installs the signal handlers
(docs/reference.md, "Services"). Loops call Redis through ``Service.retry``, which waits out
``TRANSIENT_REDIS_ERRORS`` (docs/guide.md, "Outages"): every script is idempotent, so a call is simply
made again. A worker's main loop is its supervisor, which comes round every few milliseconds whatever
its jobs do: a long job is not a stuck worker.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, ClassVar, Generic, NoReturn, TypeVar

import redis
from redis import exceptions as rexc

from setqueue.client import TRANSIENT_REDIS_ERRORS, OptionError, PasswordRequired, connect, redact_url
from setqueue.factory import open_queue
from setqueue.interface import JobQueue
from setqueue.runtime.acl import explain_refusal
from setqueue.runtime.backoff import Backoff
from setqueue.runtime.httpd import MetricsServer
from setqueue.runtime.logs import configure_logging, flush_logs
from setqueue.runtime.metrics import ServiceMetrics
from setqueue.runtime.pressure import MemoryReport, read_memory
from setqueue.runtime.settings import SETTINGS, CommonSettings, SettingError
from setqueue.runtime.tls import tls_refusal
from setqueue.scripts import new_request_id
from setqueue.version import __version__

T = TypeVar("T")
S = TypeVar("S", bound=CommonSettings)
M = TypeVar("M", bound=ServiceMetrics)

log = logging.getLogger("setqueue.runtime.service")

EXIT_SETTING = 2
EXIT_REDIS = 3

# A read of Redis impossible for now: an outage, or a URL only Redis can find wrong.
UNREACHABLE: tuple[type[Exception], ...] = (*TRANSIENT_REDIS_ERRORS, OptionError)


def refusal(queue: JobQueue, url: str = "") -> str | None:  # noqa: PLR0911 (a return a kind of refusal)
    """Why Redis refuses this service at start, or None (unreachable is none). SettingError for what only
    Redis can tell: a cluster node with a db other than 0, or QUEUE_SHARDS unlike the recorded (recorded here)."""
    try:
        queue.ping(record=True)
    except OptionError as exc:
        raise SettingError.of(exc) from None
    except PasswordRequired:
        return "it requires a password: set it in REDIS_URL (redis://:PASSWORD@host:port/db)"
    except rexc.AuthenticationError as exc:
        return f"it refused the user or password in REDIS_URL: {exc}"
    except rexc.OutOfMemoryError:  # the shards of a sharded queue are recorded later
        return None
    except (rexc.AuthorizationError, rexc.NoPermissionError) as exc:
        return explain_refusal(exc) or f"{type(exc).__name__}: {exc}"
    except rexc.ResponseError as exc:  # e.g. "DB index is out of range"
        return f"{type(exc).__name__}: {exc}"
    except (rexc.ConnectionError, rexc.TimeoutError) as exc:
        return tls_refusal(exc, url)
    except rexc.RedisError:
        return None
    return None


class Stopping(Exception):
    """A stop was requested while Redis was unreachable."""


class RedisFull(Exception):
    """Within ``Service.unless_redis_full``: Redis is out of memory and refuses this step."""


def load_settings(
    settings_cls: type[S], program: str, env: Mapping[str, str] | None = None, stderr: Any = None
) -> S | None:
    try:
        return settings_cls.from_env(env)  # type: ignore[return-value]
    except SettingError as exc:
        print(f"{program}: {exc}", file=stderr if stderr is not None else sys.stderr, flush=True)
        return None


class Service(Generic[S, M]):
    """Base of the services. ``queue`` defaults to the settings' (the first only without ``serves_several``)."""

    role: ClassVar[str] = "service"
    serves_several: ClassVar[bool] = True

    def __init__(self, settings: S, metrics: M, queue: JobQueue | None = None) -> None:
        self.settings = settings
        self.queue_options = {k: v for k, v in settings.queue_options().items() if k != "name"}
        if queue is None:
            names = settings.queue_names if self.serves_several else settings.queue_names[:1]
            # REDIS_TIMEOUT_SECONDS bounds each reply: a half-open connection is given up within it.
            timeout = settings.redis_timeout_seconds
            client = connect(
                settings.redis_url, socket_connect_timeout=timeout, socket_timeout=timeout, **settings.tls_options()
            )
            queue = open_queue(
                settings.redis_url, names, shards=settings.queue_shards, client=client, **self.queue_options
            )
        self.queue = queue
        self.metrics = metrics
        self.stop_event = threading.Event()
        self.log = logging.getLogger(f"setqueue.{self.role}")
        self._backoff = Backoff(base=0.1, cap=5.0)
        self._down_since: float | None = None
        self._retries = 0
        self._pending_delay = 0.0
        self._last_beat = time.monotonic()
        self._signals = 0
        self._health_client: redis.Redis | None = None
        self.metrics.redis_up.set(1)
        self.metrics.redis_out_of_memory.set(0)
        self._memory_checked = threading.Event()  # the eviction policy was read
        self._memory_lock = threading.Lock()
        self._eviction_said: str | None = None
        self._full = threading.local()  # .skips: within unless_redis_full (depth)
        self._full_said: set[str] = set()
        self.refused: str | None = None  # why Redis refuses what this service needs (exit code 3)

    def run(self) -> int:  # the main loop; returns the exit code
        raise NotImplementedError

    @property
    def stall_seconds(self) -> float:  # /healthz: 503 when the main loop has not come round for this long
        return 60.0

    def on_stop_requested(self) -> None:
        """In the main thread, on the first SIGTERM/SIGINT, after stop_event is set."""

    def beat(self) -> None:
        self._last_beat = time.monotonic()

    def health(self) -> tuple[bool, dict[str, Any]]:
        now = time.monotonic()
        idle = now - self._last_beat
        stuck = idle > self.stall_seconds
        redis_ok = self._ping()
        body: dict[str, Any] = {
            "status": "ok" if redis_ok and not stuck else ("stuck" if redis_ok else "redis_unreachable"),
            "service": self.role,
            "queue": self.settings.queue_name,
            "redis": "up" if redis_ok else "down",
            "seconds_since_loop": round(idle, 3),
            "stall_seconds": self.stall_seconds,
            "stopping": self.stop_event.is_set(),
        }
        return redis_ok and not stuck, body

    def _ping(self) -> bool:
        if self._health_client is None:
            # The queue's kind of client: on a cluster /healthz stays up while the URL's node is down.
            self._health_client = connect(
                self.settings.redis_url,
                socket_connect_timeout=1,
                socket_timeout=1,
                retries=0,
                **self.settings.tls_options(),
            )
        try:
            return bool(self._health_client.ping())
        except (rexc.RedisError, OptionError):
            return False

    def resendable(self, call: Callable[[str], T], what: str, *, until_stopped: bool = True) -> T:
        """``retry`` of ``call(request_id)`` with one request id across resends, so a call whose reply was
        lost returns its first result (docs/guide.md, "Resends"); a fresh id after half the time Redis
        keeps that result."""
        request_id, since = new_request_id(), time.monotonic()

        def attempt() -> T:
            nonlocal request_id, since
            if time.monotonic() - since > self.queue.request_ttl_seconds / 2:
                request_id, since = new_request_id(), time.monotonic()
            return call(request_id)

        return self.retry(attempt, what, until_stopped=until_stopped)

    def retry(self, call: Callable[[], T], what: str, *, until_stopped: bool = True) -> T:
        """``call()`` until it gets through. With ``until_stopped`` a stop during an outage raises
        ``Stopping``; without, it retries until it succeeds (acks)."""
        never = threading.Event()
        while True:
            try:
                result = call()
            except TRANSIENT_REDIS_ERRORS as exc:
                if until_stopped and self.stop_event.is_set():
                    raise Stopping(what) from exc
                if isinstance(exc, rexc.OutOfMemoryError) and int(getattr(self._full, "skips", 0)) > 0:
                    self.metrics.redis_out_of_memory.set(1)
                    raise RedisFull(what) from exc
                self._redis_failed(exc, what)
                self._backoff_wait(self.stop_event if until_stopped else never)
                if until_stopped and self.stop_event.is_set():
                    raise Stopping(what) from exc
                continue
            except rexc.ResponseError as exc:
                refused = explain_refusal(exc)
                if refused is None:
                    raise
                self.refuse(f"{refused} (during {what})")
                raise Stopping(what) from exc
            self.redis_ok()
            return result

    def refuse(self, why: str) -> None:
        """Redis refuses what this service needs (an ACL): no retry can help. Say it once, stop, exit 3."""
        if self.refused is None:
            self.refused = why
            self.log.error("Redis refused us: %s", why)
        self.request_stop()

    def _backoff_wait(self, stop: threading.Event) -> None:
        delay = self._pending_delay
        deadline = time.monotonic() + delay
        # Waiting out an outage is not being stuck (/healthz).
        while not stop.is_set():
            self.beat()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            stop.wait(min(left, 1.0))

    def _redis_failed(self, exc: Exception, what: str) -> None:
        now = time.monotonic()
        if isinstance(exc, rexc.OutOfMemoryError):
            # Redis answers, but refuses the writes that would grow it: not an outage.
            self.metrics.redis_out_of_memory.set(1)
            detail = f"out of memory, it refuses writes that add to it ({type(exc).__name__}: {exc})"
        else:
            self.metrics.redis_up.set(0)
            detail = f"{type(exc).__name__}: {exc}"
        self._pending_delay = self._backoff.next()
        if self._down_since is None:
            self._down_since = now
            self._retries = 0
            self.log.warning("redis unavailable (%s during %s); retrying in %.1fs", detail, what, self._pending_delay)
        else:
            self._retries += 1
            self.log.warning(
                "redis still unavailable after %.1fs (%s during %s); retry %d in %.1fs",
                now - self._down_since,
                detail,
                what,
                self._retries,
                self._pending_delay,
            )

    def redis_ok(self) -> None:
        if self._down_since is not None:
            self.log.warning(
                "redis reachable again after %.1fs (%d retries)", time.monotonic() - self._down_since, self._retries
            )
            self._down_since = None
            self._backoff.reset()
        self.metrics.redis_up.set(1)
        self.metrics.redis_out_of_memory.set(0)
        if not self._memory_checked.is_set():  # Redis was unreachable at start: read it now
            self.check_memory()

    @contextlib.contextmanager
    def unless_redis_full(self, what: str) -> Iterator[None]:
        """A step that can wait: skipped (logged once) while Redis is out of memory, where ``retry`` would
        wait, so that the loop goes on to the steps that free memory (the sweep, the retention)."""
        self._full.skips = getattr(self._full, "skips", 0) + 1
        try:
            yield
        except RedisFull:
            if what not in self._full_said:
                self._full_said.add(what)
                self.log.warning("redis is out of memory: %s wait until it has room", what)
        else:
            self._full_said.discard(what)
        finally:
            self._full.skips -= 1

    def check_memory(self) -> MemoryReport | None:
        """Export the eviction policy and memory; log when a master evicts (or nobody may tell), again
        only on a change. None when Redis is unreachable."""
        with self._memory_lock:
            try:
                report = read_memory(self.queue.redis)
            except UNREACHABLE:
                return None
            self._memory_checked.set()
            self.metrics.redis_noeviction.set(report.noeviction)
            if self.metrics.redis_memory_used_ratio is not None:
                self.metrics.redis_memory_used_ratio.set(report.used_ratio)
            said = report.eviction_warning(redact_url(self.settings.redis_url))
            if said is not None and said != self._eviction_said:
                (self.log.warning if report.unknown else self.log.error)("%s", said)
            self._eviction_said = said
            return report

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self._signals += 1
        if self._signals == 1:
            self.log.info("%s received: stopping (send it again to exit at once)", name)
            self.stop_event.set()
            self.on_stop_requested()
        else:
            self.log.warning("second %s received: exiting now", name)
            flush_logs()
            os._exit(128 + signum)

    def request_stop(self) -> None:
        """Stop as on a first SIGTERM."""
        if not self.stop_event.is_set():
            self._signals = max(self._signals, 1)
            self.stop_event.set()
            self.on_stop_requested()

    def close(self) -> None:
        if self._health_client is not None:
            self._health_client.close()
        self.queue.close()


def usage(program: str, summary: str, argv: Sequence[str] | None) -> int | None:
    """``--help`` (the settings read) and ``--version`` only; an exit code when not to start."""
    role = program.removeprefix("setqueue-")
    read = [s for s in SETTINGS if s.services == "all" or role in s.services.split(",")]
    epilog = "settings (environment variables):\n" + "\n".join(
        f"  {s.name} (default {s.default or '(empty)'}): {s.meaning}" for s in read
    )
    parser = _OneLineParser(
        prog=program,
        description=f"{summary} Settings come from the environment; see docs/reference.md.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{program} (setqueue {__version__})")
    try:
        parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help or --version, which printed
        return int(exc.code or 0)
    except ValueError as exc:
        print(f"{program}: {exc} (settings are environment variables; see {program} --help)", file=sys.stderr)
        return EXIT_SETTING
    return None


class _OneLineParser(argparse.ArgumentParser):
    """A bad argument is one line (``usage`` prints it), not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def main(
    settings_cls: type[S],
    build: Callable[[S], Service[S, Any]],
    program: str,
    env: Mapping[str, str] | None = None,
    *,
    argv: Sequence[str] | None = None,
    summary: str = "",
) -> int:
    code = usage(program, summary, argv)
    if code is not None:
        return code
    settings = load_settings(settings_cls, program, env)
    if settings is None:
        return EXIT_SETTING
    configure_logging(settings.log_level, settings.log_format, program)
    return serve(settings, build, program)


def cannot_listen(settings: CommonSettings, exc: OSError) -> str:
    name = "METRICS_PORT" if exc.errno == errno.EADDRINUSE else "METRICS_HOST"
    return f"invalid setting {name}: cannot listen on {settings.metrics_host}:{settings.metrics_port}: {exc}"


def memory_refusal(service: Service[Any, Any], settings: CommonSettings) -> str | None:
    """With REQUIRE_NOEVICTION, wait until Redis answers and return why not to start."""
    if not settings.require_noeviction:
        service.check_memory()  # unreachable: read once Redis answers
        return None
    report = None
    while report is None:  # only what Redis says can let the service start
        report = service.check_memory()
        if report is None:
            service.stop_event.wait(1.0)
    return report.eviction_warning(redact_url(settings.redis_url))


def serve(
    settings: S, build: Callable[[S], Service[S, Any]], program: str, *, metrics_socket: socket.socket | None = None
) -> int:
    """Build, serve /metrics (on ``metrics_socket`` in a supervisor's child), check Redis, run."""
    try:
        service = build(settings)
    except SettingError as exc:  # what only the service can check (e.g. the handler's kind)
        print(f"{program}: {exc}", file=sys.stderr, flush=True)
        return EXIT_SETTING
    server: MetricsServer | None = None

    def give_up(code: int, why: object) -> int:
        print(f"{program}: {why}", file=sys.stderr, flush=True)
        if server is not None:
            server.stop()
        service.close()
        return code

    if settings.metrics_port or metrics_socket is not None:
        try:
            server = MetricsServer(
                settings.metrics_port,
                service.metrics.registry,
                service.health,
                host=settings.metrics_host,
                sock=metrics_socket,
            ).start()
        except OSError as exc:
            return give_up(EXIT_SETTING, cannot_listen(settings, exc))
    try:
        refused = refusal(service.queue, settings.redis_url)
    except SettingError as exc:  # what only Redis can tell: the URL names a cluster node, with db 3
        return give_up(EXIT_SETTING, exc)
    if refused is not None:
        return give_up(EXIT_REDIS, f"Redis at {redact_url(settings.redis_url)} refused us: {refused}")
    evicting = memory_refusal(service, settings)
    if evicting is not None:
        return give_up(EXIT_REDIS, f"REQUIRE_NOEVICTION is set and {evicting}")
    service.install_signal_handlers()
    service.log.info(
        "%s starting: queue=%s redis=%s metrics=%s",
        program,
        settings.queue_name,
        redact_url(settings.redis_url),
        f"{settings.metrics_host}:{settings.metrics_port}" if settings.metrics_port else "off",
    )
    try:
        code = service.run()
    except Stopping:  # out of a call that must not stop half-way (an ack): Redis refused it
        code = EXIT_REDIS if service.refused is not None else 0
    except OptionError as exc:  # as above, when Redis was unreachable at start
        print(f"{program}: {SettingError.of(exc)}", file=sys.stderr, flush=True)
        code = EXIT_SETTING
    except SettingError as exc:
        print(f"{program}: {exc}", file=sys.stderr, flush=True)
        code = EXIT_SETTING
    finally:
        if server is not None:
            server.stop()
        service.close()
    if service.refused is not None:
        code = EXIT_REDIS
    service.log.info("%s stopped (exit code %d)", program, code)
    return code
