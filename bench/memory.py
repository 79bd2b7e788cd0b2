"""Redis memory per job of this checkout and, with --baseline, the baseline's tree, each on a fresh
redis-server, measured by workers/bench_sq_memory.py run with that tree's setqueue (the summary says how)."""

import argparse
import json
import subprocess
import sys
from typing import Any

from common import CURRENT, WORKERS_DIR, CodeTree, Context, Server, log
from report import header, table

NAME = "memory"
TITLE = "Redis memory per job"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix memory (runs with --baseline too, for both trees)")
    g.add_argument("--memory-jobs", type=int, default=100_000, help="jobs (0: not with --baseline)")


def measure(tree: CodeTree, jobs: int) -> dict[str, Any]:
    """One tree's figures, or its error (not raised: the other tree's still count)."""
    server = Server()
    try:
        env = {**tree.env(), "BENCH_REDIS_URL": server.url}
        argv = [sys.executable, str(WORKERS_DIR / "bench_sq_memory.py"), "--jobs", str(jobs)]
        proc = subprocess.run(argv, env=env, cwd=tree.root, capture_output=True, text=True, timeout=600, check=False)
    finally:
        server.close()
    name = f"setqueue{tree.suffix()}"
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"tree": name, "error": (proc.stderr or proc.stdout).strip()[-2000:]}
    res: dict[str, Any] = json.loads(proc.stdout)
    log(f"{name}: {res['queued']['bytes_per_job']:,.0f} B/job queued, {res['done']['bytes_per_job']:,.0f} in done")
    return {"tree": name, **res}


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    trees = [CURRENT] + ([ctx.baseline] if ctx.baseline else [])
    results = [measure(tree, a.memory_jobs) for tree in trees]
    version = next((m["redis_version"] for m in results if "redis_version" in m), "-")
    return {"redis_version": version, "trees": results, "ok": not any("error" in m for m in results)}


def summary(data: dict[str, Any]) -> str:
    about = [
        f"{data['args']['memory_jobs']:,} jobs with ids of 11 characters, no payload, each code tree on a fresh "
        "redis-server: enqueued (Queue.enqueue), then all claimed and acked with a retention that keeps every id "
        "in done; used_memory: the INFO delta from the empty server (scripts loaded) over N, after dropping what "
        "expires by itself (resend results, the wake list); MEMORY USAGE: the queue's keys summed (every element)"
    ]
    rows = []
    for m in data["trees"]:
        if "error" in m:
            rows.append([m["tree"], f"failed: {(m['error'] or '?').splitlines()[-1]}"])
            continue
        for state in ("queued", "done"):
            st, per_key = m[state], ", ".join(f"{k} {v['bytes'] / m['jobs']:.0f}" for k, v in m[state]["keys"].items())
            rows.append(
                [f"{m['tree']}, {state}", f"{st['bytes_per_job']:.1f}", f"{st['memory_usage_bytes_per_job']:.1f}"]
            )
            rows[-1].append(per_key)
    cols = ["code, jobs", "used_memory B/job", "MEMORY USAGE B/job", "MEMORY USAGE B/job by key"]
    return "\n".join(header(data, TITLE, about) + table(cols, rows))
