"""The soak run, short: 90 s at a steady rate, every key family flat after the warm-up (``scripts/soak``
runs the long one, docs/soak.md); and the verdict catches a family that grows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.soak import Plan, Sample, judge, markdown, run

SHORT = Plan(minutes=1.5, rate=40, workers=1, retention=10, request_ttl=15, lease=5, interval=2)


def _sample(at: float, **families: int) -> Sample:
    return Sample(at, 1_000_000, 10_000_000, sum(families.values()), families, {}, {"worker": 30_000_000}, at * 10)


def test_the_verdict_catches_a_family_that_grows_and_passes_one_that_holds() -> None:
    plan = Plan(minutes=2, interval=5, retention=10, request_ttl=10, lease=5)
    # "req:*" holds around 500 with noise; "audit:successes" grows by 10 a second (one per job).
    samples = [_sample(t, **{"req:*": 500 + (t % 3) * 10, "audit:successes": 10 * t}) for t in range(0, 121, 5)]
    verdict = judge(plan, samples, "now")
    assert verdict.growing == ["audit:successes"] and not verdict.ok
    assert "**grows**" in markdown(verdict)


@pytest.mark.slow
def test_a_short_soak_keeps_every_key_family_flat(tmp_path: Path) -> None:
    verdict = run(SHORT, tmp_path / "soak")
    assert verdict.throughput > 0
    families = {trend.name: trend for trend in verdict.families}
    # What must be there: the states, their bookkeeping, request records, the periodic job.
    assert {"done", "done_log", "finished", "req:*", "schedules", "periodic", "seq", "swept"} <= set(families)
    assert verdict.ok, markdown(verdict)
    assert (tmp_path / "soak" / "samples.jsonl").is_file() and (tmp_path / "soak" / "summary.md").is_file()
