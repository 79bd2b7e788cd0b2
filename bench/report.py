"""bench/results/<tag>.md and throughput.png from the raw numbers."""

# ruff: noqa: PLC0415  (matplotlib is optional)
from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def fmt(v: Any, digits: int = 0) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def by_key(runs: list[dict]) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in runs:
        out[(r["system"], r["workers"])].append(r)
    return out


def median(values: list[float | None]) -> float | None:
    """What a cell reports: the median of its trials (and repeats); see run.cell_trials."""
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def spread(values: list[float | None]) -> float | None:
    """(max - min) / mean of the repeats, as a fraction."""
    vals = [v for v in values if v is not None]
    if len(vals) < 2 or not statistics.fmean(vals):
        return None
    return (max(vals) - min(vals)) / statistics.fmean(vals)


def busy(rs: list[dict]) -> float | None:
    return median([100 * r["redis_cpu_utilisation"] if "redis_cpu_utilisation" in r else None for r in rs])


def steady(rs: list[dict]) -> float | None:
    return median([r["steady_jobs_per_s"] for r in rs])


def steal_percent(data: dict) -> float | None:
    """Share of the machine's CPU time the hypervisor gave to others during the run."""
    t0, t1 = data["machine_before"].get("cpu_ticks"), data["machine_after"].get("cpu_ticks")
    if not t0 or not t1 or "steal" not in t0:
        return None
    total = sum(t1.values()) - sum(t0.values())
    return 100 * (t1["steal"] - t0["steal"]) / total if total > 0 else None


PEERS = ("rq", "rq-simple", "dramatiq", "celery", "arq", "saq")

# The run the CPU-trivial targets were set on (bench/results/latest.md of 2026-11-22, in git
# history): what the machine-bound figures showed then, to tell how fast this machine is today.
REFERENCE = {
    "date": "2026-11-22",
    "setqueue_w2": 13_397,
    "dramatiq_w2": 4_189,
    "python_incr_loop_w2": 37_281,
    "redis_incr_p1": 83_857,
}
TITLES = {
    "cpu": "CPU-trivial jobs (one INCR)",
    "io": "I/O-bound jobs (a {ms:g} ms wait, then one INCR)",
}


def matrix_runs(data: dict, matrix: str) -> list[dict]:
    return [r for r in data["runs"] if r.get("matrix", "cpu") == matrix]


def matrix_settings(data: dict) -> dict[str, dict[str, dict[str, str]]]:
    """{matrix: {system: settings}}; results written before the I/O matrix have one level less."""
    if "matrices" in data:
        return data["settings"]
    return {"cpu": data["settings"]}


def verdict(ok: bool) -> str:
    return f"**{'met' if ok else 'not met'}**"


def cpu_targets(data: dict, groups: dict[tuple[str, int], list[dict]]) -> list[str]:
    out: list[str] = []
    sq = groups.get(("setqueue", 2))
    sq_rate = steady(sq) if sq else None
    if sq_rate is None:
        return out
    out.append(
        f"- CPU-trivial, steady drain, W=2, at least 13,000 jobs/s: setqueue {sq_rate:,.0f} jobs/s: "
        + verdict(sq_rate >= 13_000)
    )
    dq = groups.get(("dramatiq", 2))
    dq_rate = steady(dq) if dq else None
    if dq_rate:
        ratio = sq_rate / dq_rate
        out.append(
            f"- CPU-trivial, steady drain, W=2, at least 3x Dramatiq: dramatiq {dq_rate:,.0f} jobs/s, setqueue "
            f"{ratio:.1f}x: {verdict(ratio >= 3)}"
        )
    peers = {s: steady(groups[(s, 2)]) for s in PEERS if (s, 2) in groups}
    peers = {s: v for s, v in peers.items() if v is not None}
    if peers:
        best = max(peers, key=lambda s: peers[s])
        out.append(
            f"  - fastest peer at W=2 in this run: {best} {peers[best]:,.0f} jobs/s (setqueue "
            f"{sq_rate / peers[best]:.1f}x)"
            if peers[best]
            else f"  - fastest peer: {best}"
        )
    floor = ((data.get("ceiling") or {}).get("python_incr_loop") or {}).get("W=2")
    if floor:
        speed = floor / REFERENCE["python_incr_loop_w2"]
        out.append(
            f"  - this machine today: the INCR-only Python loop with 2 processes does {floor:,.0f}/s against "
            f"{REFERENCE['python_incr_loop_w2']:,} on {REFERENCE['date']} (the day setqueue did "
            f"{REFERENCE['setqueue_w2']:,} and Dramatiq {REFERENCE['dramatiq_w2']:,}): {speed:.2f}x that day's speed, "
            f"so 13,000 then is about {13_000 * speed:,.0f} now; setqueue did "
            f"{sq_rate / REFERENCE['setqueue_w2']:.2f}x its {REFERENCE['date']} figure, Dramatiq "
            + (f"{dq_rate / REFERENCE['dramatiq_w2']:.2f}x its." if dq_rate else "not run.")
        )
    return out


def io_targets(data: dict, groups: dict[tuple[str, int], list[dict]]) -> list[str]:
    out: list[str] = []
    c = data["args"].get("concurrency")
    equal = {s: steady(rs) for (s, w), rs in groups.items() if w == 2 and s.endswith(f"-c{c}")}
    equal = {s: v for s, v in equal.items() if v}
    defaults = {s: steady(rs) for (s, w), rs in groups.items() if w == 2 and s in PEERS}
    defaults = {s: v for s, v in defaults.items() if v}
    best = max(equal, key=lambda s: equal[s]) if equal else None
    for name in ("setqueue-async", "setqueue-threads"):
        rs = groups.get((name, 2))
        rate = steady(rs) if rs else None
        if rate is None:
            continue
        if name == "setqueue-async":
            out.append(
                f"- I/O-bound, steady drain, W=2, at least 5,000 jobs/s with the async handler: {name} "
                f"{rate:,.0f} jobs/s: {verdict(rate >= 5_000)}"
            )
        if best is not None:
            ratio = rate / equal[best]
            out.append(
                f"- I/O-bound, W=2, {name} at least 3x the fastest peer at equal concurrency ({c} per process): "
                f"fastest {best} {equal[best]:,.0f} jobs/s, {name} {rate:,.0f} = {ratio:.1f}x: {verdict(ratio >= 3)}"
            )
    if best is not None:
        cpu = {
            s: median([r.get("worker_cpu_ms_per_job") for r in groups[(s, 2)]])
            for s in ("setqueue-async", "setqueue-threads", best)
            if (s, 2) in groups
        }
        out.append(
            "  - worker CPU per job at W=2 (less sensitive to the machine's load than jobs/s): "
            + ", ".join(f"{s} {fmt(v, 3)} ms" for s, v in cpu.items())
        )
    floor = data.get("io_floor") or {}
    if floor.get("async", {}).get("W=2"):
        out.append(
            f"  - the same job with no queue at all (W=2, {c} loops per process): async "
            f"{floor['async']['W=2']:,.0f} jobs/s, threads {floor.get('threads', {}).get('W=2', 0):,.0f} jobs/s: "
            "a reference for the job's own cost here (measured once, after the matrices)"
        )
    if defaults:
        top = max(defaults, key=lambda s: defaults[s])
        out.append(f"  - fastest peer at its defaults, W=2: {top} {defaults[top]:,.0f} jobs/s")
    return out


def targets(data: dict) -> list[str]:
    """The targets, checked against this run."""
    out = ["## Targets\n"]
    matrices = data.get("matrices", ["cpu"])
    if "cpu" in matrices:
        out.extend(cpu_targets(data, by_key(matrix_runs(data, "cpu"))))
    if "io" in matrices:
        out.extend(io_targets(data, by_key(matrix_runs(data, "io"))))
    for lat in data["latency"]:
        if lat["system"].startswith("setqueue") and "p50_ms" in lat:
            where = (
                f"CPU matrix, CONCURRENCY={data['args'].get('cpu_concurrency', 1)}"
                if lat.get("matrix", "cpu") == "cpu"
                else "I/O matrix settings"
            )
            out.append(
                f"- idle pick-up p50 under 5 ms: {lat['system']} ({where}) p50 {lat['p50_ms']:.2f} ms "
                f"(p99 {lat['p99_ms']:.2f} ms): {verdict(lat['p50_ms'] < 5)}"
            )
    out.append("- setqueue ran with metrics served (METRICS_PORT) and lease renewal on: yes (the real worker)")
    out.append("")
    return out


# -- before and after: --baseline ------------------------------------------------------------------

Groups = dict[tuple[str, int], list[dict[str, Any]]]  # by_key: (system, W) -> its trials


def baseline_suffix(data: dict[str, Any]) -> str:
    """'@<sha>', what a baseline system's name ends with, when the run had --baseline; else ''."""
    b = data.get("baseline")
    return f"@{b['label']}" if b else ""


def vs_baseline(groups: Groups, system: str, workers: int, suffix: str) -> float | None:
    """Steady jobs/s of ``system`` over its baseline twin's at W (medians of their trials)."""
    mine, twin = groups.get((system, workers)), groups.get((system + suffix, workers))
    if not suffix or "@" in system or not mine or not twin:
        return None
    a, b = steady(mine), steady(twin)
    return a / b if a and b else None


def trial_range(rs: list[dict[str, Any]]) -> tuple[float, float] | None:
    rates = [r["steady_jobs_per_s"] for r in rs if r["steady_jobs_per_s"] is not None]
    return (min(rates), max(rates)) if rates else None


def compare_line(groups: Groups, system: str, suffix: str, workers: int) -> str | None:
    """One system against its baseline at W: rates, trial ranges, CPU per job, ratio."""
    ratio = vs_baseline(groups, system, workers, suffix)
    if ratio is None:
        return None
    mine, twin = groups[(system, workers)], groups[(system + suffix, workers)]
    r1, r2 = trial_range(mine), trial_range(twin)
    if len(mine) < 2 or len(twin) < 2 or r1 is None or r2 is None:
        spread_note = " (one trial: no spread to compare with)"
    elif r1[0] <= r2[1] and r2[0] <= r1[1]:
        spread_note = " (the trial ranges overlap)"
    else:
        spread_note = " (the trial ranges do not overlap)"

    def trials(rs: list[dict[str, Any]], rng: tuple[float, float] | None) -> str:
        n = f"{len(rs)} trial{'s' if len(rs) > 1 else ''}"
        return f"{n}, {rng[0]:,.0f} to {rng[1]:,.0f}" if rng and len(rs) > 1 else n

    def cost(rs: list[dict[str, Any]], key: str) -> str:
        return fmt(median([r.get(key) for r in rs]), 3)

    return (
        f"{system} {fmt(steady(mine))} jobs/s ({trials(mine, r1)}), {system}{suffix} {fmt(steady(twin))} "
        f"({trials(twin, r2)}): **{ratio:.2f}x**{spread_note}; worker CPU ms/job "
        f"{cost(mine, 'worker_cpu_ms_per_job')} vs {cost(twin, 'worker_cpu_ms_per_job')}, "
        f"Redis CPU ms/job {cost(mine, 'redis_cpu_ms_per_job')} vs {cost(twin, 'redis_cpu_ms_per_job')}"
    )


def baseline_section(data: dict[str, Any]) -> list[str]:
    """The issue's before/after targets, when the run had --baseline."""
    suffix = baseline_suffix(data)
    if not suffix:
        return []
    b, code = data["baseline"], data.get("code") or {}
    changed = " plus uncommitted changes to shared/ or worker/" if code.get("code_changed") else ""
    L = [f"## Before and after: this checkout against setqueue at {b['ref']}\n"]
    L.append(
        f"`setqueue{suffix}` runs the code of {b['ref']} ({b['sha'][:12]}, a git worktree in bench/.baseline/): its "
        "own workers and its own producer (Queue.enqueue in a process of that tree's code). `setqueue` runs this "
        f"checkout ({str(code.get('head', '?'))[:12]}{changed}). Same redis-server, same settings, the two taking "
        "turns trial by trial in each cell. Ratio = this checkout's steady jobs/s over the baseline's (medians of "
        "the trials).\n"
    )
    cpu = by_key(matrix_runs(data, "cpu"))
    line = compare_line(cpu, "setqueue", suffix, 2)
    if line:
        ratio = vs_baseline(cpu, "setqueue", 2, suffix) or 0.0
        L.append(f"- CPU-trivial, W=2, costs at most 10% of the baseline's throughput: {line}: {verdict(ratio >= 0.9)}")
    io = by_key(matrix_runs(data, "io"))
    for name in ("setqueue-async", "setqueue-threads"):
        line = compare_line(io, name, suffix, 2)
        if line:
            ratio = vs_baseline(io, name, 2, suffix) or 0.0
            L.append(f"- I/O-bound, W=2, no lower than the baseline: {line}: {verdict(ratio >= 1.0)}")
    mem = {m["tree"]: m for m in data.get("memory") or [] if "error" not in m}
    now, then = mem.get("setqueue"), mem.get(f"setqueue{suffix}")
    if now and then:
        L.append(
            "- Redis memory per job (used_memory delta, bench/memory.py): queued "
            f"{then['queued']['bytes_per_job']:,.0f} -> {now['queued']['bytes_per_job']:,.0f} B, kept in done "
            f"{then['done']['bytes_per_job']:,.0f} -> {now['done']['bytes_per_job']:,.0f} B (baseline -> this "
            "checkout; see Redis memory per job below)"
        )
    ws = sorted({w for (s, w) in cpu | io if s.startswith("setqueue") and w != 2})
    if ws:
        L.append(f"- other W ({', '.join(map(str, ws))}): the `vs baseline` column of the tables below")
    L.append("")
    return L


def memory_table(memory: list[dict[str, Any]]) -> list[str]:
    """Redis memory per job of each code tree (bench/memory.py)."""
    ok = [m for m in memory if "error" not in m]
    L = ["## Redis memory per job\n"]
    if ok:
        m0 = ok[0]
        L.append(
            f"{m0['jobs']:,} jobs with ids of {m0['id_length']} characters, no payload (bench/memory.py), each code "
            f"tree on a fresh redis-server {m0['redis_version']}: enqueued with its Queue.enqueue, then all claimed "
            "and acked (claim(500), ack_many) with a retention that keeps every id in done. `used_memory`: the INFO "
            "used_memory delta from the empty server (scripts loaded) over N, read after dropping what expires by "
            "itself (the req:<id> resend results, the wake list); `MEMORY USAGE`: the queue's keys summed "
            "(SAMPLES 0: every element).\n"
        )
    L.append(
        "| code | queued: used_memory B/job | queued: MEMORY USAGE B/job | kept in done: used_memory B/job | "
        "kept in done: MEMORY USAGE B/job |"
    )
    L.append("|---|---:|---:|---:|---:|")
    for m in memory:
        if "error" in m:
            L.append(f"| {m['tree']} | failed: {m['error'].splitlines()[-1] if m['error'] else '?'} | | | |")
            continue
        q, d = m["queued"], m["done"]
        L.append(
            f"| {m['tree']} | {q['bytes_per_job']:,.1f} | {q['memory_usage_bytes_per_job']:,.1f} | "
            f"{d['bytes_per_job']:,.1f} | {d['memory_usage_bytes_per_job']:,.1f} |"
        )
    L.append("")
    if ok:
        L.append("By key: MEMORY USAGE over N, bytes per job (type, elements):\n")
        keys = list(dict.fromkeys(k for m in ok for st in ("queued", "done") for k in m[st]["keys"]))
        L.append("| key | " + " | ".join(f"{m['tree']} {st}" for m in ok for st in ("queued", "done")) + " |")
        L.append("|---|" + "---:|" * (2 * len(ok)))
        for k in keys:
            cells = []
            for m in ok:
                for st in ("queued", "done"):
                    v = m[st]["keys"].get(k)
                    cells.append("-" if v is None else f"{v['bytes'] / m['jobs']:,.1f} ({v['type']}, {v['count']:,})")
            L.append(f"| {k} | " + " | ".join(cells) + " |")
        L.append("")
    return L


def throughput_table(data: dict, matrix: str) -> list[str]:
    runs = matrix_runs(data, matrix)
    groups = by_key(runs)
    systems = list(dict.fromkeys(r["system"] for r in runs))
    per_process = {n: st.get("per_process", "") for n, st in matrix_settings(data).get(matrix, {}).items()}
    suffix = baseline_suffix(data)
    L: list[str] = []
    io = matrix == "io"
    head = "| system | W |" + (" jobs at once per process |" if io else "")
    head += " enqueue jobs/s | drain jobs/s | steady jobs/s | trials | steady range |"
    head += " vs baseline |" if suffix else ""
    head += (
        " start-up s | worker CPU ms/job | Redis CPU ms/job | Redis cmds/job | Redis CPU busy | "
        "executed (dup/missing) |"
    )
    L.append(head)
    L.append(
        "|---|---:|"
        + ("---|" if io else "")
        + "---:|---:|---:|---:|---:|"
        + ("---:|" if suffix else "")
        + "---:|---:|---:|---:|---:|---|"
    )
    for s in systems:
        for w in sorted({r["workers"] for r in runs if r["system"] == s}):
            rs = groups[(s, w)]
            star = "" if all(r["complete"] for r in rs) else "*"
            executed = "; ".join(
                f"{r['executed']:,}" + (f" ({r['duplicates']}/{r['missing']})" if r["complete"] else " (partial)")
                for r in rs
            )
            rates = [r["steady_jobs_per_s"] for r in rs if r["steady_jobs_per_s"] is not None]
            low_high = f"{min(rates):,.0f} to {max(rates):,.0f}" if len(rates) > 1 else "-"
            ratio = vs_baseline(groups, s, w, suffix)
            versus = "baseline" if suffix and s.endswith(suffix) else ("-" if ratio is None else f"{ratio:.2f}x")
            L.append(
                f"| {s} | {w} | "
                + (f"{per_process.get(s, '')} | " if io else "")
                + f"{fmt(median([r['enqueue_jobs_per_s'] for r in rs]))} | "
                f"{fmt(median([r['drain_jobs_per_s'] for r in rs]))}{star} | "
                f"{fmt(steady(rs))}{star} | {len(rs)} | {low_high} | "
                + (f"{versus} | " if suffix else "")
                + f"{fmt(median([r['startup_seconds'] for r in rs]), 2)} | "
                f"{fmt(median([r.get('worker_cpu_ms_per_job') for r in rs]), 3)} | "
                f"{fmt(median([r.get('redis_cpu_ms_per_job') for r in rs]), 3)} | "
                f"{fmt(median([r.get('redis_commands_per_job') for r in rs]), 1)} | "
                f"{fmt(busy(rs))}% | "
                f"{executed} |"
            )
    L.append("")
    return L


def repeat_table(data: dict, matrix: str) -> list[str]:
    args = data["args"]
    groups = by_key(matrix_runs(data, matrix))
    L = ["### Repeatability (steady jobs/s of each repeat: the median of its trials)\n"]
    L.append(
        "| system | W | " + " | ".join(f"run {i + 1}" for i in range(args["repeat"])) + " | spread | within 15%? |"
    )
    L.append("|---|---:|" + "---:|" * args["repeat"] + "---:|---|")
    for (s, w), rs in groups.items():
        vals = [steady([r for r in rs if r["repeat"] == rep]) for rep in range(args["repeat"])]
        sp = spread(vals)
        ok = "-" if sp is None else ("yes" if sp <= 0.15 else "**no**")
        L.append(
            f"| {s} | {w} | "
            + " | ".join(fmt(v) for v in vals)
            + f" | {fmt(None if sp is None else 100 * sp)}% | {ok} |"
        )
    L.append("")
    return L


def write_markdown(data: dict, path: Path) -> None:
    m0, m1 = data["machine_before"], data["machine_after"]
    args = data["args"]
    matrices = data.get("matrices", ["cpu"])
    io_ms = 1000 * args.get("io_seconds", 0.01)
    L: list[str] = []
    L.append("# setqueue benchmark results\n")
    L.append(f"- date: {m0['date']}; run took {data['seconds']:.0f} s")
    L.append(f"- machine: nproc {m0['nproc']}, {m0['arch']}, Linux {m0['kernel']}, Python {m0['python']}")
    L.append(f"- redis-server {data['redis_version']} (persistence off, loopback), redis-py {data['redis_py']}")
    L.append(f"- load average before: {m0['load_avg']}, after: {m1['load_avg']} (1, 5, 15 min)")
    steal = steal_percent(data)
    if steal is not None:
        L.append(f"- CPU steal (time the hypervisor gave this VM's cores to others) during the run: {steal:.1f}%")
    if "cpu" in matrices:
        L.append(
            f"- CPU-trivial matrix: {args['jobs']:,} jobs per run (each one Redis INCR), time limit "
            f"{args['max_seconds']:g} s per run"
        )
    if "io" in matrices:
        c = args["concurrency"]
        L.append(
            f"- I/O-bound matrix: {args['io_jobs']:,} jobs per run (each waits {io_ms:g} ms, then one Redis INCR), "
            f"time limit {args['io_max_seconds']:g} s per run; shared concurrency C = {c} jobs at once per worker "
            f"process ({c} slots / {io_ms:g} ms = {1000 * c / io_ms:,.0f} jobs/s per process at most)"
        )
    L.append(
        f"- workers {args['workers']}; each cell runs trials until they took {args.get('cell_seconds', 0):g} s "
        + (f"({args['io_cell_seconds']:g} s in the I/O matrix) " if "io" in matrices else "")
        + f"(at most {args.get('trials', 1)}; one when it hits the time limit) and reports their median; repeats "
        f"of each matrix: {args['repeat']}"
    )
    for m in matrices:
        loads = [r["load_1min"] for r in matrix_runs(data, m) if "load_1min" in r]
        if loads:
            L.append(
                f"- 1-minute load average at the start of each {m} trial: median {statistics.median(loads):.1f}, "
                f"from {min(loads):.1f} to {max(loads):.1f} (2 cores: above 2 means something else was running too)"
            )
    if data.get("baseline"):
        b = data["baseline"]
        L.append(f"- baseline: setqueue at {b['ref']} ({b['sha'][:12]}) as `setqueue{baseline_suffix(data)}`")
    L.append("")
    L.extend(targets(data))
    L.extend(baseline_section(data))
    L.append(
        "enqueue: jobs/s of the system's producer API; drain: jobs/s from spawning the first worker to the last "
        "job executed (includes start-up); steady: jobs/s between 10% and 90% executed (counter sampled every "
        "5 ms). CPU and commands per job are measured from the first job executed to the end. "
        "`*` = did not finish within the time limit: drain and steady are over what ran in it. Every figure "
        "is the median of the cell's trials; `steady range` is their lowest and highest. executed: the INCR "
        "counter after each trial (duplicates/missing).\n"
    )
    for m in matrices:
        L.append(f"## {TITLES[m].format(ms=io_ms)}: throughput and cost per job\n")
        if m == "cpu":
            L.append(
                f"setqueue: CONCURRENCY={args.get('cpu_concurrency', 1)} (1 = one job thread, the setting chosen for "
                f"CPU-trivial jobs), CLAIM_BATCH={args['claim_batch']}. Peers at their defaults.\n"
            )
        else:
            c = args["concurrency"]
            L.append(
                f"setqueue-threads: plain handler (time.sleep) on CONCURRENCY={c} threads; setqueue-async: async "
                f"handler (asyncio.sleep) on one event loop, up to {c} in flight; both CLAIM_BATCH="
                f"{args['io_claim_batch']}. Each peer at its defaults (`name`) and at {c} jobs at once per process "
                f"(`name-c{c}`: Dramatiq `--threads {c}`, arq `max_jobs={c}`, Celery `-P threads -c {c}` (W worker "
                f"processes), saq `concurrency={c}`). Threaded peers (Dramatiq, Celery) run the time.sleep job, "
                "asyncio peers (arq, saq) the asyncio.sleep one.\n"
            )
        L.extend(throughput_table(data, m))
        if args["repeat"] > 1:
            L.extend(repeat_table(data, m))
    if data.get("memory"):
        L.extend(memory_table(data["memory"]))
    cpu_groups = by_key(matrix_runs(data, "cpu"))
    if data["latency"]:
        L.append("## Idle pick-up latency\n")
        lw = args["latency_workers"]
        L.append(
            f"{args['latency_jobs']} jobs enqueued one at a time, {1000 * args['latency_spacing']:.0f} ms apart, "
            f"to {lw} idle worker process(es); enqueue (time.time() before the producer call) -> the job's first "
            "line (time.time(), before any wait), same machine clock. Every system at its CPU-matrix settings; "
            "setqueue also at its I/O-matrix settings.\n"
        )
        L.append("| system | settings | p50 ms | p90 ms | p99 ms | max ms | ran |")
        L.append("|---|---|---:|---:|---:|---:|---:|")
        for lat in data["latency"]:
            m = lat.get("matrix", "cpu")
            if "error" in lat:
                L.append(f"| {lat['system']} | {m} | {lat['error']} | | | | |")
                continue
            w1 = cpu_groups.get((lat["system"], lw)) if m == "cpu" else None
            rate = steady(w1) if w1 else None
            slow = rate is not None and rate < 1 / args["latency_spacing"]
            note = f" (drains {rate:,.0f} jobs/s < the arrival rate: includes queueing)" if slow else ""
            L.append(
                f"| {lat['system']}{note} | {m} matrix | {lat['p50_ms']:.2f} | {lat['p90_ms']:.2f} | "
                f"{lat['p99_ms']:.2f} | {lat['max_ms']:.2f} | {lat['ran']}/{lat['jobs']} |"
            )
        L.append("")
    ceil = data.get("ceiling")
    if ceil:
        L.append("## The ceiling: redis-benchmark on the same server\n")
        L.append(f"{ceil['clients']} clients, `-r 100000`; requests/s.\n")
        L.append("| command | -P 1 | -P 32 |")
        L.append("|---|---:|---:|")
        names = list(dict.fromkeys(k.rsplit(" -P ", 1)[0] for k in ceil["results"]))
        for n in names:
            L.append(f"| {n} | {fmt(ceil['results'].get(n + ' -P 1'))} | {fmt(ceil['results'].get(n + ' -P 32'))} |")
        L.append("")
        floor = ceil.get("python_incr_loop") or {}
        if floor:
            L.append(
                "A Python loop doing only the job's body (one INCR via redis-py, no queue), W processes: "
                + ", ".join(f"{k}: {v:,.0f}/s" for k, v in floor.items())
                + ". No worker whose job is one INCR round trip can beat this on this machine.\n"
            )
        sq = cpu_groups.get(("setqueue", 2))
        incr = ceil["results"].get("INCR -P 1")
        if sq and incr:
            rate = steady(sq) or 0.0
            busy_ = busy(sq)
            floor2 = floor.get("W=2")
            L.append(
                f"setqueue W=2 steady {rate:,.0f} jobs/s (CPU-trivial) = {100 * rate / incr:.0f}% of "
                "redis-benchmark's unpipelined INCR rate (50 clients)"
                + (f", {100 * rate / floor2:.0f}% of the INCR-only Python loop with 2 processes" if floor2 else "")
                + (f"; Redis was {busy_:.0f}% busy (of one core) meanwhile" if busy_ is not None else "")
                + ".\n"
            )
    io_floor = data.get("io_floor")
    if io_floor:
        c = args["concurrency"]
        L.append("## The I/O job without a queue\n")
        L.append(
            f"W Python processes each running {c} loops of the I/O job's body alone ({io_ms:g} ms wait, then one "
            "INCR), no queue (bench/workers/bench_io_loop.py): as asyncio tasks on one event loop (asyncio.sleep, "
            "redis.asyncio) or as threads (time.sleep, redis-py). jobs/s; measured once, after the matrices: a "
            "reference for what the job itself costs here, not a hard bound (the machine's load moves it too).\n"
        )
        ws = list(next(iter(io_floor.values())).keys())
        L.append("| loops | " + " | ".join(ws) + " |")
        L.append("|---|" + "---:|" * len(ws))
        for mode, vals in io_floor.items():
            L.append(f"| {mode} | " + " | ".join(fmt(vals.get(w)) for w in ws) + " |")
        L.append("")
        io_groups = by_key(matrix_runs(data, "io"))
        for name, mode in (("setqueue-async", "async"), ("setqueue-threads", "threads")):
            rs = io_groups.get((name, 2))
            floor2 = io_floor.get(mode, {}).get("W=2")
            if rs and floor2 and steady(rs):
                L.append(
                    f"- {name} W=2: {steady(rs):,.0f} jobs/s = {100 * steady(rs) / floor2:.0f}% of the {mode} loop."
                )
        L.append("")
    L.append("## Settings\n")
    for m, sts in matrix_settings(data).items():
        if len(matrices) > 1 or m != "cpu":
            L.append(f"{TITLES[m].format(ms=io_ms)}:\n")
        for s, st in sts.items():
            L.append(f"- **{s}**: workers: {st['workers']}; enqueue: {st['enqueue']}")
        L.append("")
    L.append("## Redis commands per job, by command (first trial)\n")
    for r in data["runs"]:
        if r["repeat"] == 0 and r.get("trial", 0) == 0 and r.get("commands_per_job_by_name"):
            top = ", ".join(f"{k} {v}" for k, v in list(r["commands_per_job_by_name"].items())[:8])
            L.append(f"- {r.get('matrix', 'cpu')}: {r['system']} W={r['workers']}: {top}")
    L.append("")
    path.write_text("\n".join(L) + "\n")


def write_plot(data: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return  # the smoke test's environment has no matplotlib
    matrices = data.get("matrices", ["cpu"])
    io_ms = 1000 * data["args"].get("io_seconds", 0.01)
    fig, axes = plt.subplots(len(matrices), 1, figsize=(10, 4.6 * len(matrices)), squeeze=False)
    m = data["machine_before"]
    for ax, matrix in zip(axes[:, 0], matrices, strict=True):
        runs = matrix_runs(data, matrix)
        groups = by_key(runs)
        for s in dict.fromkeys(r["system"] for r in runs):
            ws = sorted({w for (sys_, w) in groups if sys_ == s})
            ys = [steady(groups[(s, w)]) or 0 for w in ws]
            style = ("-." if "@" in s else "-") if s.startswith("setqueue") else ("--" if "-c" in s else ":")
            ax.plot(ws, ys, marker="o", linestyle=style, linewidth=2.2 if s.startswith("setqueue") else 1.4, label=s)
        ax.set_xlabel("worker processes (W)")
        ax.set_ylabel("steady drain, jobs/s (median)")
        ax.set_yscale("log")
        ax.set_xticks(sorted({w for (_, w) in groups}))
        ax.set_title(
            f"{TITLES[matrix].format(ms=io_ms)}; redis {data['redis_version']}, {m['nproc']} cores, {m['date']}"
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- the cluster matrix: bench/cluster.py -------------------------------------------------------------


def deviation(values: list[float]) -> float | None:
    """The largest distance from an even split, as a fraction of the even share."""
    mean = statistics.fmean(values) if values else 0
    return max(abs(v / mean - 1) for v in values) if mean else None


def cluster_trial(data: dict[str, Any], r: dict[str, Any]) -> dict[str, Any] | None:
    """One trial's figures by node: CPU µs, commands per job and CPU busy share; per master the
    commands and jobs done, and their deviations from an even split over the masters."""
    jobs = r.get("window_jobs")
    if not jobs or "nodes" not in r:
        return None
    masters = sorted(int(m) for m in data["topology"])
    nodes = {int(p): d for p, d in r["nodes"].items()}
    out: dict[str, Any] = {
        "cpu_us": {p: 1e6 * d["cpu_seconds"] / jobs for p, d in nodes.items()},
        "cmds": {p: d["commands"] / jobs for p, d in nodes.items()},
        "busy": {p: 100 * d["cpu_seconds"] / d["seconds"] for p, d in nodes.items()},
    }
    out["masters_cpu_us"] = sum(out["cpu_us"][m] for m in masters)
    out["replicas_cpu_us"] = sum(v for p, v in out["cpu_us"].items() if p not in masters)
    out["masters_cmds"] = sum(out["cmds"][m] for m in masters)
    out["masters_waits"] = sum(nodes[m]["commands_by_name"].get("wait", 0) for m in masters) / jobs
    out["masters_scripts"] = sum(nodes[m]["commands_by_name"].get("evalsha", 0) for m in masters) / jobs
    out["busiest_master"] = max(out["busy"][m] for m in masters)
    held = data["placement"][str(r["shards"])]["shard_masters"]
    done = r.get("done_per_shard") or []
    out["jobs_by_master"] = {m: sum(n for n, at in zip(done, held, strict=True) if at == m) for m in masters}
    out["cmds_by_master"] = {m: nodes[m]["commands"] for m in masters}
    spread_out = set(held) == set(masters) and len(held) % len(masters) == 0
    out["jobs_dev"] = deviation(list(out["jobs_by_master"].values())) if spread_out and done else None
    out["cmds_dev"] = deviation(list(out["cmds_by_master"].values())) if spread_out else None
    return out


def cluster_cells(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each (shards, WAIT_REPLICAS) cell: the medians of its trials, and the worst split of any."""
    cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in data["runs"]:
        cells[r["system"]].append(r)
    out = []
    for name, rs in cells.items():
        trials = [t for t in (cluster_trial(data, r) for r in rs) if t is not None]
        ports = sorted({p for t in trials for p in t["cpu_us"]})
        cell: dict[str, Any] = {
            "name": name,
            "shards": rs[0]["shards"],
            "wait_replicas": rs[0]["wait_replicas"],
            "runs": rs,
            "steady": steady(rs),
            "range": trial_range(rs),
            "drain": median([r["drain_jobs_per_s"] for r in rs]),
            "enqueue": median([r["enqueue_jobs_per_s"] for r in rs]),
            "worker_cpu_us": median([1000 * r["worker_cpu_ms_per_job"] for r in rs if "worker_cpu_ms_per_job" in r]),
            "complete": all(r["complete"] and not r["duplicates"] and not r["missing"] for r in rs),
        }
        for key in ("cpu_us", "cmds", "busy"):
            cell[key] = {p: median([t[key].get(p) for t in trials]) for p in ports}
        for key in (
            "masters_cpu_us",
            "replicas_cpu_us",
            "masters_cmds",
            "masters_waits",
            "masters_scripts",
            "busiest_master",
        ):
            cell[key] = median([t[key] for t in trials])
        cell["jobs_by_master"] = trials[0]["jobs_by_master"] if trials else {}
        for key in ("jobs_dev", "cmds_dev"):
            devs = [t[key] for t in trials if t[key] is not None]
            cell[key] = max(devs) if devs else None
        out.append(cell)
    return out


def node_labels(data: dict[str, Any]) -> dict[int, str]:
    """M1..Mn for the masters (by port), R1..Rn for the replica of each."""
    labels: dict[int, str] = {}
    for i, (master, replicas) in enumerate(sorted((int(m), r) for m, r in data["topology"].items()), 1):
        labels[master] = f"M{i} :{master}"
        for replica in replicas:
            labels[int(replica)] = f"R{i} :{replica} (of M{i})"
    return labels


def pct_fmt(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def projection(data: dict[str, Any], cells: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    """What N masters would give, from the measured Redis CPU per job of the most sharded even cell
    (and of the unsharded one for N = 1), with and without WAIT_REPLICAS."""
    masters = len(data["topology"])

    def cell(shards: int, wait: int) -> dict[str, Any] | None:
        return next((c for c in cells if (c["shards"], c["wait_replicas"]) == (shards, wait)), None)

    even = [c["shards"] for c in cells if c["shards"] % masters == 0 and c["masters_cpu_us"]]
    if not even:
        return None, []
    base, waiting, single = cell(max(even), 0), cell(max(even), 1), cell(1, 0)
    if base is None or not base["masters_cpu_us"]:
        return None, []
    m_us, r_us, w_us = base["masters_cpu_us"], base["replicas_cpu_us"], base["worker_cpu_us"]
    per_shards = base["shards"] // masters
    L = [
        f"From the `{base['name']}` cell: the masters spent **{m_us:.0f} µs of Redis CPU per job** between them, "
        f"the replicas {r_us:.0f} µs between them, the worker processes {fmt(w_us)} µs (CONCURRENCY="
        f"{data['args']['cpu_concurrency']}, CLAIM_BATCH={data['args']['claim_batch']}, a job of one INCR on "
        "another server)"
        + (f"; unsharded (`{single['name']}`) the one master spent {single['masters_cpu_us']:.0f} µs" if single else "")
        + (
            f"; with WAIT_REPLICAS=1 (`{waiting['name']}`) the masters {waiting['masters_cpu_us']:.0f} µs"
            if waiting
            else ""
        )
        + f". With the shards spread evenly over N masters, each master serves 1/N of the jobs at {m_us:.0f} µs "
        f"each, so its one core is full at N x {1e6 / m_us:,.0f} jobs/s.\n"
    ]
    L.append(
        "| masters N (a core each) | shards | Redis-bound ceiling jobs/s (masters 100% busy) | at 70% busy | "
        "worker cores at that 70% rate | with WAIT_REPLICAS=1: ceiling jobs/s | replica cores (one per master) |"
    )
    L.append("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (1, 3, 6, 12):
        one = n == 1 and single is not None and single["masters_cpu_us"]
        source = single if one else base
        assert source is not None
        ceiling = n * 1e6 / source["masters_cpu_us"]
        workers = 0.7 * ceiling * source["worker_cpu_us"] / 1e6 if source["worker_cpu_us"] else None
        wait_cost = (cell(1, 1) if one else waiting) or {}
        with_wait = n * 1e6 / wait_cost["masters_cpu_us"] if wait_cost.get("masters_cpu_us") else None
        L.append(
            f"| {n} | {'1' if one else f'{per_shards * n} ({per_shards} per master)'} | {ceiling:,.0f} | "
            f"{0.7 * ceiling:,.0f} | {fmt(workers, 1)} | {fmt(with_wait)} | {n} |"
        )
    L.append("")
    return {"cell": base["name"], "masters_cpu_us": m_us, "replicas_cpu_us": r_us, "worker_cpu_us": w_us}, L


def write_cluster_markdown(data: dict[str, Any], path: Path) -> None:
    m0, m1, args = data["machine_before"], data["machine_after"], data["args"]
    cells = cluster_cells(data)
    labels = node_labels(data)
    masters = sorted(int(m) for m in data["topology"])
    nm = len(masters)
    L = ["# setqueue on a Redis Cluster: drain throughput and Redis cost per node, by QUEUE_SHARDS\n"]
    L.append(f"- date: {m0['date']}; run took {data['seconds']:.0f} s; `bash bench/run --matrix cluster`")
    L.append(f"- machine: nproc {m0['nproc']}, {m0['arch']}, Linux {m0['kernel']}, Python {m0['python']}")
    L.append(
        f"- redis-server {data['redis_version']}, redis-py {data['redis_py']}: a cluster of {nm} masters with one "
        f"replica each ({2 * nm} redis-server processes on loopback, tests/cluster_support.py), plus one plain "
        "redis-server outside the cluster for the job's INCR counter; all on this machine's cores with the workers"
    )
    L.append(f"- load average before: {m0['load_avg']}, after: {m1['load_avg']} (1, 5, 15 min)")
    steal = steal_percent(data)
    if steal is not None:
        L.append(f"- CPU steal during the run: {steal:.1f}%")
    loads = [r["load_1min"] for r in data["runs"]]
    if loads:
        L.append(
            f"- 1-minute load at the start of each trial: median {statistics.median(loads):.1f}, from {min(loads):.1f} "
            f"to {max(loads):.1f}"
        )
    L.append(
        f"- each trial: {args['cluster_jobs']:,} jobs enqueued (ids j0..j{args['cluster_jobs'] - 1}), then drained by "
        f"{args['cluster_workers']} x `python -m worker` (REDIS_URL = one node, QUEUE_SHARDS, CONCURRENCY="
        f"{args['cpu_concurrency']}, CLAIM_BATCH={args['claim_batch']}); {args['cluster_trials']} trials per cell, the "
        "cells taking turns trial by trial; every figure is the median of a cell's trials"
    )
    for n, p in data["placement"].items():
        per = {labels[m].split()[0]: p["shard_masters"].count(m) for m in masters}
        L.append(f"- QUEUE_SHARDS={n}: queue `{p['queue']}`, shards per master {per}")
    L.append("")

    L.append("## Targets\n")
    for c in cells:
        if c["cmds_dev"] is None:
            continue
        worst = max(c["cmds_dev"], c["jobs_dev"] or 0)
        L.append(
            f"- {c['name']}: Redis commands per master within 10% of an even split: largest deviation "
            f"{pct_fmt(c['cmds_dev'])} (jobs: {pct_fmt(c['jobs_dev'])}; the worst trial of {len(c['runs'])}): "
            + verdict(worst <= 0.10)
        )
    ok = all(c["complete"] for c in cells)
    L.append(f"- every job of every trial ran exactly once (INCR counter = N): {'yes' if ok else '**no**'}")
    L.append("")

    L.append("## Throughput and Redis cost per job\n")
    L.append(
        "steady: jobs/s between 10% and 90% executed; drain: from spawning the workers to the last job (start-up "
        "included). CPU and commands from the first job executed to the end, over the jobs executed meanwhile "
        "(INFO used_cpu_sys+used_cpu_user and total_commands_processed of each node; commands inside scripts "
        "count). Split: the largest deviation of any master from an even share (worst trial); jobs from each "
        "shard's done count after the drain.\n"
    )
    L.append(
        "| cell | steady jobs/s | steady range | drain jobs/s | enqueue jobs/s | worker CPU µs/job | Redis CPU µs/job, "
        "masters | Redis CPU µs/job, replicas | Redis cmds/job, masters | busiest master, % of a core | jobs split | "
        "commands split |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cells:
        rng = c["range"]
        one = "one master holds it all" if c["shards"] == 1 else "-"
        L.append(
            f"| {c['name']} | {fmt(c['steady'])} | {f'{rng[0]:,.0f} to {rng[1]:,.0f}' if rng else '-'} | "
            f"{fmt(c['drain'])} | {fmt(c['enqueue'])} | {fmt(c['worker_cpu_us'])} | {fmt(c['masters_cpu_us'])} | "
            f"{fmt(c['replicas_cpu_us'])} | {fmt(c['masters_cmds'], 2)} | {fmt(c['busiest_master'])}% | "
            f"{pct_fmt(c['jobs_dev']) if c['jobs_dev'] is not None else one} | "
            f"{pct_fmt(c['cmds_dev']) if c['cmds_dev'] is not None else one} |"
        )
    L.append("")

    plain = sorted((c for c in cells if not c["wait_replicas"]), key=lambda c: c["shards"])
    if len(plain) > 1 and all(c["masters_cpu_us"] for c in plain):
        L.append(
            "Sharding's own cost: Redis CPU per job on the masters "
            + ", ".join(f"{c['name']} {c['masters_cpu_us']:.0f} µs" for c in plain)
            + "; script calls (EVALSHA) per job "
            + ", ".join(f"{c['masters_scripts']:.3f}" for c in plain)
            + ". A worker acks what finished together, once the oldest has waited 50 ms (worker/service.py "
            "ACK_DELAY_SECONDS), one script call per shard (composite.dispatch), and its claims take turns over the "
            "shards: one ack flush holds jobs of several shards, so each call carries fewer jobs than unsharded.\n"
        )
    L.append("## By node\n")
    L.append(
        "Redis commands per job · Redis CPU µs per job · CPU busy (% of one core), medians of the trials; jobs "
        "done per master in the first trial.\n"
    )
    L.append("| node | " + " | ".join(c["name"] for c in cells) + " |")
    L.append("|---|" + "---:|" * len(cells))
    for port in sorted(labels, key=lambda p: labels[p]):
        row = []
        for c in cells:
            done = c["jobs_by_master"].get(port)
            row.append(
                f"{fmt(c['cmds'].get(port), 2)} · {fmt(c['cpu_us'].get(port))} µs · {fmt(c['busy'].get(port))}%"
                + (f" · {done:,} jobs" if done is not None and c["jobs_by_master"] else "")
            )
        L.append(f"| {labels[port]} | " + " | ".join(row) + " |")
    L.append("")

    waits = [c for c in cells if c["wait_replicas"]]
    if waits:
        L.append("## The cost of WAIT_REPLICAS\n")
        L.append(
            "After every write script the client sends `WAIT n timeout` on the same connection: the write returns "
            "once n replicas have it. Against the same shards without it, in the same run:\n"
        )
        for c in waits:
            plain = next((p for p in cells if p["shards"] == c["shards"] and not p["wait_replicas"]), None)
            if plain is None or not plain["steady"] or not c["steady"]:
                continue
            L.append(
                f"- {c['name']}: steady {c['steady']:,.0f} jobs/s vs {plain['steady']:,.0f} "
                f"(**{c['steady'] / plain['steady']:.2f}x**); drain {fmt(c['drain'])} vs {fmt(plain['drain'])}; "
                f"enqueue {fmt(c['enqueue'])} vs {fmt(plain['enqueue'])} jobs/s; Redis cmds/job on the masters "
                f"{c['masters_cmds']:.2f} vs {plain['masters_cmds']:.2f}, of which WAIT {c['masters_waits']:.3f} (one "
                f"per write script); Redis CPU µs/job masters "
                f"{c['masters_cpu_us']:.0f} vs {plain['masters_cpu_us']:.0f}, replicas {c['replicas_cpu_us']:.0f} vs "
                f"{plain['replicas_cpu_us']:.0f}; worker CPU µs/job {fmt(c['worker_cpu_us'])} vs "
                f"{fmt(plain['worker_cpu_us'])}"
            )
        L.append("")

    L.append(f"## What {m0['nproc']} cores can and cannot show\n")
    plain = sorted((c for c in cells if not c["wait_replicas"] and c["steady"]), key=lambda c: c["shards"])
    busiest = max((c["busiest_master"] or 0 for c in cells), default=0)
    top = next((c for c in reversed(plain) if c["worker_cpu_us"] and c["masters_cpu_us"]), None)
    L.append(
        f"The {args['cluster_workers']} workers, the {2 * nm} cluster nodes, the counter's redis-server and this "
        f"script share {m0['nproc']} cores. The workers are what fills them"
        + (
            f" (they spend {top['worker_cpu_us']:,.0f} µs of CPU per job against {top['masters_cpu_us']:,.0f} µs on "
            f"the masters and {top['replicas_cpu_us']:,.0f} µs on the replicas, `{top['name']}`)"
            if top
            else ""
        )
        + f", and no Redis is near its one core (the busiest master was at most {busiest:.0f}% busy in any cell). So "
        "jobs/s here is bound by the machine, not by any Redis, and **cannot rise with the number of shards**; the "
        "cluster's extra processes only add to the shared load"
        + (
            f" (steady {plain[-1]['name']} {plain[-1]['steady']:,.0f} jobs/s against {plain[0]['name']} "
            f"{plain[0]['steady']:,.0f}: {plain[-1]['steady'] / plain[0]['steady']:.2f}x)"
            if len(plain) > 1
            else ""
        )
        + ". What the run does show: (1) whether the work spreads evenly over the masters (the split columns), "
        "(2) what a job costs each Redis node in CPU time and commands, which does not depend on how many cores "
        "there are (CPU time, not wall time: the load moves it less than jobs/s, though not nothing, as a busier "
        "machine means fewer jobs per ack call and colder caches), (3) whether sharding itself "
        "costs Redis more per job (shards=1 against 3 and 6), and (4) what WAIT_REPLICAS adds per job. How much "
        "N machines would drain is a projection from (2), below, not a measurement.\n"
    )
    proj, lines = projection(data, cells)
    if proj:
        L.append("## Projection: what N masters give\n")
        L.extend(lines)
        L.append(
            "Assumptions: each master has a core to itself (Redis runs commands on one thread) and so does each "
            "replica; the shards are a multiple of N and spread evenly (pick the queue name, as here, or move "
            "slots), which gives the even split measured above; the per-job Redis cost stays what it is here "
            "(same CLAIM_BATCH, CPU-trivial jobs, short ids, no payload: bigger payloads and smaller claim "
            "batches cost more per job); the workers run on their own machines, enough of them to keep the "
            "masters busy (on this 2-core machine the workers are the bottleneck, see above), and a real network "
            "adds round-trip time, not Redis CPU, so the workers need more of them or more concurrency. This is a "
            "ceiling set by Redis CPU alone, not a measurement of N machines.\n"
        )
    L.append("## Settings\n")
    for name, st in data["settings"].items():
        L.append(f"- **{name}**: workers: {st['workers']}; enqueue: {st['enqueue']}")
    L.append("")
    L.append("## Redis commands per job on the masters, by command (first trial)\n")
    for c in cells:
        r = c["runs"][0]
        if "nodes" not in r or not r.get("window_jobs"):
            continue
        total: dict[str, int] = defaultdict(int)
        for m in masters:
            for k, v in r["nodes"][str(m)]["commands_by_name"].items():
                total[k] += v
        top = sorted(total.items(), key=lambda kv: -kv[1])[:8]
        L.append(f"- {c['name']}: " + ", ".join(f"{k} {v / r['window_jobs']:.3f}" for k, v in top))
    L.append("")
    path.write_text("\n".join(L) + "\n")


def write_cluster_plot(data: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    cells = cluster_cells(data)
    labels = node_labels(data)
    masters = sorted(int(m) for m in data["topology"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.6))
    for wait in sorted({c["wait_replicas"] for c in cells}):
        cs = sorted((c for c in cells if c["wait_replicas"] == wait), key=lambda c: c["shards"])
        xs = [c["shards"] for c in cs]
        ys = [c["steady"] or 0 for c in cs]
        lo = [y - (c["range"] or (y, y))[0] for y, c in zip(ys, cs, strict=True)]
        hi = [(c["range"] or (y, y))[1] - y for y, c in zip(ys, cs, strict=True)]
        ax1.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label=f"WAIT_REPLICAS={wait}")
    ax1.set_xlabel("QUEUE_SHARDS")
    ax1.set_ylabel("steady drain, jobs/s (median; bars: trial range)")
    ax1.set_xticks(sorted({c["shards"] for c in cells}))
    ax1.set_ylim(bottom=0)
    ax1.set_title(f"drain, {data['args']['cluster_workers']} workers; {data['machine_before']['nproc']} cores shared")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=8)
    width = 0.8 / len(masters)
    for i, m in enumerate(masters):
        xs = [j + i * width for j in range(len(cells))]
        ax2.bar(xs, [c["cpu_us"].get(m) or 0 for c in cells], width, label=labels[m])
    ax2.set_xticks([j + 0.4 - width / 2 for j in range(len(cells))], [c["name"] for c in cells], fontsize=8)
    ax2.set_ylabel("Redis CPU µs per job (all jobs)")
    ax2.set_title(f"Redis CPU per job on each master; redis {data['redis_version']}, {data['machine_before']['date']}")
    ax2.grid(True, axis="y", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
