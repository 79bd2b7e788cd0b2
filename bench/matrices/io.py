"""The I/O-bound matrix: every job waits --io-seconds (a call to another service), then INCRs."""

import argparse
from functools import partial
from typing import Any

import report
from common import Context
from systems import PEERS, SetQueue, System

from matrices import one_server

NAME = "io"
TITLE = "I/O-bound jobs (a wait, then one INCR): setqueue and its peers"
PEERS_HERE = ("dramatiq", "celery", "arq", "saq")  # rq and naive run one job at a time: left out


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix io")
    g.add_argument("--io-jobs", type=int, default=10_000, help="jobs per trial")
    g.add_argument("--io-seconds", type=float, default=0.01, help="the job's wait before its INCR")
    g.add_argument("--concurrency", type=int, default=100, help="C, setqueue's CONCURRENCY and the -cC peers'")
    g.add_argument("--io-claim-batch", type=int, default=100, help="setqueue's CLAIM_BATCH")
    g.add_argument("--io-max-seconds", type=float, default=8, help="time limit of one trial")
    g.add_argument("--io-cell-seconds", type=float, default=5, help="a cell's trials run this long at least")


def systems(a: argparse.Namespace, url: str) -> list[System]:
    c, wait, out = a.concurrency, a.io_seconds, []
    for name in a.systems.split(","):
        if name == "setqueue":
            how = {"concurrency": c, "io_seconds": wait, "claim_batch": a.io_claim_batch}
            out += [SetQueue(f"setqueue-{k}", url, asynchronous=k == "async", **how) for k in ("threads", "async")]
        elif name in PEERS_HERE:
            peer = PEERS[name]
            out += [peer(name, url, io_seconds=wait), peer(f"{name}-c{c}", url, concurrency=c, io_seconds=wait)]
    return out


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    job = {"BENCH_IO_SECONDS": repr(a.io_seconds), "BENCH_CONCURRENCY": str(a.concurrency)}
    loops = {mode: {**job, "BENCH_IO_MODE": mode} for mode in ("async", "threads")}
    # Pick-up latency does not depend on the job (its start is taken before the wait): setqueue's only.
    spec = one_server.Spec(NAME, partial(systems, a), "io_", lambda s: isinstance(s, SetQueue), loops)
    return one_server.run(a, ctx, spec)


def targets(data: dict[str, Any]) -> list[str]:
    c, cells, at_w2 = data["args"]["concurrency"], report.by_cell(data["runs"]), report.at_w(data, 2)
    equal = {s: v for s, v in at_w2.items() if s.endswith(f"-c{c}") and v}
    best = max(equal, key=lambda s: equal[s]) if equal else None
    L = []
    if rate := at_w2.get("setqueue-async"):
        L.append(f"- async handler, W=2, at least 5,000 jobs/s: {rate:,.0f}: {report.verdict(rate >= 5000)}")
    for name, mode in (("setqueue-async", "async"), ("setqueue-threads", "threads")):
        if (rate := at_w2.get(name)) and best:
            peer, ok = f"{best} {equal[best]:,.0f}", report.verdict(rate >= 3 * equal[best])
            L.append(f"- {name}, W=2, at least 3x the fastest peer at C: {peer}, {rate / equal[best]:.1f}x: {ok}")
        if rate and (loop := report.bare(data, mode)):
            L.append(f"  - {name} reached {100 * rate / loop:.0f}% of the {mode} loop with no queue ({loop:,.0f}/s)")
        if rate:
            ceiling = 2 * c / data["args"]["io_seconds"]  # W=2 processes of C slots, a job a wait each
            L.append(f"  - {name} reached {100 * rate / ceiling:.0f}% of the slot ceiling ({ceiling:,.0f}/s at W=2)")
    if best:
        names = ("setqueue-async", "setqueue-threads", best)
        cpu = {s: report.cost(cells[(s, 2)], "worker_cpu_ms_per_job") for s in names if (s, 2) in cells}
        L.append("  - worker CPU ms per job at W=2: " + ", ".join(f"{s} {v:.3f}" for s, v in cpu.items() if v))
    return L


def summary(data: dict[str, Any]) -> str:
    a = data["args"]
    ms, c = 1000 * a["io_seconds"], a["concurrency"]
    job = f"each a {ms:g} ms wait (time.sleep in threads, asyncio.sleep in async workers), then one Redis INCR"
    setup = (
        f"C = {c} jobs at once per process: {c} slots / {ms:g} ms = {1000 * c / ms:,.0f} jobs/s per process at most "
        f"(the slot ceiling); setqueue CLAIM_BATCH={a['io_claim_batch']}"
    )
    bare_what = f"{c} loops each of the job alone (the wait, then the INCR)"
    how: dict[str, Any] = {"before_after": (1.0, "no lower than before"), "per_process": True}
    return one_server.summary(
        data, TITLE, targets(data), options="io_", job=job, setup=setup, bare_what=bare_what, **how
    )


plot = report.plot_by_workers
