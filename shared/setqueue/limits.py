"""Limits' values: rates, a group's limits, a queue's limits; how they are written in Redis
(docs/guide.md#limits).

The limits live in Redis with the queue (the ``limits`` and ``group_limits`` hashes of ``setqueue.keys``),
so every worker reads the same ones on its next claim and a change needs no restart; ``lua/claim.lua``
enforces them in the step that takes the jobs, so no worker can race them. A rate is GCRA (a token bucket
kept as one number, its theoretical arrival time): at most ``burst`` jobs start at once, and over any span
of T seconds at most ``burst + T * count / period``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

# A rate's unit (what follows the "/" in "100/s"): how many ms it spans.
UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
}
# Bounds that refuse a typo rather than a real need: far above what one Redis can start (~100,000 jobs/s),
# and a period of at most a week.
MAX_RATE_PER_SECOND = 1_000_000
MAX_COUNT = 1_000_000_000
MAX_PERIOD_MS = 7 * 86_400_000
MAX_BURST = 1_000_000
MAX_CONCURRENCY = 1_000_000

# "<count>/<period>": a count, then a unit with an optional whole number before it ("5/10s").
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` job starts every ``period_ms``, and ``burst`` at once after a quiet spell.

    As the limits hash keeps it (``spec``): "<count> <period ms> <burst>", e.g. "100 1000 10" for 100/s.
    ValueError unless count is 1 to MAX_COUNT, period_ms 1 to MAX_PERIOD_MS (a week), burst 1 to
    MAX_BURST, each an int, and the rate at most MAX_RATE_PER_SECOND."""

    count: int
    period_ms: int
    burst: int

    def __post_init__(self) -> None:
        for name, value, most in (
            ("count", self.count, MAX_COUNT),
            ("period_ms", self.period_ms, MAX_PERIOD_MS),
            ("burst", self.burst, MAX_BURST),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise ValueError(f"a rate's {name} must be a whole number from 1 to {most:,}, got {value!r}")
        if self.per_second > MAX_RATE_PER_SECOND:
            raise ValueError(f"a rate of {self.per_second:,.0f}/s is more than {MAX_RATE_PER_SECOND:,}/s")

    @classmethod
    def parse(cls, text: str, burst: int | None = None) -> Rate:
        """A rate from text ``"<count>/<period>"``: ``100/s``, ``6000/min``, ``5/10s``, ``1/h``,
        ``20/500ms`` (units, any case: ms; s, sec, second; m, min, minute; h, hour; d, day; white space
        around the parts is ignored). ``burst`` defaults to a tenth of the count, rounded up, at least 1
        (``100/s``: 10). ValueError for other text, a count or period of 0, or a rate past the bounds."""
        match = _RATE.fullmatch(text.lower()) if isinstance(text, str) else None
        if match is None or match[3] not in UNITS_MS:
            raise ValueError(f"rate {text!r} is not <count>/<period>, e.g. 100/s, 6000/min, 5/10s")
        count, times, unit = int(match[1]), int(match[2] or 1), UNITS_MS[match[3]]
        if count == 0:
            raise ValueError(f"rate {text!r} lets no job start (to stop a queue, pause it)")
        if times == 0:
            raise ValueError(f"rate {text!r} has a period of 0")
        if burst is None:
            burst = max(1, math.ceil(count / 10))
        return cls(count, times * unit, burst)

    @property
    def per_second(self) -> float:
        """Starts a second this rate allows in the long run (count / period)."""
        return self.count * 1000 / self.period_ms

    def spec(self) -> str:
        """As the limits hash keeps it (lua/includes/limits.lua reads it): "<count> <period ms> <burst>"."""
        return f"{self.count} {self.period_ms} {self.burst}"

    @classmethod
    def given(cls, rate: Rate | str | None, burst: int | None = None) -> Rate | None:
        """What a ``rate`` argument of the library means: None (no limit) stays None, a ``Rate`` is kept,
        text goes to ``parse`` (burst: a tenth of the count by default); ``burst``, when given, is the
        rate's burst either way. ValueError as ``parse`` and the constructor raise it."""
        if rate is None:
            return None
        if isinstance(rate, str):
            return cls.parse(rate, burst)
        return rate if burst is None else cls(rate.count, rate.period_ms, burst)

    @classmethod
    def from_spec(cls, spec: str) -> Rate:
        """The rate a ``spec`` text ("<count> <period ms> <burst>") stands for. ValueError when it is not
        three whole numbers within the bounds."""
        count, period_ms, burst = (int(part) for part in spec.split())
        return cls(count, period_ms, burst)

    def split(self, parts: int) -> Rate:
        """This rate shared by ``parts`` shards, one shard's share: each gets count / parts (the same count
        over its period times parts) and the burst divided likewise (rounded up, at least 1); itself for 1
        part. ValueError when the longer period passes MAX_PERIOD_MS."""
        if parts == 1:
            return self
        return Rate(self.count, self.period_ms * parts, max(1, math.ceil(self.burst / parts)))

    def __str__(self) -> str:
        """For people: "100/s (burst 10)", in the largest unit the period is exactly, else in ms."""
        for unit in ("day", "h", "min", "s"):
            if self.period_ms == UNITS_MS[unit]:
                return f"{self.count}/{unit} (burst {self.burst})"
        return f"{self.count}/{self.period_ms}ms (burst {self.burst})"


def parse_concurrency(value: int | str) -> int:
    """A group's concurrency: at most this many of its jobs in progress at once. Takes an int or its
    digits as text (white space around them ignored); returns the int. ValueError unless it is a whole
    number from 1 to MAX_CONCURRENCY (1,000,000); a bool is not one."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if number is None or not 1 <= number <= MAX_CONCURRENCY:
        raise ValueError(f"a group's concurrency must be a whole number from 1 to {MAX_CONCURRENCY:,}, got {value!r}")
    return number


@dataclass(frozen=True)
class GroupLimits:
    """The limits of a job group: ``concurrency`` of its jobs in progress at once, ``rate`` of starts
    (None: no limit). Not checked here: ``parse_concurrency`` and ``Rate`` check what a user gives."""

    concurrency: int | None = None
    rate: Rate | None = None

    def spec(self) -> str:
        """As the group_limits hash keeps it: "<concurrency>|<rate spec>", either part empty for None."""
        return f"{self.concurrency or ''}|{self.rate.spec() if self.rate else ''}"

    @classmethod
    def from_spec(cls, spec: str) -> GroupLimits:
        """The limits a ``spec`` text stands for. ValueError when a part is malformed."""
        concurrency, _, rate = spec.partition("|")
        return cls(int(concurrency) if concurrency else None, Rate.from_spec(rate) if rate else None)

    def as_dict(self) -> dict[str, object]:
        """For JSON (``setqueue limit --json``): concurrency as a number, the rate as ``str(rate)``, None
        for no limit."""
        return {"concurrency": self.concurrency, "rate": None if self.rate is None else str(self.rate)}


@dataclass(frozen=True)
class Limits:
    """Everything limits holds for one queue (``limits()``)."""

    paused: bool = False  # no job starts while paused
    rate: Rate | None = None  # the whole queue's starts, across all its workers (None: no limit)
    group_default: GroupLimits = GroupLimits()  # every group's limits unless it has its own
    groups: Mapping[str, GroupLimits] = field(default_factory=dict)  # group -> its own (replacing the default)

    def as_dict(self) -> dict[str, object]:
        """For JSON (``setqueue limit --json``): the same fields, rates as text, groups sorted by name."""
        return {
            "paused": self.paused,
            "rate": None if self.rate is None else str(self.rate),
            "group_default": self.group_default.as_dict(),
            "groups": {name: limits.as_dict() for name, limits in sorted(self.groups.items())},
        }


# Limits' figures in ``stats()``: paused (a sharded queue: shards paused), waiting jobs that have a
# group, groups with jobs waiting (of which resting and full), groups with jobs in progress.
LIMIT_STATS = ("paused", "grouped_waiting", "groups_waiting", "groups_resting", "groups_full", "groups_running")

# Where a group stands, the liveliest first (see lua/list_groups.lua).
GROUP_STATES = ("ready", "resting", "full", "idle")


@dataclass(frozen=True)
class GroupInfo:
    """A job group as ``groups()`` lists it: its jobs waiting and in progress, where it stands in the line of
    groups, and its limits in force."""

    name: str
    waiting: int  # its jobs waiting in its line
    running: int  # its jobs in progress
    # One of GROUP_STATES: ready (takes its turn), resting (its rate is used up), full (its concurrency is
    # in progress), idle (nothing waiting, jobs still running).
    state: str
    limits: GroupLimits  # its own, else the default
