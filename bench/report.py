"""Markdown tables and plots from a measurement's raw data. A summary is current, not a log: the run's
date, commit and machine, its targets checked, its tables."""

# ruff: noqa: PLC0415  (matplotlib is optional)
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import fmt, median
from drain import exactly_once

Cells = dict[tuple[str, int], list[dict[str, Any]]]  # (system, W) -> its trials, every repeat
COSTS = {"startup_seconds": 2, "worker_cpu_ms_per_job": 3, "redis_cpu_ms_per_job": 3, "redis_commands_per_job": 1}


def by_cell(runs: list[dict[str, Any]]) -> Cells:
    out: Cells = defaultdict(list)
    for r in runs:
        out[(r["system"], r["workers"])].append(r)
    return out


def cost(rs: list[dict[str, Any]], key: str) -> float | None:
    return median(r.get(key) for r in rs)


def steady(rs: list[dict[str, Any]]) -> float | None:
    return cost(rs, "steady_jobs_per_s")


def at_w(data: dict[str, Any], w: int) -> dict[str, float | None]:
    """Each system's steady jobs/s at W=``w`` (no baseline twin)."""
    return {s: steady(rs) for (s, ws), rs in by_cell(data["runs"]).items() if ws == w and "@" not in s}


def bare(data: dict[str, Any], loop: str, w: int = 2) -> float | None:
    """Jobs/s of the no-queue ``loop`` at W=``w``."""
    rate: float | None = (data.get("bare_loop") or {}).get(loop, {}).get(f"W={w}")
    return rate


def range_text(rs: list[dict[str, Any]]) -> str:
    rates = [r["steady_jobs_per_s"] for r in rs if r["steady_jobs_per_s"] is not None]
    return f"{min(rates):,.0f} to {max(rates):,.0f}" if len(rates) > 1 else "-"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def table(cols: list[str], rows: list[list[str]]) -> list[str]:
    """The first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    return [*lines, *("| " + " | ".join(row) + " |" for row in rows), ""]


def header(data: dict[str, Any], title: str, about: list[str]) -> list[str]:
    m0, m1, code = data["machine_before"], data["machine_after"], data["code"]
    changed = " plus uncommitted changes to shared/ or worker/" if code.get("code_changed") else ""
    ticks0, ticks1 = m0.get("cpu_ticks") or {}, m1.get("cpu_ticks") or {}
    total = sum(ticks1.values()) - sum(ticks0.values())
    steal = f"; CPU steal {100 * (ticks1['steal'] - ticks0['steal']) / total:.1f}%" if total > 0 else ""
    versions = f"redis-server {data.get('redis_version', '-')}, redis-py {data.get('redis_py', '-')}"
    ceiling = data.get("evalsha_ceiling")
    host = (
        [
            f"- this host's Redis ceiling: EVALSHA of `return 1`, {ceiling['1']:,.0f}/s one at a time, "
            f"{ceiling['32']:,.0f}/s 32 pipelined (redis-benchmark, a bare redis-server, before the run)"
        ]
        if ceiling
        else []
    )
    return [
        f"# {title}\n",
        f"- run: {m0['date']}, commit {code['head'][:12]}{changed}, {data['seconds']:.0f} s: `{data['command']}`",
        f"- machine: {m0['nproc']} cores, {m0['platform']}; {versions}",
        f"- load average (1, 5, 15 min): before {m0['load_avg']}, after {m1['load_avg']}{steal}",
        *host,
        *(f"- {line}" for line in about),
        "",
    ]


def once_text(rs: list[dict[str, Any]]) -> str:
    if not all(exactly_once(r) for r in rs):
        dup, missing = sum(r["duplicates"] for r in rs), sum(r["missing"] for r in rs)
        return f"**no**: {dup} duplicates, {missing} missing" + (", stalled" if any(r["stalled"] for r in rs) else "")
    return "yes" if all(r["complete"] for r in rs) else "no duplicate (time limit)"


def throughput_table(data: dict[str, Any], per_process: bool = False) -> list[str]:
    cells, suffix = by_cell(data["runs"]), baseline_suffix(data)
    cols = ["system", "W"] + (["jobs at once per process"] if per_process else [])
    cols += ["enqueue jobs/s", "drain jobs/s", "steady jobs/s", "steady range (trials)"]
    cols += (["vs baseline"] if suffix else []) + ["start-up s", "worker CPU ms/job", "Redis CPU ms/job"]
    cols += ["Redis cmds/job", "Redis busy", "exactly once"]
    rows = []
    for (s, w), rs in cells.items():
        star = "" if all(r["complete"] for r in rs) else "*"
        row = [s, str(w)] + ([data["settings"][s]["per_process"]] if per_process else [])
        row += [fmt(cost(rs, "enqueue_jobs_per_s")), fmt(cost(rs, "drain_jobs_per_s")) + star, fmt(steady(rs)) + star]
        row.append(f"{range_text(rs)} ({len(rs)})")
        if suffix:
            ratio = vs_baseline(cells, s, w, suffix)
            row.append("baseline" if s.endswith(suffix) else f"{ratio:.2f}x" if ratio else "-")
        row += [fmt(cost(rs, k), d) for k, d in COSTS.items()]
        busy = cost(rs, "redis_cpu_utilisation")
        rows.append([*row, fmt(busy and 100 * busy) + "%", once_text(rs)])
    note = "Medians of each cell's trials; steady range: their lowest and highest. `*`: cut by the time limit, "
    return [*table(cols, rows), note + "rates over what ran in it.\n"]


def repeat_table(data: dict[str, Any]) -> list[str]:
    repeats = data["args"]["repeat"]
    if repeats < 2:
        return []
    rows = []
    for (s, w), rs in by_cell(data["runs"]).items():
        vals = [v for v in (steady([r for r in rs if r["repeat"] == i]) for i in range(repeats)) if v is not None]
        spread = (max(vals) - min(vals)) / (sum(vals) / len(vals)) if len(vals) > 1 and sum(vals) else None
        rows.append([s, str(w), *(fmt(v) for v in vals), fmt(spread and 100 * spread) + "%"])
    cols = ["system", "W", *(f"run {i + 1}" for i in range(repeats)), "spread"]
    about = "Steady jobs/s of each repeat (the median of its trials); spread: (max - min) / mean.\n"
    return ["## Repeatability\n", about, *table(cols, rows)]


def latency_table(data: dict[str, Any]) -> list[str]:
    if not data.get("latency"):
        return []
    a, rows = data["args"], []
    for lat in data["latency"]:
        stats = [f"{lat[k]:.2f}" for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")] if "p50_ms" in lat else []
        rows.append([lat["system"], *stats, f"{lat['ran']}/{lat['jobs']}"] if stats else [lat["system"], lat["error"]])
    about = (
        f"{a['latency_jobs']} jobs enqueued one at a time, {1000 * a['latency_spacing']:g} ms apart, to "
        f"{a['latency_workers']} idle worker process(es): from the producer call to the job's first line.\n"
    )
    return ["## Idle pick-up latency\n", about, *table(["system", "p50 ms", "p90 ms", "p99 ms", "max ms", "ran"], rows)]


def latency_targets(data: dict[str, Any]) -> list[str]:
    return [
        f"- idle pick-up p50 under 5 ms: {lat['system']} {lat['p50_ms']:.2f} ms (p99 {lat['p99_ms']:.2f}): "
        + verdict(lat["p50_ms"] < 5)
        for lat in data.get("latency", [])
        if lat["system"].startswith("setqueue") and "@" not in lat["system"] and "p50_ms" in lat
    ]


def once_target(runs: list[dict[str, Any]]) -> str:
    ok, done = all(exactly_once(r) for r in runs), sum(r["complete"] for r in runs)
    return (
        f"- every job ran exactly once (INCR counter = jobs) in every trial: {'yes' if ok else '**no**'} "
        f"({len(runs)} trials, {done} drained within the time limit)"
    )


def bare_loop_lines(data: dict[str, Any], what: str) -> list[str]:
    loops = data.get("bare_loop") or {}
    if not loops:
        return []
    ws = list(next(iter(loops.values())))
    rows = [[mode, *(fmt(v.get(w)) for w in ws)] for mode, v in loops.items()]
    about = f"W processes running {what}, no queue (workers/bench_bare_loop.py), jobs/s:\n"
    return ["## The job with no queue at all\n", about, *table(["loop", *ws], rows)]


def settings_list(data: dict[str, Any]) -> list[str]:
    return ["## Settings\n", *(f"- **{s}**: {st['describe']}" for s, st in data["settings"].items()), ""]


def baseline_suffix(data: dict[str, Any]) -> str:
    """'@<sha>', what a baseline twin's name ends with; '' without --baseline."""
    b = data.get("baseline")
    return f"@{b['label']}" if b else ""


def vs_baseline(cells: Cells, system: str, workers: int, suffix: str) -> float | None:
    mine, twin = cells.get((system, workers)), cells.get((system + suffix, workers))
    a, b = (steady(mine) if mine else None), (steady(twin) if twin else None)
    return a / b if a and b and "@" not in system else None


def baseline_section(data: dict[str, Any], floor: float, target: str) -> list[str]:
    """Every setqueue system against its twin, cell by cell; at W=2 the ratio must reach ``floor``."""
    suffix = baseline_suffix(data)
    if not suffix:
        return []
    b, cells, rows, checks = data["baseline"], by_cell(data["runs"]), [], []
    for (s, w), rs in cells.items():
        if (ratio := vs_baseline(cells, s, w, suffix)) is None:
            continue
        twin = cells[(s + suffix, w)]
        both = [fmt(cost(x, k), 3) for k in ("worker_cpu_ms_per_job", "redis_cpu_ms_per_job") for x in (rs, twin)]
        rates = [f"{fmt(steady(x))} ({range_text(x)})" for x in (rs, twin)]
        rows.append([s, str(w), *rates, f"**{ratio:.2f}x**", f"{both[0]} vs {both[1]}", f"{both[2]} vs {both[3]}"])
        if w == 2:
            checks.append(f"- {s}, W=2, {target}: {ratio:.2f}x: {verdict(ratio >= floor)}")
    about = (
        f"`setqueue{suffix}` runs {b['ref']}'s code (a worktree in bench/.baseline/, its own workers and producer) "
        "on the same redis-server with the same settings, the two taking turns trial by trial. Ratio: this "
        "checkout's steady jobs/s over the baseline's (medians). Redis memory per job of both trees: memory.md.\n"
    )
    cols = ["system", "W", "this checkout jobs/s (range)", "baseline (range)", "ratio", "worker CPU ms/job"]
    L = [f"## Before and after: this checkout against {b['ref']} ({b['sha'][:12]})\n", about]
    return [*L, *table([*cols, "Redis CPU ms/job"], rows), *checks, ""]


# The charts' palette: matplotlib's ten line colours, black, white and two greys (text edges, grid).
# Quantized to it, a chart is a fifth of matplotlib's bytes and every line keeps its own colour.
_PALETTE = "1f77b4ff7f0e2ca02cd627289467bd8c564be377c27f7f7fbcbd2217becf000000ffffff595959dddddd"


def chart(path: Path, height: float, draw: Callable[[Any], None]) -> bool:
    """``draw`` on a 10-inch wide chart, saved as a PNG on :data:`_PALETTE`; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from PIL import Image
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(10, height))
    draw(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    palette = Image.new("P", (1, 1))
    palette.putpalette(bytes.fromhex(_PALETTE))
    with Image.open(path) as drawn:
        small = drawn.convert("RGB").quantize(palette=palette, dither=Image.Dither.NONE)
    small.save(path, optimize=True)
    return True


def plot_by_workers(data: dict[str, Any], path: Path) -> bool:
    """Steady jobs/s against W, one line per system (log scale)."""
    cells, m = by_cell(data["runs"]), data["machine_before"]

    def draw(ax: Any) -> None:
        for s in dict.fromkeys(s for s, _ in cells):
            ws, ours = sorted(w for (name, w) in cells if name == s), s.startswith("setqueue")
            style = ("-." if "@" in s else "-") if ours else ("--" if "-c" in s else ":")
            rates = [steady(cells[(s, w)]) or 0 for w in ws]
            ax.plot(ws, rates, marker="o", linestyle=style, lw=2.2 if ours else 1.4, label=s)
        ax.set(xlabel="worker processes (W)", ylabel="steady drain, jobs/s (median)", yscale="log")
        ax.set_xticks(sorted({w for _, w in cells}))
        ax.set_title(f"{data['title']}; redis {data['redis_version']}, {m['nproc']} cores, {m['date']}", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    return chart(path, 4.8, draw)
