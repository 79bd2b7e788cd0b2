"""What a matrix of systems on one redis-server runs (cpu, io): every system's cells at each W,
taking turns with its baseline twin when there is one, then the pick-up latency and the bare loop."""

import argparse
import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common import Context, Server
from drain import Cell, bare_loop, cell_trials, exactly_once, pickup_latency
from systems import SetQueue, System


def turns(systems: list[System], ctx: Context) -> list[list[System]]:
    """The systems that take turns in a cell, trial by trial: with --baseline, each setqueue system and its
    twin (the same settings, the baseline's code, named <name>@<sha>); any other alone."""
    b = ctx.baseline
    twin = (lambda s: dataclasses.replace(s, name=s.name + b.suffix(), code=b, state={})) if b else None
    return [[s, twin(s)] if twin and isinstance(s, SetQueue) else [s] for s in systems]


@dataclass
class Spec:
    """What a matrix on one redis-server runs: its systems on the server at a URL, how their cells
    run, those whose idle pick-up latency is measured, and the job alone with no queue (by name, the
    environment of each loop)."""

    name: str
    systems: Callable[[str], list[System]]
    cell: Cell
    pickup: Callable[[System], bool] = lambda _: True
    bare_loops: dict[str, dict[str, str]] = field(default_factory=dict)


def run(a: argparse.Namespace, ctx: Context, spec: Spec) -> dict[str, Any]:
    server = Server()
    groups = turns(spec.systems(server.url), ctx)
    systems = [s for group in groups for s in group]
    workers = [int(w) for w in a.workers.split(",")]
    logs = ctx.logs(spec.name)
    runs: list[dict[str, Any]] = []
    try:
        for repeat in range(a.repeat):
            for group in groups:
                for w in workers:
                    runs += [{**r, "repeat": repeat} for r in cell_trials(server, group, w, spec.cell, logs)]
        how = {"count": a.latency_jobs, "workers": a.latency_workers, "spacing": a.latency_spacing, "logs": logs}
        latency = [pickup_latency(server, s, **how) for s in systems if a.latency_jobs > 0 and spec.pickup(s)]
        bare = spec.bare_loops if a.bare_seconds > 0 else {}
        loops = {k: bare_loop(server, workers, a.bare_seconds, env) for k, env in bare.items()}
    finally:
        for s in systems:
            with contextlib.suppress(Exception):
                s.close()
        server.close()
    return {
        "redis_version": server.version,
        "settings": {s.name: {"describe": s.describe(), "per_process": s.per_process()} for s in systems},
        "runs": runs,
        "latency": latency,
        "bare_loop": loops,
        "ok": all(exactly_once(r) for r in runs),
    }
