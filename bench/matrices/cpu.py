"""The CPU-trivial matrix: every job is one Redis INCR, so what is measured is the queue itself.

setqueue (W x `python -m worker`, CONCURRENCY=--cpu-concurrency, CLAIM_BATCH=--claim-batch) and
each peer of --systems at its defaults, --jobs per trial, W in --workers.
"""

import argparse
from functools import partial
from typing import Any

import report
from common import Context
from drain import Cell
from systems import PEERS, SetQueue, System

from matrices import one_server

NAME = "cpu"
TITLE = "CPU-trivial jobs (one INCR): setqueue and its peers"
GROUPED = "setqueue-1000-groups"  # setqueue with every job in one of 1,000 job groups (flow control)
RESULTS = "setqueue-results"  # setqueue whose handler returns a small result, kept for an hour


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix cpu (CONCURRENCY and CLAIM_BATCH serve --matrix cluster too)")
    g.add_argument("--jobs", type=int, default=20_000, help="jobs per trial (default 20000)")
    g.add_argument("--claim-batch", type=int, default=100, help="setqueue's CLAIM_BATCH (default 100)")
    g.add_argument("--cpu-concurrency", type=int, default=1, help="setqueue's CONCURRENCY (default 1: one thread)")
    g.add_argument("--cell-seconds", type=float, default=10, help="a cell's trials run this long at least (default 10)")
    g.add_argument(
        "--groups",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also run {GROUPED}: setqueue with its jobs in 1,000 job groups (default on)",
    )
    g.add_argument(
        "--results",
        action=argparse.BooleanOptionalAction,
        default=False,
        help=f"also run {RESULTS}: setqueue whose handler returns a small result, kept (default off)",
    )


def systems(a: argparse.Namespace, url: str) -> list[System]:
    ours = partial(SetQueue, concurrency=a.cpu_concurrency, claim_batch=a.claim_batch)
    made = [(ours if name == "setqueue" else PEERS[name])(name, url) for name in a.systems.split(",")]
    if "setqueue" in a.systems.split(",") and a.groups:
        made.insert(1, ours(GROUPED, url, groups=1000))
    if "setqueue" in a.systems.split(",") and a.results:
        made.insert(1, ours(RESULTS, url, results=True))
    return made


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    cell = Cell(a.jobs, a.max_seconds, a.cell_seconds, a.trials)
    return one_server.run(a, ctx, one_server.Spec(NAME, partial(systems, a), cell, bare_loops={"INCR loop": {}}))


def targets(data: dict[str, Any]) -> list[str]:
    at_w2 = report.at_w(data, 2)
    mine, dramatiq, verdict = at_w2.get("setqueue"), at_w2.get("dramatiq"), report.verdict
    peers = {s: v for s, v in at_w2.items() if s in PEERS and s != "naive" and v}
    L = ["## Targets\n"]
    if mine:
        L.append(f"- steady drain at W=2 at least 13,000 jobs/s: setqueue {mine:,.0f}: {verdict(mine >= 13_000)}")
    if mine and dramatiq:
        ok = verdict(mine >= 3 * dramatiq)
        L.append(f"- at least 3x Dramatiq at W=2: dramatiq {dramatiq:,.0f}, setqueue {mine / dramatiq:.1f}x: {ok}")
    if mine and (best := max(peers, key=lambda s: peers[s], default=None)):
        L.append(f"  - fastest peer at W=2: {best} {peers[best]:,.0f} jobs/s (setqueue {mine / peers[best]:.1f}x)")
    cells = report.by_cell(data["runs"])
    plain, grouped = cells.get(("setqueue", 2)), cells.get((GROUPED, 2))
    if plain and grouped:
        base, cpu = report.cost(plain, "redis_cpu_ms_per_job"), report.cost(grouped, "redis_cpu_ms_per_job")
        if base and cpu:
            ok = verdict(cpu <= 1.5 * base)
            L.append(
                f"- with 1,000 job groups, Redis CPU per job at most 1.5x without: {1000 * cpu:.1f} against "
                f"{1000 * base:.1f} µs, {cpu / base:.2f}x: {ok}"
            )
    if plain and (kept := cells.get((RESULTS, 2))):
        costs = [
            (report.cost(c, "worker_cpu_ms_per_job"), report.cost(c, "redis_cpu_ms_per_job")) for c in (plain, kept)
        ]
        if all(w and r for w, r in costs):
            (w0, r0), (w1, r1) = costs
            L.append(
                f"  - results kept (a 30-byte JSON a job): worker CPU {1000 * w1:.0f} against {1000 * w0:.0f} µs/job,"
                f" Redis CPU {1000 * r1:.1f} against {1000 * r0:.1f} µs/job"
            )
    if mine and (loop := (data.get("bare_loop") or {}).get("INCR loop", {}).get("W=2")):
        L.append(f"  - setqueue reached {100 * mine / loop:.0f}% of the INCR loop with no queue ({loop:,.0f}/s at W=2)")
    return [*L, *report.latency_targets(data), report.once_target(data["runs"]), ""]


def summary(data: dict[str, Any]) -> str:
    a = data["args"]
    about = [
        f"{a['jobs']:,} jobs per trial, each one Redis INCR; W = {a['workers']}; time limit {a['max_seconds']:g} s per "
        f"trial; a cell's trials run for {a['cell_seconds']:g} s (at most {a['trials']}); repeats: {a['repeat']}",
        f"setqueue: CONCURRENCY={a['cpu_concurrency']}, CLAIM_BATCH={a['claim_batch']}; peers at their defaults",
    ]
    L = report.header(data, TITLE, about) + targets(data)
    L += report.baseline_section(data, 0.9, "costs at most 10% of the baseline's throughput")
    L += ["## Throughput and cost per job\n", *report.throughput_table(data), *report.repeat_table(data)]
    L += report.latency_table(data)
    L += report.bare_loop_lines(data, "one INCR after another (redis-py)") + report.settings_list(data)
    return "\n".join(L)


plot = report.plot_by_workers
