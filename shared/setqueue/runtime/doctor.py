"""``setqueue doctor``: what a queue needs from its Redis, one line per check, ``ok``, ``WARN`` (it
works; look at it) or ``FAIL`` (jobs can be lost or refused); exit code 1 when one failed. Writes
nothing. Checks: redis (version 7.0+, cluster, TLS), eviction (noeviction on every master), memory,
persistence (AOF), scripts (they run as this user), cleaner (every shard swept lately), workers (every
queue of this Redis with jobs not ended has a live worker).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import redis
from redis import exceptions as rexc

from setqueue.client import ClusterAwareRedis, on_a_cluster
from setqueue.interface import JobQueue
from setqueue.runtime.acl import explain_refusal
from setqueue.runtime.pressure import MemoryReport, masters, read_memory
from setqueue.scripts import text

LEAST_VERSION = (7, 0)  # script flags (#!lua flags=...)
# A sweep older than this: no cleaner is running.
STALE_SWEEP_SECONDS = 60.0
MEMORY_HIGH = 0.9
# A queue's keys that hold jobs not ended, and its live workers' records (setqueue.registry).
_QUEUE_KEY = re.compile(r"setqueue:\{([^{}]+)\}:(todos|grouped|scheduled|in_progress|worker:.+)")
_SHARD = re.compile(r"(.+)~\d+")
_WORK = {"todos": "waiting", "grouped": "waiting", "scheduled": "scheduled", "in_progress": "in progress"}
MOST_NAMED = 10  # queues one line names
_NO_INFO = "unknown (this user may not run INFO)"


@dataclass(frozen=True)
class Finding:
    level: str  # "ok", "WARN" or "FAIL"
    check: str
    detail: str

    def line(self) -> str:
        return f"{self.level:<5} {self.check}: {self.detail}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def check_redis(queue: JobQueue, tls: bool) -> Finding:
    client = queue.redis
    nodes = masters(client)
    kind = f"a Redis Cluster of {len(nodes)} masters" if on_a_cluster(client) else "one Redis"
    wire = "over TLS" if tls else "plain TCP, no TLS"
    try:
        server: dict[str, Any] = nodes[0][1].info("server")  # type: ignore[assignment]
    except rexc.NoPermissionError:
        unknown = "version unknown (this user may not run INFO)"
        return Finding("WARN", "redis", f"{kind} at {nodes[0][0]}, {wire}; {unknown}")
    # Valkey names itself and its own version; its redis_version is the Redis it is compatible with.
    version = str(server["redis_version"])
    shown = f"Valkey {server.get('valkey_version')}" if server.get("server_name") == "valkey" else f"Redis {version}"
    where = f"{shown}, {kind} at {nodes[0][0]}, {wire}"
    if _version(version) < LEAST_VERSION:
        return Finding("FAIL", "redis", f"{where}: setqueue needs Redis 7.0 or later (its scripts declare flags)")
    return Finding("ok", "redis", where)


def check_eviction(report: MemoryReport) -> Finding:
    if report.unknown is not None:
        return Finding("WARN", "eviction", f"maxmemory-policy unknown: {report.unknown}")
    evicting = report.evicting
    if evicting:
        policies = ", ".join(f"{node.policy} on {node.node}" for node in evicting)
        return Finding(
            "FAIL", "eviction", f"maxmemory-policy {policies}: a full Redis drops queue keys; set noeviction"
        )
    return Finding("ok", "eviction", f"maxmemory-policy noeviction on {len(report.nodes)} of {len(report.nodes)}")


def check_memory(report: MemoryReport) -> Finding:
    if report.unknown is not None or report.used_ratio < 0:
        return Finding("WARN", "memory", _NO_INFO)
    fullest = max(report.nodes, key=lambda node: node.ratio or 0.0)
    if not fullest.maxmemory:
        return Finding("ok", "memory", "no maxmemory set: Redis takes what the host gives it")
    used = f"{fullest.counted or 0:,} of {fullest.maxmemory:,} bytes ({report.used_ratio:.0%}) on {fullest.node}"
    if report.full:
        return Finding(
            "FAIL", "memory", f"out of memory, {used}: enqueues are refused until workers and the cleaner free room"
        )
    if report.used_ratio >= MEMORY_HIGH:
        return Finding("WARN", "memory", f"{used}: nearly full")
    return Finding("ok", "memory", used)


def check_persistence(queue: JobQueue) -> Finding:
    off = []
    for where, node in masters(queue.redis):
        try:
            info: dict[str, Any] = node.info("persistence")  # type: ignore[assignment]
        except rexc.NoPermissionError:
            return Finding("WARN", "persistence", _NO_INFO)
        if not int(info.get("aof_enabled", 0)):
            off.append(where)
    if off:
        lost = "a crash loses what was written since the last snapshot"
        return Finding("WARN", "persistence", f"AOF is off on {', '.join(off)}: {lost}")
    return Finding("ok", "persistence", "AOF on")


def check_scripts(queue: JobQueue) -> Finding:
    try:
        stats = queue.stats()
    except rexc.ResponseError as exc:
        return Finding("FAIL", "scripts", explain_refusal(exc) or f"{type(exc).__name__}: {exc}")
    held = sum(int(stats[state]) for state in ("todos", "in_progress", "scheduled"))
    return Finding("ok", "scripts", f"they load and run as this user; {held:,} jobs waiting or running")


def check_cleaner(queue: JobQueue) -> Finding:
    stale = []
    ages = []
    for shard in queue.shards:
        age = shard.seconds_since_sweep()
        if age is None or age > STALE_SWEEP_SECONDS:
            stale.append(f"{shard.name} ({'not for a day' if age is None else f'{age:.0f}s ago'})")
        else:
            ages.append(age)
    if stale:
        return Finding("WARN", "cleaner", f"not swept lately: {', '.join(stale)}; is a cleaner running?")
    return Finding("ok", "cleaner", f"every queue swept within {max(ages):.0f}s")


def _scan(client: Any, pattern: str) -> Iterator[str]:
    """Every master's keys matching ``pattern``."""
    cluster = client.cluster_client() if isinstance(client, ClusterAwareRedis) else None
    source: Any = cluster if cluster is not None else client
    for key in source.scan_iter(match=pattern, count=1000):
        yield text(key)


def _named(names: list[str]) -> str:
    more = len(names) - MOST_NAMED
    return ", ".join(names[:MOST_NAMED]) + (f" and {more} more" if more > 0 else "")


def check_workers(queue: JobQueue) -> Finding:
    """Every queue of this Redis with jobs waiting, scheduled or in progress has a live worker in the
    registry, its own or its sharded queue's (one SCAN of the keys)."""
    client = queue.redis
    work: dict[str, list[tuple[str, str]]] = {}  # queue (or shard) -> (key, what its jobs are)
    served: set[str] = set()
    for key in _scan(client, "setqueue:{*}:[tgsiw]*"):
        match = _QUEUE_KEY.fullmatch(key)
        if match is None:
            continue
        if match[2].startswith("worker:"):
            served.add(match[1])
        else:
            work.setdefault(match[1], []).append((key, _WORK[match[2]]))
    unserved: dict[str, dict[str, int]] = {}  # queue -> what -> jobs
    for name, keys in sorted(work.items()):
        shard = _SHARD.fullmatch(name)
        base = shard[1] if shard is not None else name
        if name in served or base in served:
            continue
        counts = unserved.setdefault(base, {})
        for key, what in keys:
            counts[what] = counts.get(what, 0) + int(client.zcard(key))  # type: ignore[arg-type]
    unserved = {name: counts for name, counts in unserved.items() if sum(counts.values())}
    serving = f"live workers serve {_named(sorted(served))}" if served else "no live worker is registered"
    if not unserved:
        return Finding("ok", "workers", f"{serving}; no queue with jobs lacks one")
    lines = [
        f"{name} ({', '.join(f'{n:,} {what}' for what, n in counts.items() if n)})" for name, counts in unserved.items()
    ]
    return Finding(
        "WARN",
        "workers",
        f"no live worker serves {_named(lines)}: their jobs wait until one does (a typo in a queue name?); {serving}",
    )


def doctor(queue: JobQueue, tls: bool, out: TextIO) -> int:
    """1 when a check failed, else 0; an unreachable Redis raises."""
    report = read_memory(queue.redis)
    checks: list[Callable[[], Finding]] = [
        lambda: check_redis(queue, tls),
        lambda: check_eviction(report),
        lambda: check_memory(report),
        lambda: check_persistence(queue),
        lambda: check_scripts(queue),
        lambda: check_cleaner(queue),
        lambda: check_workers(queue),
    ]
    failed = False
    for check in checks:
        try:
            finding = check()
        except rexc.NoPermissionError as exc:
            finding = Finding("FAIL", "permissions", explain_refusal(exc) or str(exc))
        except (rexc.ConnectionError, rexc.TimeoutError):
            raise
        except redis.RedisError as exc:
            finding = Finding("FAIL", "redis", f"{type(exc).__name__}: {exc}")
        print(finding.line(), file=out, flush=True)
        failed = failed or finding.level == "FAIL"
    return 1 if failed else 0
