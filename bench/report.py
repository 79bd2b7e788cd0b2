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


PEERS = ("rq", "rq-simple", "dramatiq", "celery", "arq")


def targets(data: dict, groups: dict[tuple[str, int], list[dict]]) -> list[str]:
    """The issue's targets, checked against this run."""
    out = ["## Targets\n"]
    sq = groups.get(("setqueue", 2))
    sq_rate = steady(sq) if sq else None
    peers = {s: steady(groups[(s, 2)]) for s in PEERS if (s, 2) in groups}
    peers = {s: v for s, v in peers.items() if v is not None}
    if sq_rate is not None:
        out.append(
            f"- steady drain, W=2, at least 10,000 jobs/s: setqueue {sq_rate:,.0f} jobs/s: "
            f"**{'met' if sq_rate >= 10_000 else 'not met'}**"
        )
        if peers:
            best = max(peers, key=lambda s: peers[s])
            ratio = sq_rate / peers[best] if peers[best] else float("inf")
            out.append(
                f"- steady drain, W=2, at least 3x the fastest peer: fastest peer {best} {peers[best]:,.0f} jobs/s, "
                f"setqueue {ratio:.1f}x: **{'met' if ratio >= 3 else 'not met'}**"
            )
    lat = next((x for x in data["latency"] if x["system"] == "setqueue" and "p50_ms" in x), None)
    if lat:
        out.append(
            f"- idle pick-up p50 under 5 ms: setqueue p50 {lat['p50_ms']:.2f} ms (p99 {lat['p99_ms']:.2f} ms): "
            f"**{'met' if lat['p50_ms'] < 5 else 'not met'}**"
        )
    out.append("- setqueue ran with metrics served (METRICS_PORT) and lease renewal on: yes (the real worker)")
    out.append("")
    return out


def write_markdown(data: dict, path: Path) -> None:
    m0, m1 = data["machine_before"], data["machine_after"]
    args = data["args"]
    runs = data["runs"]
    groups = by_key(runs)
    systems = list(dict.fromkeys(r["system"] for r in runs))
    L: list[str] = []
    L.append("# setqueue benchmark results\n")
    L.append(f"- date: {m0['date']}; run took {data['seconds']:.0f} s")
    L.append(f"- machine: nproc {m0['nproc']}, {m0['arch']}, Linux {m0['kernel']}, Python {m0['python']}")
    L.append(f"- redis-server {data['redis_version']} (persistence off, loopback), redis-py {data['redis_py']}")
    L.append(f"- load average before: {m0['load_avg']}, after: {m1['load_avg']} (1, 5, 15 min)")
    steal = steal_percent(data)
    if steal is not None:
        L.append(f"- CPU steal (time the hypervisor gave this VM's cores to others) during the run: {steal:.1f}%")
    L.append(
        f"- {args['jobs']:,} no-op jobs per run (each one Redis INCR), workers {args['workers']}, "
        f"time limit {args['max_seconds']:.0f} s per run; each cell runs trials until they took "
        f"{args.get('cell_seconds', 0):g} s (at most {args.get('trials', 1)}; one when it hits the time limit) "
        f"and reports their median; repeats of the whole matrix: {args['repeat']}"
    )
    L.append("")
    L.extend(targets(data, groups))
    L.append("## Throughput and cost per job\n")
    L.append(
        "enqueue: jobs/s of the system's producer API; drain: jobs/s from spawning the first worker to the last "
        "job executed (includes start-up); steady: jobs/s between 10% and 90% executed (counter sampled every "
        "5 ms). CPU and commands per job are measured from the first job executed to the end. "
        "`*` = did not finish within the time limit: drain and steady are over what ran in it. Every figure "
        "is the median of the cell's trials; `steady range` is their lowest and highest."
    )
    L.append("")
    head = (
        "| system | W | enqueue jobs/s | drain jobs/s | steady jobs/s | trials | steady range | start-up s | "
        "worker CPU ms/job | Redis CPU ms/job | Redis cmds/job | Redis CPU busy | executed (dup/missing) |"
    )
    L.append(head)
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
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
            L.append(
                f"| {s} | {w} | {fmt(median([r['enqueue_jobs_per_s'] for r in rs]))} | "
                f"{fmt(median([r['drain_jobs_per_s'] for r in rs]))}{star} | "
                f"{fmt(steady(rs))}{star} | {len(rs)} | {low_high} | "
                f"{fmt(median([r['startup_seconds'] for r in rs]), 2)} | "
                f"{fmt(median([r.get('worker_cpu_ms_per_job') for r in rs]), 3)} | "
                f"{fmt(median([r.get('redis_cpu_ms_per_job') for r in rs]), 3)} | "
                f"{fmt(median([r.get('redis_commands_per_job') for r in rs]), 1)} | "
                f"{fmt(busy(rs))}% | "
                f"{executed} |"
            )
    L.append("")
    if args["repeat"] > 1:
        L.append("## Repeatability (steady jobs/s of each repeat: the median of its trials)\n")
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
    if data["latency"]:
        L.append("## Idle pick-up latency\n")
        lw = args["latency_workers"]
        L.append(
            f"{args['latency_jobs']} jobs enqueued one at a time, {1000 * args['latency_spacing']:.0f} ms apart, "
            f"to {lw} idle worker process(es); enqueue (time.time() before the producer call) -> the job's first "
            "line (time.time()), same machine clock.\n"
        )
        L.append("| system | p50 ms | p90 ms | p99 ms | max ms | ran |")
        L.append("|---|---:|---:|---:|---:|---:|")
        for lat in data["latency"]:
            if "error" in lat:
                L.append(f"| {lat['system']} | {lat['error']} | | | | |")
            else:
                w1 = groups.get((lat["system"], lw))
                rate = steady(w1) if w1 else None
                slow = rate is not None and rate < 1 / args["latency_spacing"]
                note = f" (drains {rate:,.0f} jobs/s < the arrival rate: includes queueing)" if slow else ""
                L.append(
                    f"| {lat['system']}{note} | {lat['p50_ms']:.2f} | {lat['p90_ms']:.2f} | {lat['p99_ms']:.2f} | "
                    f"{lat['max_ms']:.2f} | {lat['ran']}/{lat['jobs']} |"
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
        sq = groups.get(("setqueue", 2))
        incr = ceil["results"].get("INCR -P 1")
        if sq and incr:
            rate = steady(sq) or 0.0
            busy_ = busy(sq)
            floor2 = floor.get("W=2")
            L.append(
                f"setqueue W=2 steady {rate:,.0f} jobs/s = {100 * rate / incr:.0f}% of redis-benchmark's unpipelined "
                f"INCR rate (50 clients)"
                + (f", {100 * rate / floor2:.0f}% of the INCR-only Python loop with 2 processes" if floor2 else "")
                + (f"; Redis was {busy_:.0f}% busy (of one core) meanwhile" if busy_ is not None else "")
                + ".\n"
            )
    L.append("## Settings\n")
    for s, st in data["settings"].items():
        L.append(f"- **{s}**: workers: {st['workers']}; enqueue: {st['enqueue']}")
    L.append("")
    L.append("## Redis commands per job, by command (first trial)\n")
    for r in runs:
        if r["repeat"] == 0 and r.get("trial", 0) == 0 and r.get("commands_per_job_by_name"):
            top = ", ".join(f"{k} {v}" for k, v in list(r["commands_per_job_by_name"].items())[:8])
            L.append(f"- {r['system']} W={r['workers']}: {top}")
    L.append("")
    path.write_text("\n".join(L) + "\n")


def write_plot(data: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return  # the smoke test's environment has no matplotlib
    groups = by_key(data["runs"])
    systems = list(dict.fromkeys(r["system"] for r in data["runs"]))
    fig, ax = plt.subplots(figsize=(9.5, 5))
    for s in systems:
        ws = sorted({w for (sys_, w) in groups if sys_ == s})
        ys = [steady(groups[(s, w)]) or 0 for w in ws]
        ax.plot(ws, ys, marker="o", label=s)
    ax.set_xlabel("worker processes (W)")
    ax.set_ylabel("steady drain, jobs/s (median of trials)")
    ax.set_yscale("log")
    ax.set_xticks(sorted({w for (_, w) in groups}))
    m = data["machine_before"]
    ax.set_title(f"no-op jobs, redis {data['redis_version']}, {m['nproc']} cores, {m['date']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
