"""Settings of the three services, from environment variables, parsed once and validated.

Each setting is declared once in ``SETTINGS`` (name, default, meaning, who reads it); the
dataclasses below are built from it, and the README's configuration table lists the same names
(a test keeps the two in step). A bad value raises ``SettingError`` naming the variable; the
services turn that into one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from setqueue.keys import validate_queue_name

T = TypeVar("T")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


class SettingError(ValueError):
    """A setting is missing or malformed; ``str()`` is one line naming the variable."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"invalid setting {name}: {problem}")
        self.name = name


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    meaning: str
    services: str  # who reads it: "all", or a comma-separated list


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "REDIS_URL",
        "redis://localhost:6379/0",
        "Redis to use: redis://[:password@]host:port/db, rediss:// or unix://",
        "all",
    ),
    Setting("QUEUE_NAME", "default", "Queue name; every key is setqueue:{QUEUE_NAME}:…", "all"),
    Setting("LEASE_SECONDS", "30", "Lease (lock TTL) of a claimed job; workers renew at a third of it", "all"),
    Setting("MAX_ATTEMPTS", "5", "Claims a job gets before it is dead-lettered into failed", "all"),
    Setting("DONE_MAX_COUNT", "1000000", "Most ids kept in done (oldest dropped first; 0 = no limit)", "all"),
    Setting(
        "DONE_MAX_AGE_SECONDS", "604800", "Ids older than this are dropped from done by the cleaner (0 = keep)", "all"
    ),
    Setting("METRICS_PORT", "8000", "Port of /metrics and /healthz (0 = no HTTP server)", "all"),
    Setting("LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR", "all"),
    Setting("LOG_FORMAT", "text", "text, or json for one JSON object per line", "all"),
    Setting("CREATE_RATE", "50", "Jobs per second the creator enqueues (0 = as fast as possible)", "creator"),
    Setting("CREATE_TOTAL", "0", "Jobs the creator enqueues before it stops (0 = forever)", "creator"),
    Setting("CREATE_BATCH", "100", "Most ids per enqueue call", "creator"),
    Setting(
        "CREATE_ID_PREFIX",
        "",
        "Prefix of generated ids (default: a random run id, so ids are unique per run)",
        "creator",
    ),
    Setting(
        "CREATE_FROM_STDIN",
        "false",
        "true: enqueue the ids read from stdin (one per line) instead of generating",
        "creator",
    ),
    Setting("CLAIM_BATCH", "10", "Most jobs a worker claims per call", "worker"),
    Setting(
        "JOB_HANDLER",
        "setqueue.demo:simulated_work",
        "The job function, as module:function; called with each Lease",
        "worker",
    ),
    Setting("WORK_SECONDS", "0.2", "Demo handler: mean duration of a job", "worker"),
    Setting("WORK_JITTER", "0.5", "Demo handler: duration varies uniformly by ± this fraction", "worker"),
    Setting("FAIL_RATE", "0.0", "Demo handler: fraction of jobs that raise (retried, then dead-lettered)", "worker"),
    Setting("SHUTDOWN_GRACE_SECONDS", "20", "On SIGTERM, time to finish held jobs before releasing the rest", "worker"),
    Setting(
        "IDLE_WAIT_SECONDS", "1", "Longest an idle worker blocks on the wake-up list before looking again", "worker"
    ),
    Setting("SWEEP_INTERVAL", "5", "Seconds between two sweeps of the cleaner", "cleaner"),
    Setting("SWEEP_BATCH", "1000", "Most in_progress ids examined per sweep", "cleaner"),
)
_DEFAULTS = {s.name: s.default for s in SETTINGS}


def _get(env: Mapping[str, str], name: str) -> str:
    return env.get(name, _DEFAULTS[name]).strip()


def _number(env: Mapping[str, str], name: str, kind: Callable[[str], T], low: float, high: float = math.inf) -> T:
    raw = _get(env, name)
    try:
        value = kind(raw)
    except ValueError:
        raise SettingError(name, f"{raw!r} is not a {'whole ' if kind is int else ''}number") from None
    if not (low <= value <= high):  # type: ignore[operator]
        bounds = f"at least {low}" if high == math.inf else f"between {low} and {high}"
        raise SettingError(name, f"{raw} is out of range (must be {bounds})")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], fold: Callable[[str], str]) -> str:
    raw = fold(_get(env, name))
    if raw not in choices:
        raise SettingError(name, f"{raw!r} is not one of {', '.join(choices)}")
    return raw


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = _get(env, name).lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off", ""):
        return False
    raise SettingError(name, f"{raw!r} is not true or false")


def validate_redis_url(url: str) -> str:
    """Reject what redis-py would only reject on first use, or misread silently."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise SettingError("REDIS_URL", f"{url!r} is not a URL ({exc})") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise SettingError("REDIS_URL", f"{url!r} must start with redis://, rediss:// or unix://")
    if parts.scheme == "unix":
        if not parts.path:
            raise SettingError("REDIS_URL", f"{url!r} names no socket path")
        return url
    if not parts.hostname:
        raise SettingError("REDIS_URL", f"{url!r} names no host")
    if port == 0:
        raise SettingError("REDIS_URL", f"{url!r} has port 0")
    db = parts.path.lstrip("/")
    if db and not db.isdigit():
        raise SettingError("REDIS_URL", f"{url!r}: the database after the / must be a number")
    return url


def redact_url(url: str) -> str:
    """The URL without its password, for logs."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return "<unparsable URL>"


def load_handler(spec: str) -> Callable[..., Any]:
    """Import ``module:function``; a SettingError for JOB_HANDLER if that is impossible."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SettingError("JOB_HANDLER", f"{spec!r} must look like package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import can fail in any way; the user needs the reason
        raise SettingError("JOB_HANDLER", f"cannot import {module_name!r}: {exc}") from None
    handler = getattr(module, attr, None)
    if not callable(handler):
        raise SettingError("JOB_HANDLER", f"{module_name!r} has no callable {attr!r}")
    return handler  # type: ignore[no-any-return]


@dataclass(frozen=True)
class CommonSettings:
    redis_url: str
    queue_name: str
    lease_seconds: float
    max_attempts: int
    done_max_count: int
    done_max_age_seconds: float
    metrics_port: int
    log_level: str
    log_format: str

    @staticmethod
    def common_from_env(env: Mapping[str, str]) -> dict[str, Any]:
        queue_name = _get(env, "QUEUE_NAME")
        try:
            validate_queue_name(queue_name)
        except ValueError as exc:
            raise SettingError("QUEUE_NAME", str(exc)) from None
        return {
            "redis_url": validate_redis_url(_get(env, "REDIS_URL")),
            "queue_name": queue_name,
            "lease_seconds": _number(env, "LEASE_SECONDS", float, 0.1, 86400),
            "max_attempts": _number(env, "MAX_ATTEMPTS", int, 1, 1000),
            "done_max_count": _number(env, "DONE_MAX_COUNT", int, 0),
            "done_max_age_seconds": _number(env, "DONE_MAX_AGE_SECONDS", float, 0),
            "metrics_port": _number(env, "METRICS_PORT", int, 0, 65535),
            "log_level": _choice(env, "LOG_LEVEL", LOG_LEVELS, str.upper),
            "log_format": _choice(env, "LOG_FORMAT", LOG_FORMATS, str.lower),
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CommonSettings:
        return cls(**cls.common_from_env(os.environ if env is None else env))

    def queue_options(self) -> dict[str, Any]:
        """Keyword arguments for ``Queue.from_url`` besides the URL."""
        return {
            "name": self.queue_name,
            "lease_seconds": self.lease_seconds,
            "max_attempts": self.max_attempts,
            "done_max_count": self.done_max_count,
            "done_max_age_seconds": self.done_max_age_seconds,
        }


@dataclass(frozen=True)
class CreatorSettings(CommonSettings):
    create_rate: float
    create_total: int
    create_batch: int
    create_id_prefix: str
    create_from_stdin: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CreatorSettings:
        env = os.environ if env is None else env
        return cls(
            **cls.common_from_env(env),
            create_rate=_number(env, "CREATE_RATE", float, 0),
            create_total=_number(env, "CREATE_TOTAL", int, 0),
            create_batch=_number(env, "CREATE_BATCH", int, 1, 10_000),
            create_id_prefix=_get(env, "CREATE_ID_PREFIX"),
            create_from_stdin=_flag(env, "CREATE_FROM_STDIN"),
        )


@dataclass(frozen=True)
class WorkerSettings(CommonSettings):
    claim_batch: int
    job_handler: str
    work_seconds: float
    work_jitter: float
    fail_rate: float
    shutdown_grace_seconds: float
    idle_wait_seconds: float

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerSettings:
        env = os.environ if env is None else env
        handler = _get(env, "JOB_HANDLER")
        load_handler(handler)  # fail at start, not on the first job
        return cls(
            **cls.common_from_env(env),
            claim_batch=_number(env, "CLAIM_BATCH", int, 1, 500),
            job_handler=handler,
            work_seconds=_number(env, "WORK_SECONDS", float, 0),
            work_jitter=_number(env, "WORK_JITTER", float, 0, 1),
            fail_rate=_number(env, "FAIL_RATE", float, 0, 1),
            shutdown_grace_seconds=_number(env, "SHUTDOWN_GRACE_SECONDS", float, 0),
            idle_wait_seconds=_number(env, "IDLE_WAIT_SECONDS", float, 0.01, 60),
        )


@dataclass(frozen=True)
class CleanerSettings(CommonSettings):
    sweep_interval: float
    sweep_batch: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CleanerSettings:
        env = os.environ if env is None else env
        return cls(
            **cls.common_from_env(env),
            sweep_interval=_number(env, "SWEEP_INTERVAL", float, 0.01, 3600),
            sweep_batch=_number(env, "SWEEP_BATCH", int, 1, 100_000),
        )
