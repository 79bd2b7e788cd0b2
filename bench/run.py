"""setqueue's benchmark against its peers: `bash bench/run [options]` (bench/README.md).

A measurement module provides NAME, TITLE, add_arguments(parser), run(args, context) -> raw data with "ok"
(every job ran exactly once), summary(data) -> Markdown, and optionally plot(data, path).
"""

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
import due_latency
import instr
import memory
import workflows
from common import BENCH, REPO, Context, evalsha_ceiling, git, log, machine, worktree
from matrices import cluster, cpu, io, noop, producer
from systems import PEERS

MODULES = (cpu, io, noop, producer, cluster, memory, due_latency, instr, workflows)
MEASUREMENTS: dict[str, ModuleType] = {m.NAME: m for m in MODULES}
ALL_SYSTEMS = ("setqueue", *PEERS)


class Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=Help)
    p.add_argument(
        "--matrix",
        default="cpu,io,due",
        help=f"comma-separated, from {', '.join(MEASUREMENTS)} ('both': cpu,io); with --baseline, memory too",
    )
    p.add_argument("--workers", default="1,2,4", help="worker process counts W")
    p.add_argument("--systems", default=",".join(ALL_SYSTEMS), help="systems of the cpu, io and noop matrices")
    p.add_argument("--trials", type=int, default=7, help="most trials of one cell; the median is reported")
    p.add_argument("--max-seconds", type=float, default=15, help="time limit of one trial")
    p.add_argument("--repeat", type=int, default=1, help="run each matrix this many times back to back")
    p.add_argument("--latency-jobs", type=int, default=200, help="jobs of the idle pick-up test (0: skip)")
    p.add_argument("--latency-workers", type=int, default=1, help="idle workers of the pick-up test")
    p.add_argument("--latency-spacing", type=float, default=0.015, help="seconds between pick-up jobs")
    p.add_argument("--bare-seconds", type=float, default=3, help="each run of the job with no queue (0: skip)")
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also run setqueue at this git ref (a worktree in bench/.baseline/), taking turns with each setqueue "
        "system trial by trial, and measure Redis memory per job of both trees",
    )
    p.add_argument("--out", default=str(BENCH / "out"), help="raw data and logs (not tracked)")
    p.add_argument("--summaries", default=str(REPO / "docs" / "benchmarks"), help="summaries")
    for module in MEASUREMENTS.values():
        module.add_arguments(p)
    return p


def chosen(p: argparse.ArgumentParser, a: argparse.Namespace) -> list[str]:
    """The measurements to run, in order; memory first with --baseline (on servers of its own)."""
    names = [n for n in a.matrix.replace("both", "cpu,io").split(",") if n]
    if a.baseline and a.memory_jobs > 0 and "memory" not in names:
        names.insert(0, "memory")
    for name in names:
        if name not in MEASUREMENTS:
            p.error(f"unknown --matrix {name!r}")
    a.systems = ",".join(ALL_SYSTEMS) if a.systems == "all" else a.systems
    for name in a.systems.split(","):
        if name not in ALL_SYSTEMS:
            p.error(f"unknown system {name!r}")
    if a.baseline and "cluster" in names:
        p.error("--baseline twins run in the cpu and io matrices, not in the cluster one")
    return names


def measure(module: ModuleType, a: argparse.Namespace, ctx: Context) -> bool:
    """Run one measurement, write its raw data, summary and plot: True if every job ran once."""
    started = time.perf_counter()
    data: dict[str, Any] = {
        "name": module.NAME,
        "title": module.TITLE,
        "command": " ".join(["bash bench/run", *sys.argv[1:]]),
        "args": vars(a),
        "code": {
            "head": git("rev-parse", "HEAD"),
            "code_changed": bool(git("status", "--porcelain", "shared", "worker")),
        },
        "baseline": {**vars(ctx.baseline), "root": str(ctx.baseline.root)} if ctx.baseline else None,
        "machine_before": machine(),
        "evalsha_ceiling": evalsha_ceiling(),
        "redis_py": redis.__version__,
    }
    data.update(module.run(a, ctx))
    data.update(machine_after=machine(), seconds=time.perf_counter() - started)
    raw = ctx.out / f"{module.NAME}.json"
    raw.write_text(json.dumps(data, indent=1) + "\n")
    summaries = Path(a.summaries)
    summaries.mkdir(parents=True, exist_ok=True)
    text = module.summary(data)
    if hasattr(module, "plot") and module.plot(data, summaries / f"{module.NAME}.png"):
        text += f"\n![{module.TITLE}]({module.NAME}.png)\n"
    (summaries / f"{module.NAME}.md").write_text(text)
    log(f"{module.NAME}: {'checks passed' if data['ok'] else 'FAILED: a job ran twice or not at all'}; {raw}")
    return bool(data["ok"])


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    names = chosen(p, a)
    out = Path(a.out) / dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(out, worktree(a.baseline) if a.baseline else None)
    if ctx.baseline:
        log(f"baseline {a.baseline}: {ctx.baseline.sha} in {ctx.baseline.root}")
    results = [measure(MEASUREMENTS[name], a, ctx) for name in names]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
