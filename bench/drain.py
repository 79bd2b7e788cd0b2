"""One trial (a backlog enqueued, then drained by W worker processes), the idle pick-up latency, and the
job's body with no queue at all. bench/README.md says what each figure means."""

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from common import CURRENT, LATENCY, WORKERS_DIR, Server, Workers, log, wait_until
from systems import System

SAMPLE_EVERY = 0.005
STALL_SECONDS = 15  # no job done for this long: the trial ends, marked stalled


def snapshot(r: redis.Redis) -> dict[str, Any]:
    """CPU seconds and commands so far, by command too (this INFO counts in the next)."""
    info = r.info("all")
    return {
        "cpu": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
        "commands": int(info["total_commands_processed"]),
        "cmdstats": {k[len("cmdstat_") :]: v["calls"] for k, v in info.items() if k.startswith("cmdstat_")},
        "t": time.perf_counter(),
    }


def delta(before: dict[str, Any], after: dict[str, Any], own: dict[str, int]) -> dict[str, Any]:
    """CPU seconds and commands between two snapshots, less ``own`` (the bench's commands, by name)."""
    own = {**own, "info": own.get("info", 0) + 1}
    by_name = {k: v - before["cmdstats"].get(k, 0) - own.get(k, 0) for k, v in after["cmdstats"].items()}
    return {
        "cpu_seconds": after["cpu"] - before["cpu"],
        "commands": after["commands"] - before["commands"] - sum(own.values()),
        "commands_by_name": {k: v for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v > 0},
        "seconds": after["t"] - before["t"],
    }


def tree_cpu_seconds(roots: list[int]) -> dict[int, float]:
    """CPU seconds by pid of every live process under ``roots`` (/proc), reaped children included: a
    worker that forks per job (RQ's default) counts in full."""
    table: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = Path(f"/proc/{name}/stat").read_text()
            fields = raw[raw.rindex(")") + 2 :].split()  # [1]: the ppid; [11:15]: utime, stime, cutime, cstime
            table[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK"))
    wanted = {pid for pid in roots if pid in table}
    while children := {pid for pid, (ppid, _) in table.items() if ppid in wanted} - wanted:
        wanted |= children
    return {pid: table[pid][1] for pid in wanted}


@dataclass
class Cell:
    """Jobs per trial, the time limit of one, the time a cell's trials take at least, at most how many."""

    jobs: int
    max_seconds: float
    cell_seconds: float
    trials: int


def costs(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    jobs = last["done"] - first["done"]
    bench = delta(first["server"], last["server"], {"get": last["gets"] - first["gets"]})
    workers = sum(v - first["cpu"].get(pid, 0.0) for pid, v in last["cpu"].items())
    out: dict[str, Any] = {
        "window_jobs": jobs,
        "worker_cpu_ms_per_job": 1000 * workers / jobs,
        "redis_cpu_ms_per_job": 1000 * bench["cpu_seconds"] / jobs,
        "redis_commands_per_job": bench["commands"] / jobs,
        "redis_cpu_utilisation": bench["cpu_seconds"] / bench["seconds"],
        "commands_per_job_by_name": {k: round(v / jobs, 3) for k, v in bench["commands_by_name"].items()},
    }
    if first["nodes"]:
        out["nodes"] = {name: delta(first["nodes"][name], last["nodes"][name], {}) for name in first["nodes"]}
    return out


def steady_rate(samples: list[tuple[float, int]], jobs: int) -> float | None:
    """Jobs/s between 10% and 90% executed; for a trial cut by the time limit, over its last 80%."""
    at_lo = next(((t, k) for t, k in samples if k >= 0.1 * jobs), None)
    at_hi = next(((t, k) for t, k in samples if k >= 0.9 * jobs), None)
    if at_lo and at_hi and at_hi[0] > at_lo[0]:
        return (at_hi[1] - at_lo[1]) / (at_hi[0] - at_lo[0])
    started = [(t, k) for t, k in samples if k > 0]
    if len(started) < 3:
        return None
    (t_end, k_end), t_from = started[-1], started[0][0] + 0.2 * (started[-1][0] - started[0][0])
    t0, k0 = next((t, k) for t, k in started if t >= t_from)
    return (k_end - k0) / (t_end - t0) if t_end > t0 else None


def drain(server: Server, nodes: dict[str, redis.Redis], procs: Workers, jobs: int, limit: float) -> dict[str, Any]:
    """Sample the counter until every job ran, the time limit passed or nothing moved for STALL_SECONDS;
    mark the ends of the window the costs per job are measured over."""
    gets = 0  # the bench's own GETs of the counter: not the queue's commands

    def count() -> int:
        nonlocal gets
        gets += 1
        return server.counter()

    def mark() -> dict[str, Any]:
        return {
            "done": count(),
            "gets": gets,
            "nodes": {name: snapshot(client) for name, client in nodes.items()},
            "cpu": tree_cpu_seconds(procs.pids()),
            "server": snapshot(server.r),
        }

    spawned = last_move = time.perf_counter()
    samples: list[tuple[float, int]] = []
    first = None
    while True:
        now, done = time.perf_counter(), count()
        if samples and done != samples[-1][1]:
            last_move = now
        samples.append((now - spawned, done))
        if first is None and done > 0:
            first = mark()
        stalled = now - last_move > STALL_SECONDS or not procs.alive()
        if done >= jobs or now - spawned > limit or stalled:
            return {"samples": samples, "first": first, "last": mark(), "stalled": stalled}
        time.sleep(SAMPLE_EVERY)


def trial(server: Server, system: System, workers: int, cell: Cell, logs: Path) -> dict[str, Any]:
    """FLUSHALL, enqueue ``cell.jobs`` ids with no worker running, then drain with ``workers``."""
    server.r.flushall()
    load, jobs = os.getloadavg()[0], cell.jobs
    system.prepare()
    t0 = time.perf_counter()
    system.enqueue([f"j{i}" for i in range(jobs)])
    enqueue_s = time.perf_counter() - t0
    procs = Workers(system.commands(workers), logs, f"{system.name}-w{workers}")
    try:
        d = drain(server, system.queue_servers(), procs, jobs, cell.max_seconds)
    finally:
        procs.stop()
    samples, first, last = d["samples"], d["first"], d["last"]
    executed, complete = server.counter(), last["done"] >= jobs
    res: dict[str, Any] = {"system": system.name, "workers": workers, "jobs": jobs, "load_1min": round(load, 2)}
    res |= {"complete": complete, "stalled": d["stalled"], "executed": executed, "duplicates": max(0, executed - jobs)}
    res["missing"] = max(0, jobs - executed) if complete or d["stalled"] else 0  # a time limit proves nothing
    res |= {"enqueue_jobs_per_s": jobs / enqueue_s, "startup_seconds": next((t for t, k in samples if k > 0), None)}
    ended = next((t for t, k in samples if k >= jobs), samples[-1][0])
    res |= {"window_seconds": samples[-1][0], "drain_jobs_per_s": (jobs if complete else last["done"]) / ended}
    res["steady_jobs_per_s"] = steady_rate(samples, jobs)
    if first is not None and last["done"] > first["done"]:
        res.update(costs(first, last))
    if complete:
        res.update(system.after_drain())
    step = max(1, len(samples) // 200)  # keep about 200 samples, the last among them
    res["samples"] = [(round(t, 4), k) for t, k in [*samples[:-1:step], samples[-1]]]
    return res


def exactly_once(run: dict[str, Any]) -> bool:
    """No duplicate, none missing (a trial cut by the time limit counts for duplicates only), no stall or death."""
    return not run["duplicates"] and not run["missing"] and not run["stalled"]


def cell_trials(server: Server, systems: Sequence[System], workers: int, cell: Cell, logs: Path) -> list[dict]:
    """A 2 s drain swings by tens of per cent on a shared VM, so a cell runs trials until they took
    ``cell.cell_seconds`` (one cut by the time limit is enough) and the summary takes the median.
    ``systems`` (setqueue and its twin; the cluster's cells) take turns, so load changes hit them all."""
    out: list[dict] = []
    used = dict.fromkeys((s.name for s in systems), 0.0)
    running = list(systems)
    for n in range(cell.trials):
        for system in list(running):
            res = {**trial(server, system, workers, cell, logs), "trial": n}
            out.append(res)
            used[system.name] += res["window_seconds"]
            log(
                f"{system.name:24s} W={workers} #{n + 1}: enqueue {res['enqueue_jobs_per_s']:>8,.0f}/s, drain "
                f"{res['drain_jobs_per_s']:>7,.0f}/s, steady {res['steady_jobs_per_s'] or 0:>7,.0f}/s, executed "
                f"{res['executed']:,}/{res['jobs']:,}{'' if res['complete'] else ' (time limit)'}"
            )
            if not res["complete"] or used[system.name] >= cell.cell_seconds:
                running.remove(system)
    return out


def warmed_up(server: Server, system: System, procs: Workers) -> bool:
    system.enqueue(["warm:0"])
    return wait_until(lambda: server.counter() >= 1 or not procs.alive(), 60) and bool(server.counter())


def lateness(server: Server, sent: dict[str, float]) -> list[float]:
    """Ms from each job's ``sent`` time to its first line (time.time() both, on this machine), sorted."""
    started = {k: float(v) for k, v in server.r.hgetall(LATENCY).items()}
    return sorted(1000 * (started[k] - t) for k, t in sent.items() if k in started)


def percentiles(lat: list[float]) -> dict[str, float]:
    """p50, p90, p99 of sorted ``lat``, interpolated."""
    out = {}
    for p in (50, 90, 99):
        k = (len(lat) - 1) * p / 100
        lo, hi = int(k), min(int(k) + 1, len(lat) - 1)
        out[f"p{p}_ms"] = lat[lo] + (lat[hi] - lat[lo]) * (k - lo)
    return out


def pickup_latency(server: Server, system: System, *, count: int, workers: int, spacing: float, logs: Path) -> dict:
    """``count`` jobs enqueued one at a time, ``spacing`` s apart, to idle workers."""
    server.r.flushall()
    system.prepare()
    procs = Workers(system.commands(workers), logs, f"{system.name}-latency")
    try:
        if not warmed_up(server, system, procs):
            return {"system": system.name, "error": "the workers never ran the warm-up job"}
        time.sleep(0.5)  # every worker goes idle
        enqueued: dict[str, float] = {}
        for i in range(count):
            enqueued[f"lat:{i}"] = time.time()
            system.enqueue([f"lat:{i}"])
            time.sleep(spacing)
        wait_until(lambda: server.counter() > count or not procs.alive(), 30)
        lat = lateness(server, enqueued)
    finally:
        procs.stop()
    if not lat:
        return {"system": system.name, "error": "no latency job ran"}
    return {"system": system.name, "jobs": count, "ran": len(lat), **percentiles(lat), "max_ms": lat[-1]}


def bare_loop(server: Server, workers: list[int], seconds: float, job_env: dict[str, str]) -> dict[str, float]:
    """Jobs/s of W processes running the job's body alone (workers/bench_bare_loop.py): what no worker
    running this job can beat here. ``job_env``: the job and the loops per process."""
    out: dict[str, float] = {}
    for w in workers:
        server.r.flushall()
        env = {**CURRENT.env([str(WORKERS_DIR)]), **job_env, "BENCH_REDIS_URL": server.url}
        argv = [sys.executable, str(WORKERS_DIR / "bench_bare_loop.py")]
        procs = [subprocess.Popen(argv, env={**env, "BENCH_SECONDS": str(seconds)}) for _ in range(w)]
        time.sleep(0.5)  # past start-up
        n0, t0 = server.counter(), time.perf_counter()
        time.sleep(seconds - 1.0)  # and stop before the first loop does
        out[f"W={w}"] = (server.counter() - n0) / (time.perf_counter() - t0)
        for proc in procs:
            proc.wait()
    log(f"the job alone, no queue ({job_env}): " + ", ".join(f"{k} {v:,.0f}/s" for k, v in out.items()))
    return out
