"""Flow control's values (rates, group and queue limits) and how Redis keeps them (docs/guide.md#flow-control).

A rate is GCRA: at most ``burst`` starts at once, and over T seconds at most ``burst + T * count / period``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

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
# Bounds that refuse a typo, not a need: far above one Redis's ~100,000 starts/s; a period <= a week.
MAX_RATE_PER_SECOND = 1_000_000
MAX_COUNT = 1_000_000_000
MAX_PERIOD_MS = 7 * 86_400_000
MAX_BURST = 1_000_000
MAX_CONCURRENCY = 1_000_000

_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` job starts every ``period_ms``, and ``burst`` at once after a quiet spell."""

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
        """``100/s``, ``6000/min``, ``5/10s``, ``1/h``, ``20/500ms`` (ms, s, min, h, day, or long names);
        ``burst`` defaults to a tenth of the count, at least 1."""
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
        return self.count * 1000 / self.period_ms

    def spec(self) -> str:
        """As the flow hash keeps it: "<count> <period ms> <burst>"."""
        return f"{self.count} {self.period_ms} {self.burst}"

    @classmethod
    def given(cls, rate: Rate | str | None, burst: int | None = None) -> Rate | None:
        """A library ``rate`` argument: None, a ``Rate`` or text; ``burst``, if given, overrides."""
        if rate is None:
            return None
        if isinstance(rate, str):
            return cls.parse(rate, burst)
        return rate if burst is None else cls(rate.count, rate.period_ms, burst)

    @classmethod
    def from_spec(cls, spec: str) -> Rate:
        count, period_ms, burst = (int(part) for part in spec.split())
        return cls(count, period_ms, burst)

    def split(self, parts: int) -> Rate:
        """One of ``parts`` shards' share: period times parts, burst divided (rounded up)."""
        if parts == 1:
            return self
        return Rate(self.count, self.period_ms * parts, max(1, math.ceil(self.burst / parts)))

    def __str__(self) -> str:
        for unit in ("day", "h", "min", "s"):
            if self.period_ms == UNITS_MS[unit]:
                return f"{self.count}/{unit} (burst {self.burst})"
        return f"{self.count}/{self.period_ms}ms (burst {self.burst})"


def parse_concurrency(value: int | str) -> int:
    """1 to 1,000,000 jobs of a group in progress at once."""
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
    """A job group's ``concurrency`` and ``rate`` of starts (None: no limit)."""

    concurrency: int | None = None
    rate: Rate | None = None

    def spec(self) -> str:
        """As group_limits keeps it: "<concurrency>|<rate spec>", either part empty."""
        return f"{self.concurrency or ''}|{self.rate.spec() if self.rate else ''}"

    @classmethod
    def from_spec(cls, spec: str) -> GroupLimits:
        concurrency, _, rate = spec.partition("|")
        return cls(int(concurrency) if concurrency else None, Rate.from_spec(rate) if rate else None)

    def as_dict(self) -> dict[str, object]:
        return {"concurrency": self.concurrency, "rate": None if self.rate is None else str(self.rate)}


@dataclass(frozen=True)
class Limits:
    """Everything flow control holds for one queue."""

    paused: bool = False
    rate: Rate | None = None
    group_default: GroupLimits = GroupLimits()
    groups: Mapping[str, GroupLimits] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "paused": self.paused,
            "rate": None if self.rate is None else str(self.rate),
            "group_default": self.group_default.as_dict(),
            "groups": {name: limits.as_dict() for name, limits in sorted(self.groups.items())},
        }


# Flow control's figures in ``stats()``.
FLOW_STATS = ("paused", "grouped_waiting", "groups_waiting", "groups_resting", "groups_full", "groups_running")

# Where a group stands, the liveliest first.
GROUP_STATES = ("ready", "resting", "full", "idle")


@dataclass(frozen=True)
class GroupInfo:
    """A group as ``groups()`` lists it: jobs waiting and running, its state (``ready``: takes turns;
    ``full``: concurrency reached; ``resting``: rate used up; ``idle``: nothing waiting), its limits."""

    name: str
    waiting: int
    running: int
    state: str
    limits: GroupLimits
