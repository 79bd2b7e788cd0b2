"""A matrix of systems on one redis-server (cpu, io, noop): every system's cells at each W, taking turns
with its baseline twin when there is one, then the pick-up latency and the bare loop; and its summary."""

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import report
from common import Context, Server
from drain import Cell, bare_loop, cell_trials, exactly_once, pickup_latency
from systems import SetQueue, System, close_all


def turns(systems: list[System], ctx: Context) -> list[list[System]]:
    """The systems that take turns trial by trial: with --baseline, each setqueue system with its twin (the
    same settings, the baseline's code, named <name>@<sha>) if that tree can run it; a setqueue system
    ``beside`` another, with that one (and the twins); any other alone."""
    b = ctx.baseline
    groups: dict[str, list[System]] = {}
    for s in systems:
        key = s.beside if isinstance(s, SetQueue) and s.beside in {t.name for t in systems} else s.name
        twin = b and isinstance(s, SetQueue) and s.runs_on(b)
        twins = [dataclasses.replace(s, name=s.name + b.suffix(), code=b, state={})] if b and twin else []
        groups.setdefault(key, []).extend([s, *twins])
    return list(groups.values())


@dataclass
class Spec:
    """``options``: the prefix of the matrix's --jobs, --max-seconds, --cell-seconds; ``pickup``: the systems
    whose pick-up latency is measured; ``bare_loops``: each no-queue loop's environment, by name."""

    name: str
    systems: Callable[[str], list[System]]
    options: str = ""
    pickup: Callable[[System], bool] = lambda _: True
    bare_loops: dict[str, dict[str, str]] = field(default_factory=dict)


def run(a: argparse.Namespace, ctx: Context, spec: Spec) -> dict[str, Any]:
    server = Server()
    groups = turns(spec.systems(server.url), ctx)
    systems = [s for group in groups for s in group]
    workers = [int(w) for w in a.workers.split(",")]
    jobs, limit, least = (getattr(a, spec.options + k) for k in ("jobs", "max_seconds", "cell_seconds"))
    cell = Cell(jobs, limit, least, a.trials)
    logs = ctx.logs(spec.name)
    runs: list[dict[str, Any]] = []
    try:
        for repeat in range(a.repeat):
            for group in groups:
                for w in workers:
                    runs += [{**r, "repeat": repeat} for r in cell_trials(server, group, w, cell, logs)]
        how = {"count": a.latency_jobs, "workers": a.latency_workers, "spacing": a.latency_spacing, "logs": logs}
        latency = [pickup_latency(server, s, **how) for s in systems if a.latency_jobs > 0 and spec.pickup(s)]
        bare = spec.bare_loops if a.bare_seconds > 0 else {}
        loops = {k: bare_loop(server, workers, a.bare_seconds, env) for k, env in bare.items()}
    finally:
        close_all(systems)
        server.close()
    return {
        "redis_version": server.version,
        "settings": {s.name: {"describe": s.describe(), "per_process": s.per_process()} for s in systems},
        "runs": runs,
        "latency": latency,
        "bare_loop": loops,
        "ok": all(exactly_once(r) for r in runs),
    }


def summary(
    data: dict[str, Any],
    title: str,
    targets: list[str],
    *,
    options: str = "",
    job: str,
    setup: str,
    bare_what: str,
    before_after: tuple[float, str] = (0.9, "costs at most 10% of the baseline's throughput"),
    per_process: bool = False,
) -> str:
    """``before_after``: the ratio to the baseline at W=2 to reach, and that target in words."""
    a = data["args"]
    about = (
        f"{a[options + 'jobs']:,} jobs per trial, {job}; W = {a['workers']}; time limit {a[options + 'max_seconds']:g}"
        f" s per trial; a cell's trials run for {a[options + 'cell_seconds']:g} s (at most {a['trials']}); repeats: "
        f"{a['repeat']}"
    )
    L = [*report.header(data, title, [about, setup]), "## Targets\n", *targets, *report.latency_targets(data)]
    L += [report.once_target(data["runs"]), "", *report.baseline_section(data, *before_after)]
    L += ["## Throughput and cost per job\n", *report.throughput_table(data, per_process), *report.repeat_table(data)]
    L += report.latency_table(data) + report.bare_loop_lines(data, bare_what) + report.settings_list(data)
    return "\n".join(L)
