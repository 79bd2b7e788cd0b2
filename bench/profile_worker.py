"""Where a setqueue worker's time goes: py-spy samples one real `python -m worker` draining jobs.

    bench/.venv/bin/python bench/profile_worker.py [--jobs 100000] [--claim-batch 50] [--workers 1]
    bench/.venv/bin/python bench/profile_worker.py --io-seconds 0.01 --concurrency 100 [--async]

Starts its own redis-server, enqueues the jobs, starts the workers (same settings as bench/run),
records the first worker with `py-spy record --format raw` (needs ptrace: root or
CAP_SYS_PTRACE) while the jobs drain, then folds the stacks into buckets and prints a markdown
table (also written to --out, default bench/results/profile-raw.md). --idle includes samples
where the worker waits on a socket (wall-clock view); the default counts on-CPU samples only.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import Server, Workers, counter
from systems import SYSTEMS

# First matching rule wins; each is (bucket, substring of a frame "function (file)").
RULES = [
    ("handler: the job's one INCR (redis-py round trip)", "bench_common.py"),
    ("asyncio event loop (job tasks, their sleeps and socket I/O)", "asyncio/"),
    ("lease keeper thread (renewals)", "LeaseKeeper"),
    ("claim: claim.lua via redis-py (one call per batch), Lease objects", "Queue.claim ("),
    ("ack: ack.lua via redis-py (one call per batch), AckResult objects", "Queue.ack_many ("),
    ("idle: BLPOP on the wake list", "Queue.wait_for_work ("),
    ("metrics: prometheus_client counters and gauges, setqueue's batch histograms", "prometheus_client"),
    ("metrics: prometheus_client counters and gauges, setqueue's batch histograms", "setqueue/metrics.py"),
    ("metrics HTTP server thread", "http.server"),
    ("worker loop bookkeeping (worker/service.py, setqueue's service.py and lease.py)", "worker/service.py"),
    ("worker loop bookkeeping (worker/service.py, setqueue's service.py and lease.py)", "setqueue/"),
]


def bucket(stack: str) -> str:
    # A raw stack is "frame;frame;...;leaf". The first rule (in RULES order) that matches any
    # frame decides: the handler's INCR and the queue calls win over the loop that called them.
    for name, needle in RULES:
        if needle in stack:
            return name
    return "other (interpreter start, threads, ...)"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--claim-batch", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=1, help="the worker's CONCURRENCY (default 1)")
    p.add_argument("--io-seconds", type=float, default=0.0, help="the job waits this long before its INCR")
    p.add_argument("--async", dest="asynchronous", action="store_true", help="the async def handler")
    p.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    p.add_argument("--idle", action="store_true", help="count idle samples too (wall clock)")
    p.add_argument("--top", type=int, default=0, help="also list the N functions with the most samples (self time)")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "profile-raw.md"))
    a = p.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    server = Server()
    name = "setqueue-async" if a.asynchronous else "setqueue"
    system = SYSTEMS[name](
        name, server.url, claim_batch=a.claim_batch, concurrency=a.concurrency, io_seconds=a.io_seconds
    )
    logdir = Path(tempfile.mkdtemp(prefix="bench-prof-"))
    raw = logdir / "worker.raw"
    try:
        system.enqueue([f"j{i}" for i in range(a.jobs)])
        w = Workers(system, a.workers, logdir)
        while counter(server.r) == 0:
            time.sleep(0.005)
        cmd = [pyspy, "record", "--pid", str(w.pids()[0]), "--rate", str(a.rate), "--format", "raw"]
        cmd += ["--output", str(raw), "--threads"] + (["--idle"] if a.idle else []) + ["--nonblocking"]
        spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t0 = time.perf_counter()
        n0 = counter(server.r)
        while counter(server.r) < 0.95 * a.jobs and w.alive() and spy.poll() is None:
            time.sleep(0.05)
        n1 = counter(server.r)
        elapsed = time.perf_counter() - t0
        spy.send_signal(2)
        _, err = spy.communicate(timeout=60)
        w.stop()
    finally:
        system.close()
        server.stop()
    if not raw.exists():
        print(f"py-spy wrote nothing: {err.decode()[-2000:]}", file=sys.stderr)
        return 1
    totals: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():  # py-spy may append notes that are not stacks
            continue
        if a.idle and "MainThread" not in stack.split(";", 1)[0]:
            continue  # wall clock: the main loop only (the other threads sleep most of the time)
        totals[bucket(stack)] += int(count)
        frames = stack.split(";")
        leaves[frames[-1]] += int(count)
        threads[frames[0].split(": ", 1)[-1]] += int(count)
    all_samples = sum(totals.values())
    jobs = n1 - n0
    per_job_us = 1e6 * elapsed / jobs if jobs else float("nan")
    lines = [
        f"py-spy {'wall-clock (--idle, main thread)' if a.idle else 'on-CPU'} samples of one `python -m worker` "
        f"(W={a.workers}, CLAIM_BATCH={a.claim_batch}, CONCURRENCY={a.concurrency}, "
        f"{'async' if a.asynchronous else 'threaded'} handler) draining {jobs:,} "
        f"{f'{1000 * a.io_seconds:g} ms' if a.io_seconds else 'no-op'} jobs in {elapsed:.1f} s "
        f"({jobs / elapsed:,.0f} jobs/s, {per_job_us:.0f} us of wall time per job per worker "
        f"x {a.workers} workers).",
        "",
        "| where | share of samples |",
        "|---|---:|",
    ]
    for name, n in totals.most_common():
        lines.append(f"| {name} | {100 * n / all_samples:.1f}% |")
    if a.top:
        lines += ["", "| thread | share of samples |", "|---|---:|"]
        lines += [f"| {name} | {100 * n / all_samples:.1f}% |" for name, n in threads.most_common(a.top)]
        lines += ["", "| function (self) | share of samples |", "|---|---:|"]
        lines += [f"| `{name}` | {100 * n / all_samples:.1f}% |" for name, n in leaves.most_common(a.top)]
    text = "\n".join(lines) + "\n"
    Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
