"""Periodic jobs (SCHEDULES): each run created once however many cleaners run, and `setqueue schedules`.
The periodic step takes ``now``, so slots a minute apart are stepped through without waiting."""

from __future__ import annotations

import calendar
import io
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from prometheus_client import CollectorRegistry

from cleaner.service import CleanerService
from setqueue import Queue
from setqueue.runtime.cli import main
from setqueue.runtime.metrics import CleanerMetrics
from setqueue.runtime.periodic import Schedule, iso, latest_slot, next_slot, parse_schedules, redis_now
from setqueue.runtime.settings import CleanerSettings, SettingError
from tests.support import queue_members
from tests.support.procs import Proc, base_env
from tests.support.waits import wait_until

RUNS = "setqueue_periodic_runs_total"


def utc(text: str) -> float:
    """``2026-11-23T16:00:30`` (UTC) as Unix seconds."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


# -- the slot rule, pure


@pytest.mark.parametrize(
    ("expr", "now", "latest", "following"),
    [
        ("* * * * *", "2026-11-23T16:00:30", "2026-11-23T16:00:00Z", "2026-11-23T16:01:00Z"),
        ("* * * * *", "2026-11-23T16:00:00", "2026-11-23T16:00:00Z", "2026-11-23T16:01:00Z"),  # on the slot
        ("*/5 * * * *", "2026-11-23T16:04:59", "2026-11-23T16:00:00Z", "2026-11-23T16:05:00Z"),
        ("*/5 * * * *", "2026-11-23T16:05:00", "2026-11-23T16:05:00Z", "2026-11-23T16:10:00Z"),
        ("0 * * * *", "2026-11-23T16:59:59", "2026-11-23T16:00:00Z", "2026-11-23T17:00:00Z"),
        ("30 9 * * 1-5", "2026-11-23T08:00:00", "2026-11-20T09:30:00Z", "2026-11-23T09:30:00Z"),  # Mon: Fri's
        ("@daily", "2026-11-23T16:00:00", "2026-11-23T00:00:00Z", "2026-11-24T00:00:00Z"),
        ("0 0 1 1 *", "2026-11-23T16:00:00", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"),
    ],
)
def test_latest_slot_at_or_before_now_and_the_next_after(expr: str, now: str, latest: str, following: str) -> None:
    assert iso(latest_slot(expr, utc(now))) == latest
    assert iso(next_slot(expr, utc(now))) == following
    assert iso(latest_slot(expr, utc(now) + 0.999)) == latest  # fractions of a second change nothing


def test_run_ids_and_payloads() -> None:
    schedule = Schedule("report", "0 * * * *")
    slot = schedule.latest_slot(utc("2026-11-23T16:20:00"))
    assert schedule.run_id(slot) == "report@2026-11-23T16:00:00Z"
    assert json.loads(schedule.payload(slot)) == {"schedule": "report", "slot": "2026-11-23T16:00:00Z"}


def test_the_setting_inline_or_in_a_file(tmp_path: Path) -> None:
    expected = (Schedule("report", "0 * * * *"), Schedule("tick", "*/5 * * * *"), Schedule("nightly", "@daily"))
    assert parse_schedules("report=0 * * * *; tick = */5  *  * * * ;nightly=@DAILY;") == expected
    assert parse_schedules("") == ()
    file = tmp_path / "schedules"
    file.write_text("# periodic jobs\nreport = 0 * * * *\n\ntick=*/5 * * * *\nnightly=@daily\n")
    assert parse_schedules(f"@{file}") == expected
    settings = CleanerSettings.from_env({"SCHEDULES": f"@{file}"})
    assert parse_schedules(settings.schedules) == expected


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("report=61 * * * *", "not a valid cron expression"),
        ("report=*/0 * * * *", "not a valid cron expression"),
        ("report=0 0 30 2 *", "matches no date"),
        ("report=* * * * * *", "has 6 fields"),
        ("report=@reboot", "not one of"),
        ("report=", "has 0 fields"),
        ("report 0 * * * *", "is not name=cron expression"),
        ("a@b=* * * * *", "schedule name 'a@b'"),
        ("my report=* * * * *", "schedule name 'my report'"),
        ("x=* * * * *;x=0 * * * *", "declared twice"),
        ("@/no/such/schedules", "cannot read the schedules file"),
    ],
)
def test_a_bad_schedule_is_a_setting_error_naming_it(raw: str, problem: str) -> None:
    with pytest.raises(SettingError, match=r"^invalid setting SCHEDULES: ") as caught:
        CleanerSettings.from_env({"SCHEDULES": raw})
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_the_metric_has_a_label_for_every_schedule_from_the_start() -> None:
    metrics = CleanerMetrics(CollectorRegistry(), ["report", "tick"])
    for name in ("report", "tick"):
        assert metrics.registry.get_sample_value(RUNS, {"schedule": name}) == 0


# -- cleaners against real Redis

Cleaners = Callable[..., list[CleanerService]]


@pytest.fixture
def cleaners(redis_url: str, queue_name: str) -> Iterator[Cleaners]:
    made: list[CleanerService] = []

    def make(n: int, schedules: str) -> list[CleanerService]:
        env = base_env(REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0, SCHEDULES=schedules)
        batch = [CleanerService(CleanerSettings.from_env(env)) for _ in range(n)]  # each its own client
        made.extend(batch)
        return batch

    yield make
    for service in made:
        service.close()


def all_at_once(services: list[CleanerService], now: float) -> list[str]:
    barrier = threading.Barrier(len(services))  # every cleaner's periodic step at the same moment

    def one(service: CleanerService) -> list[str]:
        barrier.wait(10)
        return service.create_periodic_runs(now)

    with ThreadPoolExecutor(len(services)) as pool:
        return [run_id for ids in pool.map(one, services) for run_id in ids]


def runs_by(service: CleanerService, schedule: str) -> float:
    value = service.metrics.registry.get_sample_value(RUNS, {"schedule": schedule})
    assert value is not None
    return value


def queued(queue: Queue) -> list[str]:
    return sorted(queue_members(queue.redis, queue.keys)["todos"])


def test_three_cleaners_at_the_same_moment_create_each_run_exactly_once(cleaners: Cleaners, queue: Queue) -> None:
    three = cleaners(3, "tick=* * * * *;five=*/5 * * * *")
    start = utc("2026-11-23T16:00:30")
    # First sight records the slot; a new schedule starts with its next slot.
    assert all_at_once(three, start) == []
    assert queued(queue) == []
    created: list[str] = []
    for minute in range(1, 8):
        for offset in (0, 0, 17):  # twice at the same moment, then later in the same slot
            created += all_at_once(three, start + 60 * minute + offset)
    expected = [f"tick@2026-11-23T16:{m:02d}:00Z" for m in range(1, 8)] + ["five@2026-11-23T16:05:00Z"]
    assert sorted(created) == sorted(expected)  # no id created twice, by any cleaner
    assert queued(queue) == sorted(expected)
    assert sum(runs_by(c, "tick") for c in three) == 7
    assert sum(runs_by(c, "five") for c in three) == 1
    assert queue.inspect("five@2026-11-23T16:05:00Z").payload == '{"schedule":"five","slot":"2026-11-23T16:05:00Z"}'  # type: ignore[union-attr]
    assert queue.stats()["todos"] == 8


def test_after_a_pause_longer_than_three_slots_one_catch_up_run(cleaners: Cleaners, queue: Queue) -> None:
    three = cleaners(3, "tick=* * * * *")
    assert all_at_once(three, utc("2026-11-23T16:00:30")) == []
    assert all_at_once(three, utc("2026-11-23T16:01:30")) == ["tick@2026-11-23T16:01:00Z"]
    # Down from 16:01:30 to 16:06:10: five slots missed, one run for the latest.
    assert all_at_once(three, utc("2026-11-23T16:06:10")) == ["tick@2026-11-23T16:06:00Z"]
    assert all_at_once(three, utc("2026-11-23T16:06:50")) == []
    assert queued(queue) == ["tick@2026-11-23T16:01:00Z", "tick@2026-11-23T16:06:00Z"]
    assert sum(runs_by(c, "tick") for c in three) == 2


def test_an_old_slot_is_never_created_again(cleaners: Cleaners, queue: Queue) -> None:
    """Not after its run was dropped from done by the retention, nor by a cleaner whose clock is behind."""
    (cleaner,) = cleaners(1, "tick=* * * * *")
    cleaner.create_periodic_runs(utc("2026-11-23T16:00:30"))
    assert cleaner.create_periodic_runs(utc("2026-11-23T16:01:30")) == ["tick@2026-11-23T16:01:00Z"]
    (lease,) = queue.claim(1)
    assert queue.ack(lease)
    assert queue.delete(lease.id) == "done"  # as the retention of done would: the id is forgotten
    assert cleaner.create_periodic_runs(utc("2026-11-23T16:01:40")) == []
    assert cleaner.create_periodic_runs(utc("2026-11-23T16:00:40")) == []  # a clock behind
    assert queue.inspect(lease.id) is None
    assert cleaner.create_periodic_runs(utc("2026-11-23T16:02:00")) == ["tick@2026-11-23T16:02:00Z"]


def test_a_run_the_queue_already_knows_is_not_added_again(cleaners: Cleaners, queue: Queue) -> None:
    (cleaner,) = cleaners(1, "tick=* * * * *")
    cleaner.create_periodic_runs(utc("2026-11-23T16:00:30"))
    queue.enqueue(["tick@2026-11-23T16:01:00Z"])  # pushed by hand
    (lease,) = queue.claim(1)
    assert cleaner.create_periodic_runs(utc("2026-11-23T16:01:30")) == []
    assert queue.inspect(lease.id).state == "in_progress"  # type: ignore[union-attr]
    assert runs_by(cleaner, "tick") == 0


def test_the_cleaner_uses_the_redis_clock(cleaners: Cleaners, queue: Queue) -> None:
    (cleaner,) = cleaners(1, "tick=* * * * *")
    assert cleaner.create_periodic_runs() == []  # first sight, at the Redis clock's now
    last_ms = int(queue.redis.hget(queue.keys.periodic, "tick"))  # type: ignore[arg-type]
    assert iso(last_ms / 1000) == iso(latest_slot("* * * * *", redis_now(queue.redis)))


SWEEPS = "setqueue_sweep_duration_seconds_count"  # one a round of the cleaner's loop


@pytest.mark.slow
def test_three_cleaner_processes_started_together_create_the_catch_up_run_once(
    redis_url: str, queue_name: str, queue: Queue, tmp_path: Path
) -> None:
    """On the real clock, a schedule last run ten minutes ago gets one catch-up run (a minute boundary
    during the test may add the next slot's, created once too)."""
    old = latest_slot("* * * * *", redis_now(queue.redis)) - 600
    queue.redis.hset(queue.keys.periodic, "tick", round(old * 1000))
    env = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "SCHEDULES": "tick=* * * * *", "SWEEP_INTERVAL": 0.1}
    procs = [Proc.start("cleaner", tmp_path, name=f"cleaner{i}", **env) for i in range(3)]
    try:
        for proc in procs:
            proc.wait_ready()
        wait_until(lambda: queued(queue), 20, "the catch-up run")
        rounds = [proc.metric(SWEEPS) for proc in procs]
        wait_until(
            lambda: all(proc.metric(SWEEPS) >= done + 10 for proc, done in zip(procs, rounds, strict=True)),
            30,
            "ten more rounds of each cleaner",
        )
        runs = queued(queue)
        assert all(run_id.startswith("tick@") for run_id in runs) and 1 <= len(runs) <= 2
        assert sum(p.metric(f'{RUNS}{{schedule="tick"}}') for p in procs) == len(queued(queue))
    finally:
        for proc in procs:
            proc.stop()


# -- setqueue schedules


Schedules = Callable[..., tuple[int, str]]


@pytest.fixture
def schedules(redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch) -> Schedules:
    """`setqueue schedules` on this test's queue, with no SCHEDULES of its own."""
    monkeypatch.delenv("SCHEDULES", raising=False)

    def run(*args: str) -> tuple[int, str]:
        out = io.StringIO()
        return main(["--redis-url", redis_url, "--queue", queue_name, "schedules", *args], out=out), out.getvalue()

    return run


def test_cli_lists_names_expressions_and_next_runs(schedules: Schedules, queue: Queue) -> None:
    """The schedules live in Redis: the CLI lists them without SCHEDULES of its own."""
    assert schedules("add", "report", "0 * * * *")[0] == 0
    assert schedules("add", "newyear", "0 0 1 1 *")[0] == 0
    queue.redis.hset(queue.keys.periodic, "report", round(utc("2026-11-23T16:00:00") * 1000))
    code, out = schedules()
    now = redis_now(queue.redis)
    assert code == 0
    header, newyear, report = (line.split() for line in out.splitlines())
    assert header == ["NAME", "CRON", "(UTC)", "LAST", "SLOT", "NEXT", "RUN"]
    # Its recorded slot is older than its latest: that one is due, the cleaners' next round creates it.
    assert report == ["report", "0", "*", "*", "*", "*", "2026-11-23T16:00:00Z", iso(latest_slot("0 * * * *", now))]
    assert newyear == ["newyear", "0", "0", "1", "1", "*", "-", iso(next_slot("0 0 1 1 *", now))]

    code, out = schedules("--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [(r["name"], r["cron"], r["last_slot"]) for r in rows] == [
        ("newyear", "0 0 1 1 *", None),
        ("report", "0 * * * *", "2026-11-23T16:00:00Z"),
    ]
    assert rows[0]["next_run"].endswith("-01-01T00:00:00Z")
    assert schedules("remove", "newyear") == (0, "removed newyear\n")
    assert [line.split()[0] for line in schedules()[1].splitlines()] == ["NAME", "report"]


def test_cli_without_schedules_and_with_a_bad_one(
    schedules: Schedules, queue_name: str, client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert schedules() == (0, f"no periodic jobs in queue {queue_name}\n")
    capsys.readouterr()
    for bad in (["add", "report", "0 25 * * *"], ["add", "bad name", "@daily"], ["remove", "nothing"]):
        assert schedules(*bad)[0] in (1, 2)
        err = capsys.readouterr().err
        assert err.startswith("setqueue: ") and err.count("\n") == 1, err
    assert client.keys(f"setqueue:{{{queue_name}}}:*") == []
