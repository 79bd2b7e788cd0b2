"""Redis memory per job: N queued jobs, then the same N kept in done, for one code tree or two.

    bench/.venv/bin/python bench/memory.py [--jobs 100000] [--baseline REF] [--out FILE.md]

For each code tree (this checkout, and with --baseline the worktree of REF, see baseline.py) it
starts a fresh redis-server and runs bench/workers/bench_sq_memory.py with that tree's setqueue:
N ids of 11 characters (no payload) enqueued, then all claimed and acked with a retention that
keeps them all. Bytes per job = the INFO `used_memory` delta from the empty server (scripts
loaded) over N; `MEMORY USAGE` (every element sampled) of each key is reported beside it, the way
README's figure for `finished` was measured. `bash bench/run --baseline REF` runs this too
(--memory-jobs) and puts the table in its results.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from baseline import CURRENT, CodeTree, worktree
from report import memory_table
from run import Server, log
from systems import WORKERS_DIR


def measure(tree: CodeTree, jobs: int) -> dict[str, Any]:
    """One tree's figures, on a redis-server of its own (an error is returned, not raised)."""
    server = Server()
    try:
        env = tree.env([])
        env["BENCH_REDIS_URL"] = server.url
        proc = subprocess.run(
            [sys.executable, str(WORKERS_DIR / "bench_sq_memory.py"), "--jobs", str(jobs)],
            env=env,
            cwd=tree.root,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        server.stop()
    name = f"setqueue{tree.suffix()}"
    if proc.returncode != 0 or not proc.stdout.strip():
        return {"tree": name, "code": tree.as_dict(), "error": (proc.stderr or proc.stdout).strip()[-2000:]}
    res: dict[str, Any] = json.loads(proc.stdout)
    if not Path(res["setqueue"]).resolve().is_relative_to(tree.root):
        raise SystemExit(f"{name}: measured {res['setqueue']}, not {tree.root}")
    res["tree"] = name
    res["code"] = tree.as_dict()
    log(
        f"{name:20s} memory: {res['queued']['bytes_per_job']:,.0f} B/job queued, "
        f"{res['done']['bytes_per_job']:,.0f} B/job in done ({jobs:,} jobs)"
    )
    return res


def measure_trees(trees: list[CodeTree], jobs: int) -> list[dict[str, Any]]:
    return [measure(t, jobs) for t in trees]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100_000)
    p.add_argument("--baseline", metavar="REF", help="also measure this git ref (a worktree in bench/.baseline/)")
    p.add_argument("--out", help="write the table here (markdown) as well as to stdout")
    a = p.parse_args()
    trees = [CURRENT] + ([worktree(a.baseline)] if a.baseline else [])
    text = "\n".join(memory_table(measure_trees(trees, a.jobs))) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
