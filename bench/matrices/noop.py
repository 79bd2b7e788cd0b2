"""The no-op matrix: the handler returns at once (BENCH_NOOP=1), so what is measured is the queue's floor."""

import argparse
from functools import partial
from typing import Any

import report
from common import Context, fmt
from systems import PEERS, SetQueue, System

from matrices import one_server

NAME = "noop"
TITLE = "No-op jobs (the handler returns at once): the queue's own overhead"
AUTO = "setqueue-auto"  # PROCESSES=auto: one worker command, one process per core
TASKS = "setqueue-tasks"  # JOB_HANDLER=bench_sq_tasks:tasks: the registry runs the no-op task of each envelope
PAYLOAD = "setqueue-payload"  # the same envelopes to the plain handler: what the payload alone costs
LEFT_OUT = ("rq", "rq-simple", "naive")  # a process per job, or one round trip per step: no floor to find


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix noop (CLAIM_BATCH: --claim-batch)")
    g.add_argument("--noop-jobs", type=int, default=50_000, help="jobs per trial")
    g.add_argument("--noop-concurrency", type=int, default=1, help="setqueue's CONCURRENCY")
    g.add_argument("--noop-max-seconds", type=float, default=15, help="time limit of one trial")
    g.add_argument("--noop-cell-seconds", type=float, default=8, help="a cell's trials run this long at least")
    g.add_argument(
        "--noop-tasks",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"also run {TASKS} and {PAYLOAD}, taking turns with setqueue trial by trial",
    )


def systems(a: argparse.Namespace, url: str) -> list[System]:
    ours = partial(SetQueue, concurrency=a.noop_concurrency, claim_batch=a.claim_batch, noop=True)
    made: list[System] = []
    for name in a.systems.split(","):
        if name == "setqueue":
            made += [ours("setqueue", url), ours(AUTO, url, processes="auto")]
            if a.noop_tasks:
                made += [
                    ours(TASKS, url, tasks=True, beside="setqueue"),
                    ours(PAYLOAD, url, envelope=True, beside="setqueue"),
                ]
        elif name in PEERS and name not in LEFT_OUT:
            made.append(PEERS[name](name, url, noop=True))
    return made


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    loops = {"no-op loop": {"BENCH_NOOP": "1"}}
    spec = one_server.Spec(NAME, partial(systems, a), "noop_", lambda s: s.name in {"setqueue", TASKS}, loops)
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
        L += tasks_targets(data, w, mine)
        if loop := report.bare(data, "no-op loop", w):
            L.append(f"  - setqueue ÷ the no-op loop with no queue ({loop:,.0f}/s): {mine / loop:.4f}")
        if peers := {s: v for s, v in at_w.items() if s in PEERS and v}:
            L.append("  - setqueue against each peer: " + ", ".join(f"{s} {mine / v:.1f}x" for s, v in peers.items()))
    return L


def tasks_targets(data: dict[str, Any], w: int, plain: float) -> list[str]:
    """The registry against the plain handler (issue 33; W=1 the target, other W for information), worker
    CPU per job beside; the envelope alone to the plain handler, what the payload costs."""
    cells, at_w, L = report.by_cell(data["runs"]), report.at_w(data, w), []
    cpu = {s: report.cost(cells.get((s, w), []), "worker_cpu_ms_per_job") for s in ("setqueue", TASKS, PAYLOAD)}
    if tasks := at_w.get(TASKS):
        what = f"{tasks:,.0f} against {plain:,.0f}, {tasks / plain:.2f}x; worker CPU per job {fmt(cpu[TASKS], 4)}"
        what += f" against {fmt(cpu['setqueue'], 4)} ms"
        if w == 1:
            ok = report.verdict(tasks >= 0.85 * plain)
            L.append(
                f"- W={w}: a no-op task through the registry within 15% of the plain handler's jobs/s: {what}: {ok}"
            )
        else:
            L.append(f"  - a no-op task through the registry ÷ the plain handler: {what}")
    if payload := at_w.get(PAYLOAD):
        L.append(
            f"  - the same envelopes to the plain handler ({PAYLOAD}): {payload / plain:.2f}x the plain handler"
            + (f", the registry {tasks / payload:.2f}x that" if tasks else "")
            + f"; worker CPU per job {fmt(cpu[PAYLOAD], 4)} ms"
        )
    return L


def summary(data: dict[str, Any]) -> str:
    a = data["args"]
    setup = (
        f"setqueue: CONCURRENCY={a['noop_concurrency']}, CLAIM_BATCH={a['claim_batch']}; {AUTO}: the same with "
        f"PROCESSES=auto; peers at their defaults ({', '.join(LEFT_OUT)} left out)"
    )
    if a.get("noop_tasks"):
        setup += (
            f"; {TASKS}: each job a call of a no-op task, its payload the task envelope, the worker serving the "
            f"registry (JOB_HANDLER=bench_sq_tasks:tasks); {PAYLOAD}: the same envelopes to the plain handler; "
            "both take turns with setqueue trial by trial"
        )
    job = "each a no-op (a tally, added to the counter every 10 ms)"
    bare_what = "the no-op job in a loop"
    return one_server.summary(data, TITLE, targets(data), options="noop_", job=job, setup=setup, bare_what=bare_what)
