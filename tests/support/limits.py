"""Limits' bookkeeping, checked as stored (tests/test_limits.py, tests/test_property.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import redis

from setqueue import QueueKeys


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_groups(r: redis.Redis, k: QueueKeys) -> None:
    """A group with jobs waiting is in exactly one of groups_ready, _resting and _full, else in none;
    group_running counts each group's jobs in progress; grouped and group_lines agree, rank for rank."""
    lines: Counter[str] = Counter()
    in_lines = {}
    for member in r.zrange(k.group_lines, 0, -1):
        group, rank, job_id = _text(member).split("\0")
        lines[group] += 1
        in_lines[job_id] = int(rank, 16)
    ranked: list[Any] = r.zrange(k.grouped, 0, -1, withscores=True)  # type: ignore[assignment]
    assert in_lines == {_text(member): int(score) for member, score in ranked}
    ready = {_text(g) for g in r.zrange(k.groups_ready, 0, -1)} - {""}  # type: ignore[union-attr]
    resting = {_text(g) for g in r.zrange(k.groups_resting, 0, -1)}  # type: ignore[union-attr]
    full = {_text(g) for g in r.smembers(k.groups_full)}  # type: ignore[union-attr]
    assert not (ready & resting or ready & full or resting & full), (ready, resting, full)
    assert ready | resting | full == set(lines), (ready, resting, full, lines)
    running: Counter[str] = Counter()
    for running_id in r.zrange(k.in_progress, 0, -1):  # type: ignore[union-attr]
        of = r.hget(k.group_of, _text(running_id))
        if of is not None:
            running[_text(of)] += 1
    assert {_text(g): int(n) for g, n in r.hgetall(k.group_running).items()} == dict(running)  # type: ignore[union-attr]
