"""What the queue itself costs per job, apart from the job's body.

    bench/.venv/bin/python bench/queue_cost.py [--jobs 40000] [--workers 1,2] [--rounds 2]

Drains N jobs through W real `python -m worker` processes twice per round: once with the bench
handler (one INCR per job) and once with a handler that does nothing (`bench_sq_handler:noop`),
and prints jobs/s and CPU per job of the workers and of Redis, measured between 5% and 95% done
(the size of the done set, sampled). The difference is the price of the job's INCR; the no-op
figures are the queue's own cost. Used for bench/results/profile.md and the proposals' numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import tree_cpu_seconds
from run import Server, Workers
from systems import QUEUE, SYSTEMS


def one(server: Server, handler: str, workers: int, jobs: int, claim_batch: int) -> dict[str, float]:
    server.r.flushall()
    system = SYSTEMS["setqueue"]("setqueue", server.url, claim_batch=claim_batch)
    system.enqueue([f"j{i}" for i in range(jobs)])
    cmds = system.commands(workers)
    for c in cmds:
        c.env["JOB_HANDLER"] = f"bench_sq_handler:{handler}"
    system.commands = lambda _w: cmds  # type: ignore[method-assign]
    done_key = f"setqueue:{{{QUEUE}}}:done"
    w = Workers(system, workers, Path(tempfile.mkdtemp(prefix="bench-qc-")))
    try:
        deadline = time.monotonic() + 120
        while server.r.scard(done_key) < 0.05 * jobs and time.monotonic() < deadline:
            time.sleep(0.002)
        t0, d0, c0, r0 = time.perf_counter(), server.r.scard(done_key), tree_cpu_seconds(w.pids()), server.snapshot()
        while server.r.scard(done_key) < 0.95 * jobs and time.monotonic() < deadline:
            time.sleep(0.002)
        t1, d1, c1, r1 = time.perf_counter(), server.r.scard(done_key), tree_cpu_seconds(w.pids()), server.snapshot()
    finally:
        w.stop()
        system.close()
    n = d1 - d0
    wcpu = sum(v - c0.get(k, 0.0) for k, v in c1.items())
    return {
        "jobs_per_s": n / (t1 - t0),
        "worker_cpu_ms": 1e3 * wcpu / n,
        "redis_cpu_ms": 1e3 * (r1["cpu"] - r0["cpu"]) / n,
        "redis_busy": (r1["cpu"] - r0["cpu"]) / (t1 - t0),
        "redis_cmds": (r1["commands"] - r0["commands"]) / n,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=40_000)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--claim-batch", type=int, default=50)
    a = p.parse_args()
    server = Server()
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for _ in range(a.rounds):
            for handler in ("handle", "noop"):
                for wc in (int(x) for x in a.workers.split(",")):
                    results.setdefault((handler, wc), []).append(one(server, handler, wc, a.jobs, a.claim_batch))
    finally:
        server.stop()
    print(f"CLAIM_BATCH={a.claim_batch}, {a.jobs:,} jobs, medians of {a.rounds} rounds\n")
    print(
        "| handler | W | jobs/s | worker CPU ms/job | Redis CPU ms/job | Redis busy | Redis cmds/job (incl. sampling) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (handler, wc), rs in results.items():

        def med(k: str, rs: list[dict[str, float]] = rs) -> float:
            return statistics.median(r[k] for r in rs)

        print(
            f"| {'one INCR' if handler == 'handle' else 'no-op'} | {wc} | {med('jobs_per_s'):,.0f} | "
            f"{med('worker_cpu_ms'):.3f} | {med('redis_cpu_ms'):.3f} | {100 * med('redis_busy'):.0f}% | "
            f"{med('redis_cmds'):.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
