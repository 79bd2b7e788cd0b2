"""Settings of the three services, from environment variables, parsed once and validated.

Each setting is declared once in ``SETTINGS``: the dataclasses below take their fields from it,
``default()`` gives its defaults to the CLI, and docs/reference.md lists the same names and defaults
(a test keeps them in step). A queue option's default comes from ``Queue``'s signature
(``queue_default``). A bad value raises ``SettingError`` naming the variable; the services print it
as one line and exit with code 2.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import ipaddress
import math
import os
import re
import ssl
import sys
import sysconfig
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from setqueue.client import OptionError, TlsFiles, redact_url, tls_options
from setqueue.core import QueueCore
from setqueue.keys import MAX_IDS_PER_CALL, MAX_SHARDS, parse_queue_names, validate_job_id
from setqueue.sentinel import is_sentinel_url, parse_sentinel_url

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


class SettingError(ValueError):
    """A setting is missing or malformed; ``str()`` is one line naming the variable."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"invalid setting {name}: {problem}")
        self.name = name
        self.problem = problem

    @classmethod
    def of(cls, error: OptionError) -> SettingError:
        """The setting behind a queue's option."""
        return cls(OPTION_SETTINGS.get(error.option, error.option.upper()), error.problem)


OPTION_SETTINGS = {
    "url": "REDIS_URL",
    "name": "QUEUE_NAME",
    "shards": "QUEUE_SHARDS",
    "tls_ca_file": "REDIS_TLS_CA_FILE",
    "tls_cert_file": "REDIS_TLS_CERT_FILE",
    "tls_key_file": "REDIS_TLS_KEY_FILE",
}


def queue_default(option: str) -> str:
    """The default of ``Queue``'s option, as a setting's text (``30``, not ``30.0``)."""
    value = inspect.signature(QueueCore.__init__).parameters[option].default
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Setting:
    """One environment variable; its dataclass field is its name in lower case."""

    name: str
    kind: type  # int, float, str or bool
    default: str  # as text, as in docs/reference.md
    meaning: str
    services: str  # "all", or a comma-separated list
    low: float | None = None  # numbers: inclusive bounds
    high: float | None = None
    choices: tuple[str, ...] = ()  # text: the allowed values (LOG_LEVEL in upper case, LOG_FORMAT lower)
    check: Callable[[str], object] | None = None  # text: raises ValueError (or SettingError) if bad
    auto: Callable[[], int] | None = None  # whole numbers: the value of the word "auto", if any

    @property
    def field(self) -> str:
        return self.name.lower()

    def read(self, env: Mapping[str, str]) -> Any:
        return self.parse(env.get(self.name, self.default).strip())

    def parse(self, raw: str) -> Any:
        if self.kind is bool:
            return _flag(self.name, raw)
        if self.auto is not None:
            if raw.lower() == "auto":
                # Within the bounds: more cores than the maximum get the maximum.
                return min(max(self.auto(), int(self.low or 1)), int(self.high or 1))
            if not _is_int(raw):
                raise SettingError(self.name, f"{raw!r} is neither a whole number nor auto")
        if self.kind in (int, float):
            return _number(self.name, raw, self.kind, self.low, self.high)
        if self.choices:
            folded = raw.upper() if self.choices[0].isupper() else raw.lower()
            if folded not in self.choices:
                raise SettingError(self.name, f"{folded!r} is not one of {', '.join(self.choices)}")
            return folded
        if self.check is not None:
            try:
                self.check(raw)
            except SettingError:
                raise
            except ValueError as exc:
                raise SettingError(self.name, str(exc)) from None
        return raw


def _number(name: str, raw: str, kind: type, low: float | None, high: float | None) -> Any:
    try:
        value = kind(raw)
    except ValueError:
        raise SettingError(name, f"{raw!r} is not a {'whole ' if kind is int else ''}number") from None
    if kind is float and not math.isfinite(value):  # (not for an int: isfinite would overflow on a long one)
        raise SettingError(name, f"{raw} is not a finite number")
    low = -math.inf if low is None else low
    high = math.inf if high is None else high
    if not (low <= value <= high):
        bounds = f"at least {low}" if high == math.inf else f"between {low} and {high}"
        raise SettingError(name, f"{raw} is out of range (must be {bounds})")
    return value


def _is_int(raw: str) -> bool:
    try:
        int(raw)
    except ValueError:
        return False
    return True


def _flag(name: str, raw: str) -> bool:
    raw = raw.lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off", ""):
        return False
    raise SettingError(name, f"{raw!r} is not true or false")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), not the machine's."""
    counted = getattr(os, "process_cpu_count", None)
    if counted is not None:
        return int(counted() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# Past this, run more replicas (a typo of 1000 must not fork a thousand interpreters).
MAX_PROCESSES = 256


def _check_ca_file(path: str) -> None:
    if path:
        _readable(path)
        try:
            ssl.create_default_context().load_verify_locations(cafile=path)
        except (ssl.SSLError, ValueError) as exc:
            raise ValueError(f"{path!r} holds no CA certificate in PEM ({exc})") from None


def _readable(path: str) -> None:
    if not path:
        return
    try:
        with open(path, "rb"):
            pass
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise ValueError(f"cannot read {path!r}: {getattr(exc, 'strerror', None) or exc}") from None


def _check_host(host: str) -> None:
    """An IP address or a host name (whether it can be bound is known at listen)."""
    if not host:
        raise ValueError("must not be empty (0.0.0.0 listens on every interface, 127.0.0.1 on this host only)")
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host)
        return
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?", host):
        raise ValueError(f"{host!r} is neither an IP address nor a host name")


def _check_id_prefix(prefix: str) -> None:
    """Ids are <prefix>-<n>: the prefix leaves room for the number under the id limit."""
    if prefix:
        validate_job_id(prefix + "-" + "9" * 20)


DEMO_HANDLER = "setqueue.runtime.demo:simulated_work"


def _check_job_handler(spec: str) -> None:
    load_handler(spec)  # fail at start, not on the first job


def _check_schedules(raw: str) -> None:
    # Imported here: croniter takes a fifth of a second to import.
    from setqueue.runtime.periodic import parse_schedules  # noqa: PLC0415

    parse_schedules(raw)


def validate_redis_url(url: str) -> str:
    """Reject what redis-py would only reject on first use, or misread silently."""

    def bad(problem: str) -> SettingError:
        return SettingError("REDIS_URL", f"{url!r}{problem}")

    if is_sentinel_url(url):
        try:
            parse_sentinel_url(url)
        except OptionError as exc:
            raise SettingError("REDIS_URL", exc.problem) from None
        return url
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise bad(f" is not a URL ({exc})") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise bad(" must start with redis://, rediss://, unix:// or redis+sentinel://")
    _check_url_options(url, parts.query)
    if parts.scheme == "unix":
        if not parts.path:
            raise bad(" names no socket path")
        return url
    if not parts.hostname:
        raise bad(" names no host")
    if port == 0:
        raise bad(" has port 0")
    db = parts.path.lstrip("/")
    if db and not (db.isdigit() and int(db) < 2**31):
        raise bad(": the database after the / must be a number")
    return url


def _check_url_options(url: str, query: str) -> None:
    """Query options are redis-py's, each with a value its parser takes."""
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS  # noqa: PLC0415 - redis-py's own table

    for name, values in parse_qs(query, keep_blank_values=True).items():
        if name not in URL_QUERY_ARGUMENT_PARSERS and name not in ("db", "username", "password", "ssl_cert_reqs"):
            known = ", ".join(sorted(URL_QUERY_ARGUMENT_PARSERS))
            raise SettingError("REDIS_URL", f"{redact_url(url)!r}: unknown option {name!r} (known: {known})")
        parse: Callable[[str], object] | None = URL_QUERY_ARGUMENT_PARSERS.get(name)  # type: ignore[assignment]
        for value in values:
            try:
                if parse is not None:
                    parse(value)
            except (TypeError, ValueError):
                raise SettingError("REDIS_URL", f"{redact_url(url)!r}: option {name}={value!r} is not valid") from None


_Q = queue_default
SETTINGS: tuple[Setting, ...] = (
    Setting(
        "REDIS_URL",
        str,
        "redis://localhost:6379/0",
        "redis://[:password@]host:port/db, rediss:// or unix://; or any node of a Redis Cluster (db 0); "
        "or redis+sentinel://[:password@]host:port,host:port/master/db (Redis Sentinel)",
        "all",
        check=validate_redis_url,
    ),
    Setting("REDIS_TLS_CA_FILE", str, "", "rediss://: the server's CA (PEM)", "all", check=_check_ca_file),
    Setting("REDIS_TLS_CERT_FILE", str, "", "rediss://: a client certificate (PEM)", "all", check=_readable),
    Setting("REDIS_TLS_KEY_FILE", str, "", "rediss://: its key, if not in that file", "all", check=_readable),
    Setting(
        "QUEUE_NAME",
        str,
        _Q("name"),
        "Queue name, or several, comma-separated (workers serve them in strict priority; the creator fills the first)",
        "all",
        check=parse_queue_names,
    ),
    Setting(
        "REDIS_TIMEOUT_SECONDS",
        float,
        "5",
        "Longest wait for one Redis reply (connect, or a command) before it is resent on a new connection",
        "all",
        low=0.05,
        high=300,
    ),
    Setting("QUEUE_SHARDS", int, "1", "Shards of a queue (the same in every service)", "all", low=1, high=MAX_SHARDS),
    Setting(
        "LEASE_SECONDS",
        float,
        _Q("lease_seconds"),
        "Lease of a claimed job; renewed at a third",
        "all",
        low=0.1,
        high=86400,
    ),
    Setting("MAX_ATTEMPTS", int, _Q("max_attempts"), "Claims before a job is dead-lettered", "all", low=1, high=1000),
    Setting("DONE_MAX_COUNT", int, _Q("done_max_count"), "Most ids in done (0 = no limit)", "all", low=0, high=10**9),
    Setting(
        "DONE_MAX_AGE_SECONDS",
        float,
        _Q("done_max_age_seconds"),
        "Ids older than this leave done (0 = keep)",
        "all",
        low=0,
        high=10 * 365 * 86400,
    ),
    Setting(
        "WAIT_REPLICAS",
        int,
        _Q("wait_replicas"),
        "Replicas that must confirm each write (WAIT), else it is resent; 0 = do not wait",
        "all",
        low=0,
        high=64,
    ),
    Setting(
        "WAIT_TIMEOUT_SECONDS",
        float,
        _Q("wait_timeout_seconds"),
        "How long a write waits for WAIT_REPLICAS",
        "all",
        low=0.001,
        high=60,
    ),
    Setting(
        "REQUEST_TTL_SECONDS",
        float,
        _Q("request_ttl_seconds"),
        "How long a script call's result is kept so that a resent call applies once",
        "all",
        low=10,
        high=3600,
    ),
    Setting(
        "PAYLOAD_MAX_BYTES",
        int,
        _Q("payload_max_bytes"),
        "Largest payload (UTF-8 bytes)",
        "all",
        low=1,
        high=2**29,
    ),
    Setting("METRICS_PORT", int, "8000", "Port of /metrics and /healthz (0 = none)", "all", low=0, high=65535),
    Setting("METRICS_HOST", str, "0.0.0.0", "Address of /metrics and /healthz", "all", check=_check_host),
    Setting("AUDIT", bool, "false", "Chaos runs: record ids and runs, and audit them", "all"),
    Setting(
        "REQUIRE_NOEVICTION",
        bool,
        "false",
        "true: refuse to start (exit 3) unless every master's maxmemory-policy is noeviction",
        "all",
    ),
    Setting("LOG_LEVEL", str, "INFO", "DEBUG, INFO, WARNING or ERROR", "all", choices=LOG_LEVELS),
    Setting("LOG_FORMAT", str, "text", "text or json", "all", choices=LOG_FORMATS),
    Setting("CREATE_RATE", float, "50", "Jobs per second (0 = unlimited)", "creator", low=0, high=1e6),
    Setting("CREATE_TOTAL", int, "0", "Jobs before it stops (0 = forever)", "creator", low=0, high=10**12),
    Setting("CREATE_BATCH", int, "100", "Most ids per enqueue call", "creator", low=1, high=10_000),
    Setting("CREATE_ID_PREFIX", str, "", "Prefix of ids (default: a random run id)", "creator", check=_check_id_prefix),
    Setting("CREATE_GROUPS", int, "0", "Job groups to spread ids over (0 = none)", "creator", low=0, high=1_000_000),
    Setting("CREATE_FROM_STDIN", bool, "false", "true: enqueue the ids read from stdin", "creator"),
    Setting("CONCURRENCY", int, "10", "Jobs one worker process runs at once", "worker", low=1, high=1000),
    Setting(
        "PROCESSES",
        int,
        "1",
        "Worker processes under one supervisor (auto = one per usable core)",
        "worker",
        low=1,
        high=MAX_PROCESSES,
        auto=usable_cores,
    ),
    Setting("CLAIM_BATCH", int, "10", "Most jobs claimed per call", "worker", low=1, high=MAX_IDS_PER_CALL),
    Setting("JOB_TIMEOUT_SECONDS", float, "300", "Job time limit (0 = none)", "worker", low=0, high=30 * 86400),
    Setting(
        "RETRY_TIMEOUTS",
        bool,
        "true",
        "A timed-out job is retried like any failure; false: dead-lettered at once (a job's own choice wins)",
        "worker",
    ),
    Setting(
        "RETRY_BACKOFF_SECONDS",
        float,
        _Q("retry_backoff_seconds"),
        "Retry n waits a random time in [d/2, d], d = min(max, this * 2^(n-1)); 0 = at once",
        "worker",
        low=0,
        high=86400,
    ),
    Setting(
        "RETRY_BACKOFF_MAX_SECONDS",
        float,
        _Q("retry_backoff_max_seconds"),
        "Cap of the retry backoff",
        "worker",
        low=0,
        high=30 * 86400,
    ),
    Setting("JOB_HANDLER", str, "", f"module:function (demo: {DEMO_HANDLER})", "worker", check=_check_job_handler),
    Setting("WORK_SECONDS", float, "0.2", "Demo: mean job duration", "worker", low=0, high=86400),
    Setting("WORK_JITTER", float, "0.5", "Demo: ± this fraction", "worker", low=0, high=1),
    Setting("FAIL_RATE", float, "0.0", "Demo: fraction of jobs that raise", "worker", low=0, high=1),
    Setting("SHUTDOWN_GRACE_SECONDS", float, "20", "On SIGTERM, time to finish held jobs", "worker", low=0, high=86400),
    Setting("IDLE_WAIT_SECONDS", float, "1", "Longest idle block before looking again", "worker", low=0.01, high=60),
    Setting(
        "RESULT_TTL_SECONDS",
        float,
        _Q("result_ttl_seconds"),
        "How long a handler's result is kept (0 = not kept)",
        "worker",
        low=0,
        high=30 * 86400,
    ),
    Setting(
        "PAYLOAD_KEEP_BYTES",
        int,
        _Q("payload_keep_bytes"),
        "A done job keeps a payload up to this size, as long as done keeps its id (0 = none kept)",
        "worker",
        low=0,
        high=2**29,
    ),
    Setting(
        "RESULT_MAX_BYTES",
        int,
        _Q("result_max_bytes"),
        "Largest result kept; a larger one fails the job",
        "worker",
        low=1,
        high=2**29,
    ),
    Setting(
        "STANDIN_SWEEP_SECONDS",
        float,
        "60",
        "Unswept this long, a worker sweeps itself (0 = never)",
        "worker",
        low=0,
        high=86400,
    ),
    Setting(
        "WORKER_HEARTBEAT_SECONDS",
        float,
        "2",
        "Beat of the live-worker registry (0 = do not register)",
        "worker",
        low=0,
        high=3600,
    ),
    Setting("CONSOLE_HOST", str, "127.0.0.1", "Address the console listens on", "console", check=_check_host),
    Setting("CONSOLE_PORT", int, "8080", "Port of the console", "console", low=1, high=65535),
    Setting("CONSOLE_TOKEN", str, "", "Secret for actions (empty = read-only)", "console"),
    Setting(
        "CONSOLE_REDIS_TIMEOUT_SECONDS",
        float,
        "1",
        "Longest wait for a Redis reply; then the page is a 503 (not resent)",
        "console",
        low=0.05,
        high=60,
    ),
    Setting("SWEEP_INTERVAL", float, "5", "Seconds between sweeps", "cleaner", low=0.01, high=3600),
    Setting("SWEEP_BATCH", int, "1000", "Most in_progress ids per sweep", "cleaner", low=1, high=100_000),
    Setting("AUDIT_INTERVAL", float, "10", "With AUDIT: seconds between audits", "cleaner", low=0.1, high=86400),
    Setting("SCHEDULES", str, "", "Periodic jobs: name=cron;... (UTC) or @file", "cleaner", check=_check_schedules),
)
SETTING_BY_NAME = {s.name: s for s in SETTINGS}
_BY_FIELD = {s.field: s for s in SETTINGS}


def default(name: str) -> Any:
    setting = SETTING_BY_NAME[name]
    return setting.parse(setting.default)


def check_tls(url: str, files: TlsFiles) -> None:
    """The REDIS_TLS_* files go with a rediss:// URL, the key with its certificate, and the two load together."""
    try:
        tls_options(url, **files)
    except OptionError as exc:
        raise SettingError.of(exc) from None
    cert, key = files.get("tls_cert_file"), files.get("tls_key_file")
    if cert:
        try:
            ssl.create_default_context().load_cert_chain(cert, key or None)
        except (OSError, ssl.SSLError, ValueError) as exc:
            name = "REDIS_TLS_KEY_FILE" if key else "REDIS_TLS_CERT_FILE"
            raise SettingError(name, f"the client certificate and its key do not load together ({exc})") from None


def load_handler(spec: str) -> Callable[..., Any]:
    """Import ``module:function``; a SettingError for JOB_HANDLER saying where it went wrong, or if it
    cannot be called with a lease. The current directory is importable, as under ``python -m worker``."""
    if not spec:
        raise SettingError(
            "JOB_HANDLER", f"is not set: name your job function as module:function (the demo's is {DEMO_HANDLER})"
        )
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SettingError("JOB_HANDLER", f"{spec!r} must look like package.module:function")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.partition(".")[0] and exc.name != module_name:
            raise SettingError("JOB_HANDLER", f"cannot import {module_name!r}: {_where(exc)}") from None
        raise SettingError(
            "JOB_HANDLER", f"no module {module_name!r} in the current directory or on PYTHONPATH ({exc})"
        ) from None
    except BaseException as exc:  # an import can fail in any way (even SystemExit): say how and where
        raise SettingError("JOB_HANDLER", f"cannot import {module_name!r}: {_where(exc)}") from None
    if not hasattr(module, attr):
        raise SettingError("JOB_HANDLER", f"module {module_name!r} ({module.__file__}) has no {attr!r}")
    handler = getattr(module, attr)
    if not callable(handler):
        raise SettingError("JOB_HANDLER", f"{spec} is not callable: it is {handler!r:.60}")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # a builtin without a signature: take it as it is
        return handler  # type: ignore[no-any-return]
    try:
        signature.bind(object())
    except TypeError:
        raise SettingError("JOB_HANDLER", f"{spec}{signature} cannot be called with one lease") from None
    return handler  # type: ignore[no-any-return]


def _where(exc: BaseException) -> str:
    """An exception as one line with the file and line of its deepest frame in the user's code."""
    what = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{what} ({exc.filename}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    theirs = [f for f in frames if not f.filename.startswith(_LIBRARY_PATHS) and not f.filename.startswith("<")]
    if not frames:
        return what
    frame = (theirs or frames)[-1]
    line = f": {frame.line}" if frame.line else ""
    return f"{what} ({frame.filename}, line {frame.lineno}{line})"


# Where Python and installed packages live: not the user's code.
_LIBRARY_PATHS = tuple(
    {sysconfig.get_path(name) for name in ("stdlib", "platstdlib", "purelib", "platlib")} - {None, ""}
)


SettingsT = TypeVar("SettingsT", bound="CommonSettings")


@dataclass(frozen=True)
class CommonSettings:
    """What every service reads; each field is the setting of its name in ``SETTINGS``."""

    redis_url: str
    redis_tls_ca_file: str
    redis_tls_cert_file: str
    redis_tls_key_file: str
    redis_timeout_seconds: float
    queue_name: str
    queue_shards: int
    lease_seconds: float
    max_attempts: int
    done_max_count: int
    done_max_age_seconds: float
    wait_replicas: int
    wait_timeout_seconds: float
    request_ttl_seconds: float
    payload_max_bytes: int
    metrics_port: int
    metrics_host: str
    audit: bool
    require_noeviction: bool
    log_level: str
    log_format: str

    @classmethod
    def from_env(cls: type[SettingsT], env: Mapping[str, str] | None = None) -> SettingsT:
        env = os.environ if env is None else env
        return cls(**{f.name: _BY_FIELD[f.name].read(env) for f in fields(cls)})

    def __post_init__(self) -> None:
        check_tls(self.redis_url, self.tls_options())
        if self.wait_replicas > 0 and self.wait_timeout_seconds >= self.redis_timeout_seconds:
            raise SettingError(
                "WAIT_TIMEOUT_SECONDS",
                f"{self.wait_timeout_seconds:g} must be shorter than REDIS_TIMEOUT_SECONDS "
                f"({self.redis_timeout_seconds:g}): a WAIT that outlasts it reads as a dead connection",
            )

    def tls_options(self) -> TlsFiles:
        return {
            "tls_ca_file": self.redis_tls_ca_file or None,
            "tls_cert_file": self.redis_tls_cert_file or None,
            "tls_key_file": self.redis_tls_key_file or None,
        }

    @property
    def trims_done(self) -> bool:
        return self.done_max_count > 0 or self.done_max_age_seconds > 0

    @property
    def queue_names(self) -> tuple[str, ...]:
        return parse_queue_names(self.queue_name)

    def queue_options(self) -> dict[str, Any]:
        """``Queue.from_url``'s keyword arguments besides the URL (the name: the first queue's)."""
        return {
            "name": self.queue_names[0],
            "lease_seconds": self.lease_seconds,
            "max_attempts": self.max_attempts,
            "done_max_count": self.done_max_count,
            "done_max_age_seconds": self.done_max_age_seconds,
            "wait_replicas": self.wait_replicas,
            "wait_timeout_seconds": self.wait_timeout_seconds,
            "request_ttl_seconds": self.request_ttl_seconds,
            "payload_max_bytes": self.payload_max_bytes,
        }


@dataclass(frozen=True)
class CreatorSettings(CommonSettings):
    create_rate: float
    create_total: int
    create_batch: int
    create_id_prefix: str
    create_groups: int
    create_from_stdin: bool


@dataclass(frozen=True)
class WorkerSettings(CommonSettings):
    concurrency: int
    processes: int
    claim_batch: int
    job_timeout_seconds: float
    retry_timeouts: bool
    retry_backoff_seconds: float
    retry_backoff_max_seconds: float
    job_handler: str
    work_seconds: float
    work_jitter: float
    fail_rate: float
    shutdown_grace_seconds: float
    idle_wait_seconds: float
    result_ttl_seconds: float
    result_max_bytes: int
    payload_keep_bytes: int
    standin_sweep_seconds: float
    worker_heartbeat_seconds: float

    def queue_options(self) -> dict[str, Any]:
        return {
            **super().queue_options(),
            "retry_backoff_seconds": self.retry_backoff_seconds,
            "retry_backoff_max_seconds": self.retry_backoff_max_seconds,
            "result_ttl_seconds": self.result_ttl_seconds,
            "result_max_bytes": self.result_max_bytes,
            "payload_keep_bytes": self.payload_keep_bytes,
        }


@dataclass(frozen=True)
class CleanerSettings(CommonSettings):
    sweep_interval: float
    sweep_batch: int
    audit_interval: float
    schedules: str


@dataclass(frozen=True)
class ConsoleSettings(CommonSettings):
    console_host: str
    console_port: int
    console_token: str
    console_redis_timeout_seconds: float
