"""Due-time latency of scheduled jobs: start - due, both time.time() on this machine. No cleaner runs:
claims alone promote due jobs."""

import argparse
import statistics
import time
from typing import Any

from common import Context, Server, Workers, log, wait_until
from drain import lateness, percentiles, warmed_up
from report import header, verdict
from systems import SetQueue

NAME = "due"
TITLE = "Due-time latency of scheduled jobs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument_group("--matrix due").add_argument("--due-jobs", type=int, default=1000, help="jobs")


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    server = Server()
    system = SetQueue("setqueue", server.url, concurrency=10, claim_batch=10)
    spread = max(1.0, a.due_jobs / 100)
    workers = Workers(system.commands(1), ctx.logs(NAME), "setqueue")
    try:
        if not warmed_up(server, system, workers):
            raise SystemExit("due latency: the worker never ran the warm-up job")
        start = time.time() + 2.0
        due = {f"lat:{i}": start + spread * i / a.due_jobs for i in range(a.due_jobs)}
        for job_id, at in due.items():
            system.client().enqueue([job_id], at=at)
        wait_until(lambda: server.counter() > a.due_jobs or not workers.alive(), spread + 60)
        lat = lateness(server, due)
    finally:
        workers.stop()
        system.close()
        server.close()
    stats: dict[str, Any] = percentiles(lat) if lat else {}
    stats.update(ran=len(lat), max_ms=max(lat, default=None), mean_ms=statistics.fmean(lat) if lat else None)
    early = sum(1 for x in lat if x < 0)
    log(f"due latency: {len(lat)}/{a.due_jobs} ran, p50 {stats.get('p50_ms', 0):.1f} ms, {early} early")
    ok = len(lat) == a.due_jobs and early == 0
    return {"redis_version": server.version, "spread_seconds": spread, "early": early, **stats, "ok": ok}


def summary(data: dict[str, Any]) -> str:
    jobs = data["args"]["due_jobs"]
    about = [
        f"1 x `python -m worker` (CONCURRENCY=10, CLAIM_BATCH=10, IDLE_WAIT_SECONDS default, no cleaner); "
        f"{jobs:,} jobs due at times spread evenly over {data['spread_seconds']:g} s (`Queue.enqueue([id], at=...)`)"
    ]
    L = header(data, TITLE, about)
    if not data["ran"]:
        return "\n".join([*L, f"- **none of the {jobs} jobs ran**", ""])
    L.append(
        f"- {data['ran']}/{jobs} ran; start - due: p50 {data['p50_ms']:.1f} ms, p90 {data['p90_ms']:.1f} ms, p99 "
        f"{data['p99_ms']:.1f} ms, max {data['max_ms']:.1f} ms, mean {data['mean_ms']:.1f} ms; {data['early']} "
        "started before their due time"
    )
    return "\n".join([*L, f"- target: p50 under 50 ms: {verdict(data['p50_ms'] < 50)}", ""])
