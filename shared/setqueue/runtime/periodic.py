"""Periodic jobs: named cron schedules whose runs the cleaner enqueues.

``SCHEDULES`` declares them, ``name=cron expression`` separated by ``;`` (or newlines), or
``@path`` of a file with one ``name=cron expression`` a line (blank lines and ``#`` comments
ignored). Expressions are standard 5-field cron (minute hour day-of-month month day-of-week) or
one of ``@hourly``, ``@daily``, ``@midnight``, ``@weekly``, ``@monthly``, ``@yearly``,
``@annually``, in UTC, parsed by croniter.

The schedules in force live in Redis with the queue (``setqueue:{Q}:schedules``, name -> expression):
a cleaner registers those of its SCHEDULES when it starts, ``add_schedule`` and ``remove_schedule``
(and ``setqueue schedules add|remove``) change them without any environment, and every cleaner
creates the runs of what is registered there, read afresh each round.

The run of slot ``t`` of schedule ``name`` is the job ``<name>@<t, ISO 8601 UTC>`` (e.g.
``report@2026-11-23T16:00:00Z``) with the payload ``{"schedule": name, "slot": "<t>"}``. Each
cleaner round creates only the run of each schedule's latest slot at or before now (the Redis
clock), in one script call that also records that slot in ``setqueue:{Q}:periodic``: a run is
created once however many cleaners run, a slot is never created again once a later one was, and
after downtime only the latest missed slot runs. A schedule seen for the first time records its
slot without a run: its first run is its next slot.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import redis
from croniter import CroniterBadDateError, CroniterError, croniter  # type: ignore[import-untyped]

from setqueue.interface import Shard
from setqueue.keys import check_utf8

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
KEYWORDS = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")


def iso(t: float) -> str:
    """Unix seconds as ISO 8601 UTC to the second: ``2026-11-23T16:00:00Z``."""
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.UTC)


def latest_slot(expr: str, now: float) -> float:
    """The latest time (Unix seconds, a whole minute) at or before ``now`` that ``expr`` matches."""
    after_this_minute = math.floor(now / 60) * 60 + 60
    return float(croniter(expr, _utc(after_this_minute)).get_prev(float))  # get_prev: strictly before


def next_slot(expr: str, now: float) -> float:
    """The first time (Unix seconds) after ``now`` that ``expr`` matches."""
    return float(croniter(expr, _utc(now)).get_next(float))


def check_cron(expr: str) -> str:
    """``expr`` if it is a 5-field cron expression (or a keyword) that matches some time; else ValueError."""
    if expr.startswith("@"):
        if expr.lower() not in KEYWORDS:
            raise ValueError(f"{expr!r} is not one of {', '.join(KEYWORDS)}")
        return expr.lower()
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"{expr!r} has {len(fields)} fields, not the 5 of minute hour day-of-month month day-of-week")
    try:
        next_slot(expr, 0.0)  # parses it, and finds expressions that match no date (0 0 30 2 *)
    except CroniterBadDateError:
        raise ValueError(f"{expr!r} matches no date") from None
    except (CroniterError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(f"{expr!r} is not a valid cron expression ({exc})") from None
    return " ".join(fields)


@dataclass(frozen=True)
class Schedule:
    """One named schedule: its runs are the jobs ``<name>@<slot>``."""

    name: str
    expr: str

    def latest_slot(self, now: float) -> float:
        return latest_slot(self.expr, now)

    def next_slot(self, now: float) -> float:
        return next_slot(self.expr, now)

    def run_id(self, slot: float) -> str:
        return f"{self.name}@{iso(slot)}"

    def payload(self, slot: float) -> str:
        return json.dumps({"schedule": self.name, "slot": iso(slot)}, separators=(",", ":"))


def parse_schedules(raw: str) -> tuple[Schedule, ...]:
    """The schedules that ``SCHEDULES`` declares: ``name=cron;name2=cron``, or ``@path`` of a file
    with one ``name=cron`` a line. ValueError (one line) if anything is wrong."""
    raw = raw.strip()
    where = ""
    if raw.startswith("@"):
        path = raw[1:].strip()
        try:
            raw = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise ValueError(f"cannot read the schedules file {path!r}: {reason}") from None
        where = f"{path}: "
    schedules: list[Schedule] = []
    seen: set[str] = set()
    entries = [entry.strip() for line in raw.splitlines() for entry in line.split(";")]
    for entry in entries:
        if not entry or entry.startswith("#"):
            continue
        name, eq, expr = (part.strip() for part in entry.partition("="))
        if not eq:
            raise ValueError(f"{where}{entry!r} is not name=cron expression")
        try:
            check_name(name)
        except ValueError as exc:
            raise ValueError(f"{where}{exc}") from None
        if name in seen:
            raise ValueError(f"{where}schedule {name!r} is declared twice")
        seen.add(name)
        try:
            schedules.append(Schedule(name, check_cron(expr)))
        except ValueError as exc:
            raise ValueError(f"{where}schedule {name!r}: {exc}") from None
    return tuple(schedules)


def redis_now(client: redis.Redis) -> float:
    """The Redis clock (TIME) in Unix seconds: the queue's only clock."""
    seconds, micros = client.time()
    return float(seconds) + micros / 1_000_000


def due_runs(schedules: tuple[Schedule, ...], now: float) -> list[tuple[str, int, str, str | None]]:
    """The run of each schedule's latest slot at or before ``now`` (Unix seconds, the Redis clock),
    as ``Queue.create_periodic_runs`` takes them: (name, slot in ms, run id, payload)."""
    runs: list[tuple[str, int, str, str | None]] = []
    for schedule in schedules:
        slot = schedule.latest_slot(now)
        runs.append((schedule.name, round(slot * 1000), schedule.run_id(slot), schedule.payload(slot)))
    return runs


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ValueError(
            f"schedule name {name!r} must be 1 to 100 letters, digits, _ . : or - (starting with a letter or digit)"
        )
    return name


def add_schedule(queue: Shard, name: str, expr: str) -> Schedule:
    """Register (or change) the periodic job ``name`` of ``queue`` (one unsharded queue): from the
    next round on, every cleaner of the queue creates its runs. ValueError (one line) for a bad
    name or expression, before anything is written."""
    schedule = Schedule(check_name(name), check_cron(expr.strip()))
    queue.redis.hset(queue.keys.schedules, schedule.name, schedule.expr)
    return schedule


def register(queue: Shard, schedules: tuple[Schedule, ...]) -> None:
    """Register these schedules (already checked: SCHEDULES), changing those of the same names."""
    if schedules:
        queue.redis.hset(queue.keys.schedules, mapping={s.name: s.expr for s in schedules})


def remove_schedule(queue: Shard, name: str) -> bool:
    """Stop the periodic job ``name`` (its last slot stays recorded, so adding it back later does
    not run a missed slot at once). False if no such schedule was registered. Any name Redis can
    hold may be removed (one written by other means too); ValueError for one it cannot (not UTF-8)."""
    return bool(queue.redis.hdel(queue.keys.schedules, check_utf8("schedule name", name)))


def registered(queue: Shard) -> tuple[tuple[Schedule, ...], list[str]]:
    """The schedules in force (by name), and a line for each entry that is not a valid one
    (written to Redis by other means): it is left out, never a reason to stop."""
    raw: dict[str, str] = queue.redis.hgetall(queue.keys.schedules)  # type: ignore[assignment]
    schedules: list[Schedule] = []
    problems: list[str] = []
    for name, expr in sorted(raw.items()):
        try:
            schedules.append(Schedule(check_name(name), check_cron(expr)))
        except ValueError as exc:
            problems.append(f"schedule {name!r} in {queue.keys.schedules} is left out: {exc}")
    return tuple(schedules), problems
