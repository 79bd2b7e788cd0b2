"""Due-time latency of scheduled jobs: how late after its due time a delayed job starts.

    bench/.venv/bin/python bench/due_latency.py [--jobs 1000] [--spread 10] [--workers 1]

Starts its own redis-server, W idle `python -m worker` processes (the real service, CONCURRENCY=10,
CLAIM_BATCH=10, no cleaner: claims alone promote due jobs), then enqueues N jobs each due at its own
time, spread evenly over --spread seconds starting 2 s ahead (`Queue.enqueue([id], at=...)`). Each
job notes `time.time()` when it starts (bench_common's latency job). Latency = start - due, both by
this machine's clock. Prints p50/p90/p99/max in ms and writes bench/results/due-latency.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from run import Server, Workers, counter, log, pct
from systems import QUEUE, SetQueue

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
from bench_common import LATENCY

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--spread", type=float, default=10.0, help="seconds over which the due times spread")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", default=str(RESULTS / "due-latency.md"))
    a = p.parse_args()
    server = Server()
    system = SetQueue("setqueue", server.url, claim_batch=10, concurrency=10)
    logdir = Path(server.dir)
    try:
        server.r.flushall()
        workers = Workers(system, a.workers, logdir)
        try:
            from setqueue import Queue  # noqa: PLC0415

            q = Queue.from_url(server.url, name=QUEUE)
            system.enqueue_one("warm:0")
            deadline = time.monotonic() + 60
            while counter(server.r) < 1:
                if time.monotonic() > deadline or not workers.alive():
                    raise SystemExit("the worker never ran the warm-up job")
                time.sleep(0.01)
            start = time.time() + 2.0
            due = {f"lat:{i}": start + a.spread * i / a.jobs for i in range(a.jobs)}
            for job_id, at in due.items():
                q.enqueue([job_id], at=at)
            log(f"{a.jobs} jobs scheduled over {a.spread:g}s; waiting for them to run")
            deadline = time.monotonic() + a.spread + 60
            while counter(server.r) < a.jobs + 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            started = {k: float(v) for k, v in server.r.hgetall(LATENCY).items()}
            q.close()
        finally:
            workers.stop()
    finally:
        server.stop()
    lat = sorted(1000 * (started[k] - t) for k, t in due.items() if k in started)
    early = sum(1 for x in lat if x < 0)
    line = (
        f"{len(lat)}/{a.jobs} ran; start - due: p50 {pct(lat, 50):.1f} ms, p90 {pct(lat, 90):.1f} ms, "
        f"p99 {pct(lat, 99):.1f} ms, max {lat[-1]:.1f} ms, mean {statistics.fmean(lat):.1f} ms; "
        f"{early} started before their due time"
    )
    log(line)
    Path(a.out).write_text(
        "# Due-time latency of scheduled jobs\n\n"
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, redis-server {server.version}, "
        f"{a.workers} x `python -m worker` (CONCURRENCY=10, CLAIM_BATCH=10, IDLE_WAIT_SECONDS=1 default, no cleaner), "
        f"{a.jobs} jobs due at times spread evenly over {a.spread:g} s (`Queue.enqueue([id], at=...)`).\n\n"
        f"- {line}\n"
        "- target: p50 under 50 ms: " + ("**met**" if pct(lat, 50) < 50 else "**not met**") + "\n"
    )
    return 0 if len(lat) == a.jobs and early == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
