"""Periodic jobs: named cron schedules whose runs the cleaner enqueues (docs/guide.md, "Periodic jobs").

``SCHEDULES``: ``name=cron`` entries separated by ``;`` or newlines, or ``@path`` of a file of them
(blank lines and ``#`` comments ignored). A round creates only each schedule's latest slot at or before
now (Redis clock), in one script that also records it: a run is created once however many cleaners
run, never after a later slot, and after downtime only the latest missed slot runs.
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
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def _utc(t: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(t, datetime.UTC)


def latest_slot(expr: str, now: float) -> float:  # a whole minute
    after_this_minute = math.floor(now / 60) * 60 + 60
    return float(croniter(expr, _utc(after_this_minute)).get_prev(float))  # get_prev: strictly before


def next_slot(expr: str, now: float) -> float:
    return float(croniter(expr, _utc(now)).get_next(float))


def check_cron(expr: str) -> str:
    """``expr`` normalised if it is a cron expression that matches some time; else ValueError."""
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
    """What ``SCHEDULES`` declares; ValueError (one line) if anything is wrong."""
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
    seconds, micros = client.time()
    return float(seconds) + micros / 1_000_000


def next_run(schedule: Schedule, now: float, last_slot: float | None) -> float:
    """The slot of the schedule's next run, as the cleaners create it, given the slot recorded for it: its
    latest slot (at or before ``now``: the cleaners' next round creates it) when that is later than the one
    recorded, as for a changed schedule or one added back; else its next slot (a schedule never seen gets
    its current slot recorded without a run)."""
    latest = schedule.latest_slot(now)
    if last_slot is not None and latest > last_slot:
        return latest
    return schedule.next_slot(now)


def due_runs(schedules: tuple[Schedule, ...], now: float) -> list[tuple[str, int, str, str | None]]:
    """Each schedule's latest slot, as ``Queue.create_periodic_runs`` takes it."""
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
    """Of an unsharded queue; ValueError before writing if bad."""
    schedule = Schedule(check_name(name), check_cron(expr.strip()))
    queue.redis.hset(queue.keys.schedules, schedule.name, schedule.expr)
    return schedule


def register(queue: Shard, schedules: tuple[Schedule, ...]) -> None:
    if schedules:
        queue.redis.hset(queue.keys.schedules, mapping={s.name: s.expr for s in schedules})


def remove_schedule(queue: Shard, name: str) -> bool:
    """False if not registered. Its last slot stays recorded: added back, it runs at once only if it has a
    later slot by then (``next_run``), and never a slot it ran. Any UTF-8 name may be removed."""
    return bool(queue.redis.hdel(queue.keys.schedules, check_utf8("schedule name", name)))


def registered(queue: Shard) -> tuple[tuple[Schedule, ...], list[str]]:
    """The schedules in force, and a line for each invalid entry (left out, never a reason to stop)."""
    raw: dict[str, str] = queue.redis.hgetall(queue.keys.schedules)  # type: ignore[assignment]
    schedules: list[Schedule] = []
    problems: list[str] = []
    for name, expr in sorted(raw.items()):
        try:
            schedules.append(Schedule(check_name(name), check_cron(expr)))
        except ValueError as exc:
            problems.append(f"schedule {name!r} in {queue.keys.schedules} is left out: {exc}")
    return tuple(schedules), problems
