"""The no-op matrix: the handler returns at once (BENCH_NOOP=1), so what is measured is the queue's floor."""

import argparse
from functools import partial
from typing import Any

import report
from common import Context
from systems import PEERS, SetQueue, System

from matrices import one_server

NAME = "noop"
TITLE = "No-op jobs (the handler returns at once): the queue's own overhead"
AUTO = "setqueue-auto"  # PROCESSES=auto: one worker command, one process per core
LEFT_OUT = ("rq", "rq-simple", "naive")  # a process per job, or one round trip per step: no floor to find


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix noop (CLAIM_BATCH: --claim-batch)")
    g.add_argument("--noop-jobs", type=int, default=50_000, help="jobs per trial")
    g.add_argument("--noop-concurrency", type=int, default=1, help="setqueue's CONCURRENCY")
    g.add_argument("--noop-max-seconds", type=float, default=15, help="time limit of one trial")
    g.add_argument("--noop-cell-seconds", type=float, default=8, help="a cell's trials run this long at least")


def systems(a: argparse.Namespace, url: str) -> list[System]:
    ours = partial(SetQueue, concurrency=a.noop_concurrency, claim_batch=a.claim_batch, noop=True)
    made: list[System] = []
    for name in a.systems.split(","):
        if name == "setqueue":
            made += [ours("setqueue", url), ours(AUTO, url, processes="auto")]
        elif name in PEERS and name not in LEFT_OUT:
            made.append(PEERS[name](name, url, noop=True))
    return made


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    loops = {"no-op loop": {"BENCH_NOOP": "1"}}
    spec = one_server.Spec(NAME, partial(systems, a), "noop_", lambda s: s.name == "setqueue", loops)
    return one_server.run(a, ctx, spec)


def targets(data: dict[str, Any]) -> list[str]:
    cells, verdict = report.by_cell(data["runs"]), report.verdict
    L = []
    for w in sorted({w for _, w in cells}):
        at_w = report.at_w(data, w)
        if not (mine := at_w.get("setqueue")):
            continue
        L.append(
            f"- W={w}: no-op jobs from one worker process at least 20,000/s: {mine:,.0f}: {verdict(mine >= 20_000)}"
        )
        if auto := at_w.get(AUTO):
            ok = verdict(auto >= 1.8 * mine)
            L.append(f"- W={w}: PROCESSES=auto at least 1.8x one process: {auto:,.0f}, {auto / mine:.2f}x: {ok}")
        if (redis_cpu := report.cost(cells[("setqueue", w)], "redis_cpu_ms_per_job")) is not None:
            ok = verdict(redis_cpu <= 0.012)
            L.append(f"- W={w}: Redis CPU per job (claim + ack) at most 12 µs: {1000 * redis_cpu:.1f} µs: {ok}")
        if loop := report.bare(data, "no-op loop", w):
            L.append(f"  - setqueue ÷ the no-op loop with no queue ({loop:,.0f}/s): {mine / loop:.4f}")
        if peers := {s: v for s, v in at_w.items() if s in PEERS and v}:
            L.append("  - setqueue against each peer: " + ", ".join(f"{s} {mine / v:.1f}x" for s, v in peers.items()))
    return L


def summary(data: dict[str, Any]) -> str:
    a = data["args"]
    setup = (
        f"setqueue: CONCURRENCY={a['noop_concurrency']}, CLAIM_BATCH={a['claim_batch']}; {AUTO}: the same with "
        f"PROCESSES=auto; peers at their defaults ({', '.join(LEFT_OUT)} left out)"
    )
    job = "each a no-op (a tally, added to the counter every 10 ms)"
    bare_what = "the no-op job in a loop"
    return one_server.summary(data, TITLE, targets(data), options="noop_", job=job, setup=setup, bare_what=bare_what)
