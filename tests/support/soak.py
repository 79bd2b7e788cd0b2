"""The soak run (``scripts/soak --minutes N``): the three services at a steady rate for a long time,
with the retention on, to show that nothing in Redis or in the processes grows without bound.

The verdict is each series' least-squares slope after the warm-up (``markdown`` says how it is judged).
Plain Python: ``tests/test_soak.py`` runs a short one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.support.procs import Proc
from tests.support.redis_server import REPO_ROOT, RedisServer

QUEUE = "soak"
VARIABLE = ("req:", "lock:", "audit:run:")  # one key per request, per claim, per recorded run
FLAT_SHARE = 0.10  # a series is flat when it grows by less than this share of its mean ...
FLAT_FLOOR = 25.0  # ... or by fewer than this many members (a family that holds a handful)
OUT = REPO_ROOT / "out" / "soak"
SUMMARY = REPO_ROOT / "docs" / "soak.md"
PLOT = REPO_ROOT / "docs" / "soak.png"


@dataclass(frozen=True)
class Plan:
    minutes: float = 60.0
    rate: float = 50.0  # jobs per second the creator makes
    workers: int = 2
    concurrency: int = 4
    work_seconds: float = 0.02
    fail_rate: float = 0.05  # of runs; retried after a backoff (scheduled), dead after MAX_ATTEMPTS
    max_attempts: int = 10
    retention: float = 300.0  # DONE_MAX_AGE_SECONDS
    request_ttl: float = 120.0  # REQUEST_TTL_SECONDS
    lease: float = 10.0
    interval: float = 10.0  # seconds between samples
    schedules: str = "tick=* * * * *"

    @property
    def warmup(self) -> float:
        """Until every expiring or trimmed key has come round (retention and a sweep, request TTL,
        a lease, the backoff's cap, a minute's periodic run); at most half the run."""
        settle = max(self.retention + 10, self.request_ttl, self.lease * 3, 60) * 1.2
        return min(settle, self.minutes * 60 / 2)


@dataclass
class Sample:
    at: float  # seconds since the start
    used_memory: int
    redis_rss: int
    keys: int
    families: dict[str, int]  # family -> size (members; 1 per string key)
    family_keys: dict[str, int]  # family -> keys
    rss: dict[str, int]  # process name -> RSS bytes
    completed: float  # jobs the workers completed (successes and failures)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Trend:
    name: str
    mean: float
    first: float
    last: float
    slope_per_hour: float
    growth: float  # slope * measured window
    flat: bool

    @property
    def growth_share(self) -> float:
        return self.growth / self.mean if self.mean else 0.0


def code_version() -> str:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        except OSError:
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    if commit is None:
        return "unknown"
    return commit + (" +changes" if git("status", "--porcelain", "--untracked-files=no") else "")


@dataclass
class Verdict:
    plan: Plan
    started_at: str
    seconds: float
    samples: int
    measured_from: float
    families: list[Trend] = field(default_factory=list)
    memory: Trend | None = None
    redis_rss: Trend | None = None
    processes: list[Trend] = field(default_factory=list)
    throughput: float = 0.0  # jobs a second completed after the warm-up
    code: str = "unknown"

    @property
    def ok(self) -> bool:
        return all(trend.flat for trend in self.families)

    @property
    def growing(self) -> list[str]:
        return [trend.name for trend in self.families if not trend.flat]


def family_of(key: str, prefix: str) -> str:
    if not key.startswith(prefix):
        return "(not the queue's)"
    rest = key[len(prefix) :]
    for variable in VARIABLE:
        if rest.startswith(variable):
            return variable + "*"
    return rest


def key_families(client: redis.Redis, queue: str = QUEUE) -> tuple[dict[str, int], dict[str, int], int]:
    """(family -> size, family -> keys, keys in the database)."""
    prefix = f"setqueue:{{{queue}}}:"
    sizes: dict[str, int] = {}
    keys: dict[str, int] = {}
    fixed: list[str] = []
    for raw in client.scan_iter(match=f"setqueue:{{{queue}}}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        family = family_of(key, prefix)
        keys[family] = keys.get(family, 0) + 1
        if family.endswith("*"):
            sizes[family] = sizes.get(family, 0) + 1
        else:
            fixed.append(key)
    pipe = client.pipeline(transaction=False)
    for key in fixed:
        pipe.type(key)
    types = [t.decode() if isinstance(t, bytes) else str(t) for t in pipe.execute()]
    size_of = {"zset": "zcard", "set": "scard", "hash": "hlen", "list": "llen"}
    pipe = client.pipeline(transaction=False)
    for key, kind in zip(fixed, types, strict=True):
        if kind in size_of:
            getattr(pipe, size_of[kind])(key)
        else:
            pipe.exists(key)  # a string: counts 1 (0 if it expired in between)
    for key, size in zip(fixed, pipe.execute(), strict=True):
        family = family_of(key, prefix)
        sizes[family] = sizes.get(family, 0) + int(size)
    return sizes, keys, int(client.dbsize())


def rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def trend(name: str, points: Sequence[tuple[float, float]], floor: float = FLAT_FLOOR) -> Trend:
    """Least squares through (seconds, value): flat when it grows by < FLAT_SHARE of the mean, or < floor."""
    n = len(points)
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mean_x = sum(xs) / n
    mean_y = sum(ys) / n
    var = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / var if var else 0.0
    span = xs[-1] - xs[0]
    growth = slope * span
    flat = growth <= max(FLAT_SHARE * abs(mean_y), floor)
    return Trend(name, mean_y, ys[0], ys[-1], slope * 3600, growth, flat)


def judge(plan: Plan, samples: Sequence[Sample], started_at: str) -> Verdict:
    after = [s for s in samples if s.at >= plan.warmup]
    if len(after) < 3:
        raise RuntimeError(f"only {len(after)} samples after the warm-up of {plan.warmup:.0f}s: run longer")
    verdict = Verdict(plan, started_at, samples[-1].at, len(samples), plan.warmup, code=code_version())
    families = sorted({name for s in after for name in s.families})
    for name in families:
        verdict.families.append(trend(name, [(s.at, s.families.get(name, 0)) for s in after]))
    verdict.memory = trend("used_memory", [(s.at, s.used_memory) for s in after], floor=256 * 1024)
    verdict.redis_rss = trend("redis-server RSS", [(s.at, s.redis_rss) for s in after], floor=1024 * 1024)
    for name in sorted({p for s in after for p in s.rss}):
        verdict.processes.append(trend(name, [(s.at, s.rss.get(name, 0)) for s in after], floor=1024 * 1024))
    span = after[-1].at - after[0].at
    verdict.throughput = (after[-1].completed - after[0].completed) / span if span else 0.0
    return verdict


class Soak:
    def __init__(self, plan: Plan, out: Path) -> None:
        self.plan = plan
        self.out = out
        self.server: RedisServer | None = None
        self.procs: list[Proc] = []
        self.samples: list[Sample] = []

    def start(self) -> None:
        p = self.plan
        self.out.mkdir(parents=True, exist_ok=True)
        self.server = RedisServer(args=["--maxmemory-policy", "noeviction"]).start()
        common: dict[str, Any] = {
            "REDIS_URL": self.server.url,
            "QUEUE_NAME": QUEUE,
            "LEASE_SECONDS": p.lease,
            "MAX_ATTEMPTS": p.max_attempts,
            "DONE_MAX_AGE_SECONDS": p.retention,
            "REQUEST_TTL_SECONDS": p.request_ttl,
            "METRICS_HOST": "127.0.0.1",
            "LOG_LEVEL": "WARNING",
        }
        self.procs.append(Proc.start("cleaner", self.out, SWEEP_INTERVAL=2, SCHEDULES=p.schedules, **common))
        work = {"CONCURRENCY": p.concurrency, "WORK_SECONDS": p.work_seconds, "FAIL_RATE": p.fail_rate, **common}
        for n in range(p.workers):
            backoff = {"RETRY_BACKOFF_SECONDS": 1, "RETRY_BACKOFF_MAX_SECONDS": 30}
            self.procs.append(
                Proc.start("worker", self.out, name=f"worker-{n + 1}", WORK_JITTER=0.5, **backoff, **work)
            )
        self.procs.append(Proc.start("creator", self.out, CREATE_RATE=p.rate, CREATE_ID_PREFIX="soak", **common))
        for proc in self.procs:
            proc.wait_ready(30)

    def sample(self, at: float) -> Sample:
        assert self.server is not None
        with redis.Redis(port=self.server.port, socket_timeout=30) as client:
            memory = client.info("memory")
            families, family_keys, keys = key_families(client)
        rss = {proc.name: rss_of(proc.process.pid) for proc in self.procs}
        redis_rss = rss_of(self.server.process.pid if self.server.process is not None else 0)
        completed = sum(_completed(proc) for proc in self.procs if proc.module == "worker")
        return Sample(round(at, 3), int(memory["used_memory"]), redis_rss, keys, families, family_keys, rss, completed)

    def run(self) -> list[Sample]:
        p = self.plan
        started = time.monotonic()
        ends = started + p.minutes * 60
        path = self.out / "samples.jsonl"
        with path.open("w") as file:
            while True:
                now = time.monotonic()
                sample = self.sample(now - started)
                self.samples.append(sample)
                file.write(json.dumps(sample.as_dict()) + "\n")
                file.flush()
                dead = [proc.name for proc in self.procs if not proc.alive()]
                if dead:
                    raise RuntimeError(f"{', '.join(dead)} exited during the soak: see {self.out}")
                if now >= ends:
                    return self.samples
                time.sleep(max(0.0, min(p.interval, ends - time.monotonic())))

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()
        if self.server is not None:
            self.server.cleanup()


def _completed(proc: Proc) -> float:
    try:
        metrics = proc.metrics()
    except (OSError, AssertionError):
        return 0.0
    return sum(v for k, v in metrics.items() if k.startswith("setqueue_jobs_completed_total{") and "queue=" not in k)


def run(plan: Plan, out: Path | None = None) -> Verdict:
    started_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    out = out or OUT / started_at
    soak = Soak(plan, out)
    try:
        soak.start()
        samples = soak.run()
    finally:
        soak.stop()
    verdict = judge(plan, samples, started_at)
    (out / "verdict.json").write_text(json.dumps(_verdict_dict(verdict), indent=2) + "\n")
    (out / "summary.md").write_text(markdown(verdict))
    return verdict


def _verdict_dict(verdict: Verdict) -> dict[str, Any]:
    data = dataclasses.asdict(verdict)
    data["ok"] = verdict.ok
    data["growing"] = verdict.growing
    return data


def _mib(value: float) -> str:
    return f"{value / 1024 / 1024:.1f} MiB"


def _signed(value: float, unit: str = "") -> str:
    return f"{value:+,.1f}{unit}" if abs(value) < 100 else f"{value:+,.0f}{unit}"


def markdown(verdict: Verdict, plot: str | None = None) -> str:
    p = verdict.plan
    lines = [
        "# Soak run",
        "",
        f"The services at a steady rate for {verdict.seconds / 60:.0f} minutes with the retention on: does anything",
        "in Redis or in the processes grow without bound? Run it with `scripts/soak --minutes N`",
        "(`tests/support/soak.py`); a 90-second one is a test (`tests/test_soak.py`).",
        "",
        f"**Verdict: {'every key family is flat' if verdict.ok else 'growing: ' + ', '.join(verdict.growing)}.**",
        f"Run {verdict.started_at} (code {verdict.code}): {verdict.samples} samples, one every {p.interval:g} s; "
        f"slopes from {verdict.measured_from / 60:.1f} min on (the warm-up: retention, request TTL and a lease "
        "have come round).",
        "",
        "## The run",
        "",
        f"One redis-server 7 (`noeviction`), one creator at {p.rate:g} jobs/s, {p.workers} workers "
        f"(`CONCURRENCY={p.concurrency}`, the demo handler: {p.work_seconds * 1000:g} ms ± 50 %, "
        f"{p.fail_rate:.0%} of runs fail and are retried after a backoff of 1 to 30 s, "
        f"`MAX_ATTEMPTS={p.max_attempts}`), one cleaner (`SWEEP_INTERVAL=2`, "
        f"`DONE_MAX_AGE_SECONDS={p.retention:g}`, a periodic job every minute), "
        f"`REQUEST_TTL_SECONDS={p.request_ttl:g}`, `LEASE_SECONDS={p.lease:g}`. "
        f"Throughput after the warm-up: {verdict.throughput:.1f} jobs/s.",
        "",
        "A family's size is the members of its collections (a string key counts 1); growth is the",
        "least-squares slope times the measured window, and a family is flat when that is under",
        f"{FLAT_SHARE:.0%} of its mean or under {FLAT_FLOOR:g} members.",
        "",
        "## Key families",
        "",
        "| family | mean size | first → last | slope per hour | growth over the window | verdict |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for t in verdict.families:
        lines.append(
            f"| `{t.name}` | {t.mean:,.0f} | {t.first:,.0f} → {t.last:,.0f} | {_signed(t.slope_per_hour)} | "
            f"{_signed(t.growth)} ({t.growth_share:+.1%}) | {'flat' if t.flat else '**grows**'} |"
        )
    lines += [
        "",
        "## Memory",
        "",
        "| series | mean | first → last | slope per hour | verdict |",
        "|---|---:|---:|---:|---|",
    ]
    for t in [t for t in (verdict.memory, verdict.redis_rss) if t is not None] + verdict.processes:
        lines.append(
            f"| {t.name} | {_mib(t.mean)} | {_mib(t.first)} → {_mib(t.last)} | "
            f"{_signed(t.slope_per_hour / 1024, ' KiB')} | {'flat' if t.flat else '**grows**'} |"
        )
    if plot:
        lines += ["", f"![used memory, key families and RSS over the run]({plot})"]
    lines += [
        "",
        "## What is not in this run",
        "",
        "- `failed` keeps dead letters until they are requeued or deleted (by design: there is no",
        "  retention of failed); here a job is dead-lettered only after 10 failed runs in a row.",
        "- `AUDIT=true` (chaos runs) keeps one field per job id in `audit:successes`: it grows with",
        "  every job, which is why it is for bounded runs.",
        "",
    ]
    return "\n".join(lines)


def draw(samples: Sequence[Sample], verdict: Verdict, path: Path) -> bool:
    try:
        import matplotlib  # noqa: PLC0415 - optional: the summary has a table without it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    minutes = [s.at / 60 for s in samples]
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.4), sharex=True)
    top.plot(minutes, [s.used_memory / 2**20 for s in samples], label="Redis used_memory", linewidth=2)
    top.plot(minutes, [s.redis_rss / 2**20 for s in samples], label="redis-server RSS")
    for name in sorted({n for s in samples for n in s.rss}):
        top.plot(minutes, [s.rss.get(name, 0) / 2**20 for s in samples], label=f"{name} RSS", linewidth=1)
    top.set_ylabel("MiB")
    top.set_ylim(bottom=0)
    top.legend(fontsize=7, ncol=3, loc="lower right")
    top.set_title("Soak run: memory and key families (dashed line: end of the warm-up)")
    biggest = sorted(verdict.families, key=lambda t: -t.mean)[:8]
    for t in biggest:
        bottom.plot(minutes, [s.families.get(t.name, 0) for s in samples], label=t.name)
    bottom.set_yscale("symlog")
    bottom.set_ylabel("size (members)")
    bottom.set_xlabel("minutes")
    bottom.legend(fontsize=7, ncol=4, loc="lower right")
    for axis in (top, bottom):
        axis.axvline(verdict.measured_from / 60, color="grey", linestyle="--", linewidth=1)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    small_png(path)
    return True


_COLOURS = ["1f77b4", "ff7f0e", "2ca02c", "d62728", "9467bd", "8c564b", "e377c2", "7f7f7f", "000000"]


def small_png(path: Path) -> None:
    """Rewrite the PNG with a palette (each line colour of the figure, two lighter shades of it for the
    antialiased edges, and white): a fifth of the bytes, the same to the eye."""
    from PIL import Image  # noqa: PLC0415 - matplotlib's own dependency

    shades = []
    for colour in _COLOURS:
        rgb = [int(colour[i : i + 2], 16) for i in (0, 2, 4)]
        for strength in (1.0, 0.6, 0.3):
            shades += [round(c * strength + 255 * (1 - strength)) for c in rgb]
    palette = Image.new("P", (1, 1))
    palette.putpalette([*shades, 255, 255, 255])
    image = Image.open(path).convert("RGB").quantize(palette=palette, dither=Image.Dither.NONE)
    image.save(path, optimize=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__.split("\n\n")[0])
    defaults = Plan()
    parser.add_argument("--minutes", type=float, default=defaults.minutes)
    parser.add_argument("--rate", type=float, default=defaults.rate, help="jobs a second")
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--retention", type=float, default=defaults.retention, help="DONE_MAX_AGE_SECONDS")
    parser.add_argument("--request-ttl", type=float, default=defaults.request_ttl, help="REQUEST_TTL_SECONDS")
    parser.add_argument("--interval", type=float, default=defaults.interval, help="seconds between samples")
    parser.add_argument("--summary", action="store_true", help="write docs/soak.md and docs/soak.png")
    args = parser.parse_args(argv)
    given = ("minutes", "rate", "workers", "retention", "request_ttl", "interval")
    plan = dataclasses.replace(defaults, **{name: getattr(args, name) for name in given})
    print(f"soak: {plan.minutes:g} minutes, slopes after {plan.warmup:.0f}s; raw data in {OUT}", file=sys.stderr)
    verdict = run(plan)
    out = OUT / verdict.started_at
    print(markdown(verdict))
    if args.summary:
        samples = [Sample(**json.loads(line)) for line in (out / "samples.jsonl").read_text().splitlines()]
        plotted = draw(samples, verdict, PLOT)
        SUMMARY.write_text(markdown(verdict, PLOT.name if plotted else None))
        print(f"soak: wrote {SUMMARY.relative_to(REPO_ROOT)}" + (" and the plot" if plotted else ""), file=sys.stderr)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
