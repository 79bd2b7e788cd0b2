"""The CPU-trivial matrix: every job is one Redis INCR, so what is measured is the queue itself."""

import argparse
from functools import partial
from typing import Any

import report
from common import Context
from systems import PEERS, SetQueue, System

from matrices import one_server
from setqueue.runtime.settings import default

NAME = "cpu"
TITLE = "CPU-trivial jobs (one INCR): setqueue and its peers"
GROUPED = "setqueue-1000-groups"  # every job in one of 1,000 job groups (limits)
RESULTS = "setqueue-results"  # the handler returns a small result, kept for an hour
# setqueue at its own default CONCURRENCY, as the peers run at theirs: an INCR job waits on a round
# trip, and a worker of one slot waits with it, while Dramatiq's 8 threads wait side by side.
DEFAULT_CONCURRENCY = int(default("CONCURRENCY"))
AT_DEFAULT = f"setqueue-concurrency-{DEFAULT_CONCURRENCY}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix cpu (CONCURRENCY and CLAIM_BATCH serve --matrix cluster too)")
    g.add_argument("--jobs", type=int, default=20_000, help="jobs per trial")
    g.add_argument("--claim-batch", type=int, default=100, help="setqueue's CLAIM_BATCH")
    g.add_argument("--cpu-concurrency", type=int, default=1, help="setqueue's CONCURRENCY")
    g.add_argument("--cell-seconds", type=float, default=10, help="a cell's trials run this long at least")
    flag = argparse.BooleanOptionalAction
    g.add_argument("--groups", action=flag, default=True, help=f"also run {GROUPED}: the jobs in 1,000 job groups")
    g.add_argument("--results", action=flag, default=False, help=f"also run {RESULTS}: the handler's result kept")
    g.add_argument(
        "--at-default", action=flag, default=True, help=f"also run {AT_DEFAULT}: setqueue at its default CONCURRENCY"
    )


def systems(a: argparse.Namespace, url: str) -> list[System]:
    ours = partial(SetQueue, concurrency=a.cpu_concurrency, claim_batch=a.claim_batch)
    names = a.systems.split(",")
    made = [(ours if name == "setqueue" else PEERS[name])(name, url) for name in names]
    if "setqueue" in names and a.groups:
        made.insert(1, ours(GROUPED, url, groups=1000))
    if "setqueue" in names and a.results:
        made.insert(1, ours(RESULTS, url, results=True))
    if "setqueue" in names and a.at_default and a.cpu_concurrency != DEFAULT_CONCURRENCY:
        made.insert(1, ours(AT_DEFAULT, url, concurrency=DEFAULT_CONCURRENCY))
    return made


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    return one_server.run(a, ctx, one_server.Spec(NAME, partial(systems, a), bare_loops={"INCR loop": {}}))


def targets(data: dict[str, Any]) -> list[str]:
    at_w2 = report.at_w(data, 2)
    mine, dramatiq, verdict = at_w2.get("setqueue"), at_w2.get("dramatiq"), report.verdict
    peers = {s: v for s, v in at_w2.items() if s in PEERS and s != "naive" and v}
    L = []
    if mine:
        L.append(f"- steady drain at W=2 at least 13,000 jobs/s: setqueue {mine:,.0f}: {verdict(mine >= 13_000)}")
    if mine and dramatiq:
        ok = verdict(mine >= 3 * dramatiq)
        L.append(f"- at least 3x Dramatiq at W=2: dramatiq {dramatiq:,.0f}, setqueue {mine / dramatiq:.1f}x: {ok}")
    if mine and (best := max(peers, key=lambda s: peers[s], default=None)):
        L.append(f"  - fastest peer at W=2: {best} {peers[best]:,.0f} jobs/s (setqueue {mine / peers[best]:.1f}x)")
    if (at_default := at_w2.get(AT_DEFAULT)) and dramatiq:
        L.append(
            f"  - setqueue at its default CONCURRENCY ({DEFAULT_CONCURRENCY}), as the peers run at theirs: "
            f"{at_default:,.0f} jobs/s, {at_default / dramatiq:.1f}x Dramatiq"
        )
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
        keys = ("worker_cpu_ms_per_job", "redis_cpu_ms_per_job")
        (w0, r0), (w1, r1) = [[report.cost(c, k) for k in keys] for c in (plain, kept)]
        if w0 and r0 and w1 and r1:
            L.append(
                f"  - results kept (a 30-byte JSON a job): worker CPU {1000 * w1:.0f} against {1000 * w0:.0f} µs/job,"
                f" Redis CPU {1000 * r1:.1f} against {1000 * r0:.1f} µs/job"
            )
    if mine and (loop := report.bare(data, "INCR loop")):
        L.append(f"  - setqueue reached {100 * mine / loop:.0f}% of the INCR loop with no queue ({loop:,.0f}/s at W=2)")
    return L


def summary(data: dict[str, Any]) -> str:
    a = data["args"]
    setup = f"setqueue: CONCURRENCY={a['cpu_concurrency']}, CLAIM_BATCH={a['claim_batch']}; "
    if any(r["system"] == AT_DEFAULT for r in data["runs"]):
        setup += f"{AT_DEFAULT}: the same at its default CONCURRENCY={DEFAULT_CONCURRENCY}; "
    setup += "peers at their defaults"
    job, bare_what = "each one Redis INCR", "one INCR after another (redis-py)"
    return one_server.summary(data, TITLE, targets(data), job=job, setup=setup, bare_what=bare_what)


plot = report.plot_by_workers
