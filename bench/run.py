"""setqueue's benchmark: throughput, CPU, Redis cost and idle pick-up latency against its peers.

Run it with `bash bench/run` (makes bench/.venv with the peers). Every system runs on one
redis-server this script starts on a free loopback port (persistence off), one after another,
with FLUSHALL in between. Two matrices (--matrix cpu|io|both): CPU-trivial jobs (one INCR) and
I/O-bound jobs (a 10 ms wait, then the INCR) at each system's defaults and at one shared
concurrency. With --baseline REF, setqueue at REF runs too, next to this checkout's and taking
turns with it trial by trial (setqueue@<sha>), and Redis memory per job is measured for both
(bench/memory.py). See bench/README.md for what is measured and how.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline import CURRENT, CodeTree, checkout_state, worktree
from procstat import tree_cpu_seconds
from report import fmt
from systems import SYSTEMS, SetQueue, System, free_port

MATRICES = ("cpu", "io")
# The I/O matrix: setqueue with a plain (threaded) and an async handler, and these peers, each
# at its defaults and at the shared concurrency.
IO_BASES = ("setqueue", "dramatiq", "arq", "celery", "saq")

REPO = Path(__file__).resolve().parent.parent
COUNTER = "bench:counter"
LATENCY = "bench:latency"
SAMPLE_EVERY = 0.005


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- redis-server -----------------------------------------------------------------------------


class Server:
    def __init__(self) -> None:
        self.binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
        if not self.binary:
            raise SystemExit("redis-server is not on PATH (set REDIS_SERVER)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="bench-redis-")
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        argv += ["--dir", self.dir, "--protected-mode", "no", "--loglevel", "warning"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.r = redis.Redis(port=self.port, decode_responses=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.r.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)
        self.version = self.r.info("server")["redis_version"]

    def snapshot(self) -> dict[str, Any]:
        return snapshot(self.r)

    def stop(self) -> None:
        self.r.close()
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def snapshot(r: redis.Redis) -> dict[str, Any]:
    """A redis-server's CPU seconds and commands so far, by command too (one INFO: itself counted in the next)."""
    info = r.info("all")
    stats = {k[len("cmdstat_") :]: v["calls"] for k, v in info.items() if k.startswith("cmdstat_")}
    return {
        "cpu": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
        "commands": int(info["total_commands_processed"]),
        "cmdstats": stats,
        "t": time.perf_counter(),
    }


def node_deltas(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per queue server (System.queue_servers): CPU seconds and commands between two snapshots, less
    the INFO of the first, which counts in the second."""
    out = {}
    for name, b in before.items():
        c = after[name]
        stats = {k: v - b["cmdstats"].get(k, 0) for k, v in c["cmdstats"].items()}
        stats["info"] = stats.get("info", 0) - 1
        out[name] = {
            "cpu_seconds": c["cpu"] - b["cpu"],
            "commands": c["commands"] - b["commands"] - 1,
            "commands_by_name": {k: v for k, v in sorted(stats.items(), key=lambda kv: -kv[1]) if v > 0},
            "seconds": c["t"] - b["t"],
        }
    return out


# -- worker processes -----------------------------------------------------------------------------


class Workers:
    def __init__(self, system: System, workers: int, logdir: Path) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = []
        for i, cmd in enumerate(system.commands(workers)):
            logf = open(logdir / f"{system.name}-w{workers}-{i}.log", "wb")  # noqa: SIM115
            self.logs.append(logf)
            self.procs.append(
                subprocess.Popen(
                    cmd.argv, env=cmd.env, cwd=cmd.cwd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
                )
            )

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # its pool children too
            p.wait()
        for f in self.logs:
            f.close()


# -- one throughput run ---------------------------------------------------------------------------


def counter(r: redis.Redis) -> int:
    return int(r.get(COUNTER) or 0)


def throughput_run(
    server: Server, system: System, *, jobs: int, workers: int, max_seconds: float, logdir: Path
) -> dict:
    r = server.r
    r.flushall()
    load = os.getloadavg()[0]
    args = [f"j{i}" for i in range(jobs)]
    system.prepare()
    e0 = server.snapshot()
    t0 = time.perf_counter()
    system.enqueue(args)
    enqueue_s = time.perf_counter() - t0
    e1 = server.snapshot()

    nodes = system.queue_servers()
    t_spawn = time.perf_counter()
    w = Workers(system, workers, logdir)
    samples: list[tuple[float, int]] = []
    my_cmds = 0
    b = None
    cpu_b: dict[int, float] = {}
    n = 0
    last_progress = time.perf_counter()
    stalled = False
    while True:
        now = time.perf_counter()
        n = counter(r)
        my_cmds += 1
        samples.append((now - t_spawn, n))
        if b is None and n > 0:
            b = server.snapshot()
            nodes_b = {name: snapshot(client) for name, client in nodes.items()}
            my_cmds = 0
            cpu_b = tree_cpu_seconds(w.pids())
            n_b = counter(r)
            my_cmds += 1
            t_b = time.perf_counter()
        if n >= jobs or now - t_spawn > max_seconds:
            break
        if samples[-1][1] != (samples[-2][1] if len(samples) > 1 else -1):
            last_progress = now
        elif now - last_progress > 15 or not w.alive():
            stalled = True
            break
        time.sleep(SAMPLE_EVERY)
    t_end = time.perf_counter()
    cpu_c = tree_cpu_seconds(w.pids())
    n_c = counter(r)
    my_cmds += 1
    c = server.snapshot()
    nodes_c = {name: snapshot(client) for name, client in nodes.items()}
    alive = w.alive()
    w.stop()
    final = counter(r)

    complete = n >= jobs
    res: dict[str, Any] = {
        "system": system.name,
        "workers": workers,
        "jobs": jobs,
        "load_1min": round(load, 2),
        "complete": complete,
        "stalled": stalled,
        "workers_alive_at_end": alive,
        "executed": final,
        "duplicates": max(0, final - jobs),
        "missing": max(0, jobs - final),
        "enqueue_seconds": enqueue_s,
        "enqueue_jobs_per_s": jobs / enqueue_s,
        "enqueue_redis_commands_per_job": (e1["commands"] - e0["commands"] - 1) / jobs,
        "startup_seconds": next((t for t, k in samples if k > 0), None),
        "window_seconds": t_end - t_spawn,
    }
    if complete:
        t_done = next(t for t, k in samples if k >= jobs)
        res["drain_seconds"] = t_done
        res["drain_jobs_per_s"] = jobs / t_done
    else:
        res["drain_seconds"] = None
        res["drain_jobs_per_s"] = n / (t_end - t_spawn)  # partial: executed within the time limit
    res["steady_jobs_per_s"] = steady_rate(samples, jobs)
    if b is not None and n_c > n_b:
        done_in_window = n_c - n_b
        res["window_jobs"] = done_in_window
        res["worker_cpu_ms_per_job"] = 1000 * cpu_delta(cpu_b, cpu_c) / done_in_window
        res["redis_cpu_ms_per_job"] = 1000 * (c["cpu"] - b["cpu"]) / done_in_window
        res["redis_commands_per_job"] = (c["commands"] - b["commands"] - my_cmds - 1) / done_in_window
        res["redis_cpu_utilisation"] = (c["cpu"] - b["cpu"]) / (t_end - t_b)
        res["worker_cpu_utilisation"] = cpu_delta(cpu_b, cpu_c) / (t_end - t_b)
        stats = {k: v - b["cmdstats"].get(k, 0) for k, v in c["cmdstats"].items()}
        stats["get"] = stats.get("get", 0) - my_cmds
        stats["info"] = stats.get("info", 0) - 1
        res["commands_per_job_by_name"] = {
            k: round(v / done_in_window, 3) for k, v in sorted(stats.items(), key=lambda kv: -kv[1]) if v > 0
        }
        if nodes:
            res["nodes"] = node_deltas(nodes_b, nodes_c)
    if complete:
        res.update(system.after_drain())
    res["samples"] = thin(samples)
    return res


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


def steady_rate(samples: list[tuple[float, int]], jobs: int) -> float | None:
    """Jobs/s between 10% and 90% executed; for a partial run, over the last 80% of its time."""
    lo, hi = 0.1 * jobs, 0.9 * jobs
    t_lo = next((t for t, k in samples if k >= lo), None)
    t_hi = next((t for t, k in samples if k >= hi), None)
    k_lo = next((k for t, k in samples if k >= lo), None)
    k_hi = next((k for t, k in samples if k >= hi), None)
    if t_lo is not None and t_hi is not None and t_hi > t_lo:
        return (k_hi - k_lo) / (t_hi - t_lo)  # type: ignore[operator]
    if len(samples) < 3:
        return None
    t_end, k_end = samples[-1]
    t_first = next((t for t, k in samples if k > 0), None)
    if t_first is None:
        return 0.0
    start = t_first + 0.2 * (t_end - t_first)
    t0, k0 = next((t, k) for t, k in samples if t >= start)
    return (k_end - k0) / (t_end - t0) if t_end > t0 else None


def thin(samples: list[tuple[float, int]], keep: int = 200) -> list[list[float]]:
    step = max(1, len(samples) // keep)
    out = [[round(t, 4), k] for t, k in samples[::step]]
    if samples and out[-1] != [round(samples[-1][0], 4), samples[-1][1]]:
        out.append([round(samples[-1][0], 4), samples[-1][1]])
    return out


def cell_trials(
    server: Server,
    systems: Sequence[System],
    workers: int,
    logdir: Path,
    *,
    jobs: int,
    max_seconds: float,
    cell_seconds: float,
    trials: int,
) -> list[dict]:
    """Trials of one (system, W) cell: a 20,000-job drain at ~10k jobs/s lasts about 2 s, and
    the rate swings by tens of per cent from one 100 ms to the next on a shared 2-core VM, so a
    fast cell is run again until it has used ``cell_seconds`` (at most ``trials`` times) and the
    report takes the median. A trial that hits the time limit is long enough on its own.

    Several systems (setqueue and its --baseline twin) take turns, trial by trial, so that a
    change in the machine's load hits both alike; each stops on its own budget."""
    out: list[dict] = []
    used = dict.fromkeys((s.name for s in systems), 0.0)
    running = list(systems)
    for trial in range(trials):
        for system in list(running):
            res = throughput_run(server, system, jobs=jobs, workers=workers, max_seconds=max_seconds, logdir=logdir)
            res["trial"] = trial
            out.append(res)
            used[system.name] += res["window_seconds"]
            log(
                f"{system.name:24s} W={workers} #{trial + 1} enqueue {res['enqueue_jobs_per_s']:>9,.0f}/s  drain "
                f"{res['drain_jobs_per_s']:>9,.0f}/s  steady {fmt(res['steady_jobs_per_s'])}/s  "
                f"executed {res['executed']}/{jobs}{'' if res['complete'] else ' (time limit)'}"
            )
            if not res["complete"] or used[system.name] >= cell_seconds:
                running.remove(system)
        if not running:
            break
    return out


# -- idle pick-up latency -----------------------------------------------------------------------


def latency_run(server: Server, system: System, *, count: int, workers: int, spacing: float, logdir: Path) -> dict:
    r = server.r
    r.flushall()
    w = Workers(system, workers, logdir)
    try:
        # Warm up: the first job proves the workers are up and waiting.
        deadline = time.monotonic() + 60
        system.enqueue_one("warm:0")
        while counter(r) < 1:
            if time.monotonic() > deadline or not w.alive():
                return {"system": system.name, "error": "workers never ran the warm-up job"}
            time.sleep(0.01)
        time.sleep(0.5)  # let every worker go idle
        enqueued: dict[str, float] = {}
        for i in range(count):
            arg = f"lat:{i}"
            enqueued[arg] = time.time()
            system.enqueue_one(arg)
            time.sleep(spacing)
        deadline = time.monotonic() + 30
        while counter(r) < count + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = {k: float(v) for k, v in r.hgetall(LATENCY).items()}
    finally:
        w.stop()
    lat = sorted(1000 * (started[k] - t) for k, t in enqueued.items() if k in started)
    if not lat:
        return {"system": system.name, "error": "no latency job ran"}
    return {
        "system": system.name,
        "workers": workers,
        "jobs": count,
        "ran": len(lat),
        "p50_ms": pct(lat, 50),
        "p90_ms": pct(lat, 90),
        "p99_ms": pct(lat, 99),
        "max_ms": lat[-1],
        "mean_ms": statistics.fmean(lat),
    }


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


# -- the ceiling: redis-benchmark ------------------------------------------------------------------


def ceiling(server: Server, quick: bool) -> dict | None:
    binary = shutil.which("redis-benchmark")
    if not binary:
        log("redis-benchmark not found: skipping the ceiling")
        return None
    server.r.flushall()
    sha = server.r.script_load("return 1")
    tests = {
        "SADD": ["SADD", "bench:set", "__rand_int__"],
        "SMOVE": ["SMOVE", "bench:set", "bench:other", "__rand_int__"],
        "EVALSHA (return 1)": ["EVALSHA", sha, "0"],
        "INCR": ["INCR", "bench:counter"],
    }
    out: dict[str, Any] = {"clients": 50, "results": {}}
    for pipeline in (1, 32):
        n = (20_000 if pipeline == 1 else 200_000) if quick else (100_000 if pipeline == 1 else 1_000_000)
        out[f"requests_P{pipeline}"] = n
        for name, cmd in tests.items():
            argv = [binary, "-p", str(server.port), "-n", str(n), "-P", str(pipeline), "-r", "100000", "-c", "50"]
            argv += ["--csv", *cmd]
            if name == "SMOVE":  # fill the source set so SMOVE moves members, not only misses
                server.r.delete("bench:set", "bench:other")
                for i in range(0, 100_000, 5000):
                    server.r.sadd("bench:set", *(f"{j:012d}" for j in range(i, i + 5000)))
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
            rps = None
            for line in proc.stdout.splitlines():
                parts = [p.strip('"') for p in line.split(",")]
                if len(parts) > 1 and parts[0] != "test":
                    with contextlib.suppress(ValueError):
                        rps = float(parts[1])
            out["results"][f"{name} -P {pipeline}"] = rps
    server.r.flushall()
    return out


def incr_floor(
    server: Server,
    workers: list[int],
    seconds: float = 3.0,
    script: str = "bench_incr_loop.py",
    extra_env: dict[str, str] | None = None,
) -> dict[str, float]:
    """INCRs/s of W Python processes doing nothing but the job's body: no worker can beat this."""
    from systems import WORKERS_DIR, base_env  # noqa: PLC0415

    out: dict[str, float] = {}
    for wc in workers:
        server.r.flushall()
        env = base_env(server.url)
        env["BENCH_SECONDS"] = str(seconds)
        env.update(extra_env or {})
        procs = [subprocess.Popen([sys.executable, str(WORKERS_DIR / script)], env=env) for _ in range(wc)]
        time.sleep(0.5)  # past start-up
        n0, t0 = counter(server.r), time.perf_counter()
        time.sleep(seconds - 1.0)
        n1, t1 = counter(server.r), time.perf_counter()
        for proc in procs:
            proc.wait()
        out[f"W={wc}"] = (n1 - n0) / (t1 - t0)
    server.r.flushall()
    return out


# -- the report -----------------------------------------------------------------------------------


def cpu_times() -> dict[str, int]:
    """The machine's CPU time so far (/proc/stat, in clock ticks): steal is time the hypervisor
    gave our virtual CPUs to someone else, the noise no benchmark here can control."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return {}
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return dict(zip(names, (int(f) for f in fields), strict=False))


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpu_ticks": cpu_times(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "arch": platform.machine(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_avg": [round(x, 2) for x in load],
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip(),
    }


def build_matrix(
    matrix: str, names: list[str], url: str, a: argparse.Namespace, baseline: CodeTree | None = None
) -> dict[str, System]:
    """The systems of one matrix, by the name the report shows.

    cpu: every system named, at its defaults (setqueue: CONCURRENCY=--cpu-concurrency, default 1,
    CLAIM_BATCH=--claim-batch).
    io: the job waits --io-seconds first; setqueue runs twice (plain handler on CONCURRENCY
    threads, async handler on one event loop) at CONCURRENCY=--concurrency, CLAIM_BATCH=
    --io-claim-batch; each peer runs at its defaults and again at --concurrency per process.
    baseline: each setqueue system gets a twin right after it, the same settings on the
    baseline's code, named <name>@<sha>."""
    out: dict[str, System] = {}
    if matrix == "cpu":
        for n in names:
            out[n] = SYSTEMS[n](
                n, url, claim_batch=a.claim_batch, concurrency=a.cpu_concurrency if n == "setqueue" else None
            )
    else:
        c, io = a.concurrency, a.io_seconds
        for n in names:
            if n not in IO_BASES:
                continue
            if n == "setqueue":
                for name, cls in (
                    ("setqueue-threads", SYSTEMS["setqueue"]),
                    ("setqueue-async", SYSTEMS["setqueue-async"]),
                ):
                    out[name] = cls(name, url, claim_batch=a.io_claim_batch, concurrency=c, io_seconds=io)
            else:
                out[n] = SYSTEMS[n](n, url, io_seconds=io)
                out[f"{n}-c{c}"] = SYSTEMS[n](f"{n}-c{c}", url, concurrency=c, io_seconds=io)
    if baseline is None:
        return out
    with_twins: dict[str, System] = {}
    for n, system in out.items():
        with_twins[n] = system
        if isinstance(system, SetQueue):
            twin = dataclasses.replace(system, name=n + baseline.suffix(), code=baseline, state={})
            with_twins[twin.name] = twin
    return with_twins


def cells(systems: dict[str, System]) -> list[list[System]]:
    """The systems that share their cells' turns: setqueue with its baseline twins; any other alone."""
    groups: dict[str, list[System]] = {}
    for n, system in systems.items():
        groups.setdefault(n.partition("@")[0], []).append(system)
    return list(groups.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--matrix",
        choices=("cpu", "io", "both", "cluster"),
        default="both",
        help="cpu: CPU-trivial jobs (one INCR); io: I/O-bound jobs (a wait, then the INCR); both (default); "
        "cluster: setqueue alone on a local Redis Cluster, by QUEUE_SHARDS (bench/cluster.py; results/cluster.md)",
    )
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per throughput run, CPU matrix (default 20000)")
    p.add_argument("--io-jobs", type=int, default=10_000, help="jobs per throughput run, I/O matrix (default 10000)")
    p.add_argument("--io-seconds", type=float, default=0.01, help="the I/O job's wait before its INCR (default 0.01)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=100,
        help="I/O matrix: setqueue's CONCURRENCY, and the peers' threads/max_jobs/concurrency in their "
        "equal-concurrency runs (default 100)",
    )
    p.add_argument("--workers", default="1,2,4", help="worker process counts, comma-separated (default 1,2,4)")
    p.add_argument(
        "--systems",
        default="setqueue,naive,rq,rq-simple,dramatiq,celery,arq,saq",
        help=f"comma-separated, from: {', '.join(SYSTEMS)}; 'all' for every one. The I/O matrix runs those of "
        f"{', '.join(IO_BASES)} named here",
    )
    p.add_argument("--claim-batch", type=int, default=100, help="setqueue's CLAIM_BATCH, CPU matrix (default 100)")
    p.add_argument(
        "--cpu-concurrency", type=int, default=1, help="setqueue's CONCURRENCY, CPU matrix (default 1: one thread)"
    )
    p.add_argument("--io-claim-batch", type=int, default=100, help="setqueue's CLAIM_BATCH, I/O matrix (default 100)")
    p.add_argument("--max-seconds", type=float, default=15, help="time limit of one throughput run (default 15)")
    p.add_argument(
        "--io-max-seconds", type=float, default=8, help="time limit of one I/O matrix throughput run (default 8)"
    )
    p.add_argument("--latency-jobs", type=int, default=200, help="jobs of the idle pick-up test (0 = skip)")
    p.add_argument("--latency-workers", type=int, default=1, help="idle workers waiting in the pick-up test")
    p.add_argument("--latency-spacing", type=float, default=0.015, help="seconds between latency jobs")
    p.add_argument("--trials", type=int, default=7, help="most trials of one (system, W) cell (default 7)")
    p.add_argument(
        "--cell-seconds",
        type=float,
        default=10,
        help="run a cell's trials until they have taken this long (default 10); the report takes the median",
    )
    p.add_argument(
        "--io-cell-seconds",
        type=float,
        default=5,
        help="--cell-seconds of the I/O matrix (default 5: its slow peers' enqueue alone takes seconds)",
    )
    p.add_argument("--repeat", type=int, default=1, help="run the throughput matrix this many times back to back")
    p.add_argument("--no-ceiling", action="store_true", help="skip redis-benchmark")
    p.add_argument(
        "--due-jobs",
        type=int,
        default=1000,
        help="scheduled jobs of the due-time latency run (bench/due_latency.py; 0 = skip)",
    )
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also run setqueue at this git ref (e.g. 762146c), from a worktree in bench/.baseline/, as "
        "setqueue@<sha> next to each setqueue system, taking turns trial by trial; and measure Redis memory "
        "per job of both (bench/memory.py)",
    )
    p.add_argument(
        "--memory-jobs",
        type=int,
        default=None,
        help="jobs of the memory measurement (bench/memory.py); default 100000 with --baseline, else 0 (skip)",
    )
    c = p.add_argument_group("--matrix cluster")
    c.add_argument("--shards", default="1,3,6", help="QUEUE_SHARDS values, comma-separated (default 1,3,6)")
    c.add_argument(
        "--wait-replicas",
        default="0,1",
        help="WAIT_REPLICAS values, comma-separated: each shards value runs with each (default 0,1)",
    )
    c.add_argument("--cluster-jobs", type=int, default=25_000, help="jobs per drain (default 25000)")
    c.add_argument("--cluster-workers", type=int, default=2, help="worker processes (default 2)")
    c.add_argument("--cluster-trials", type=int, default=3, help="trials of every cell, taking turns (default 3)")
    c.add_argument("--masters", type=int, default=3, help="masters of the cluster, one replica each (default 3)")
    p.add_argument("--out", default=str(REPO / "bench" / "results"), help="where latest.md/json/png go")
    p.add_argument(
        "--tag", default=None, help="base name of the result files (default latest; cluster with --matrix cluster)"
    )
    a = p.parse_args(argv)
    if a.matrix == "cluster":
        from cluster import run_cluster  # noqa: PLC0415

        a.tag = a.tag or "cluster"
        return run_cluster(a)
    a.tag = a.tag or "latest"

    names = [n for n in SYSTEMS if n != "setqueue-async"] if a.systems == "all" else a.systems.split(",")
    names = [n.strip() for n in names if n.strip()]
    for n in names:
        if n not in SYSTEMS:
            p.error(f"unknown system {n!r}")
    matrices = list(MATRICES) if a.matrix == "both" else [a.matrix]
    worker_counts = [int(x) for x in a.workers.split(",")]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    logdir = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    baseline = worktree(a.baseline) if a.baseline else None
    if baseline is not None:
        log(f"baseline {a.baseline}: {baseline.sha} in {baseline.root}")
    memory_jobs = (100_000 if baseline else 0) if a.memory_jobs is None else a.memory_jobs

    started = time.perf_counter()
    before = machine()
    memory: list[dict[str, Any]] | None = None
    if memory_jobs > 0:  # each tree on a fresh redis-server of its own, before the throughput runs
        from memory import measure_trees  # noqa: PLC0415

        memory = measure_trees([CURRENT] + ([baseline] if baseline else []), memory_jobs)
    server = Server()
    log(f"redis-server {server.version} on port {server.port}; worker logs in {logdir}")
    systems = {m: build_matrix(m, names, server.url, a, baseline) for m in matrices}
    runs: list[dict] = []
    latency: list[dict] = []
    ceil = None
    io_floor: dict[str, dict[str, float]] | None = None
    try:
        for m in matrices:
            mlogs = logdir / m
            mlogs.mkdir()
            jobs, limit, cell = (
                (a.jobs, a.max_seconds, a.cell_seconds)
                if m == "cpu"
                else (a.io_jobs, a.io_max_seconds, a.io_cell_seconds)
            )
            log(f"{m} matrix: {', '.join(systems[m])}; {jobs:,} jobs per run")
            for rep in range(a.repeat):
                for group in cells(systems[m]):
                    for wc in worker_counts:
                        trials = cell_trials(
                            server, group, wc, mlogs, jobs=jobs, max_seconds=limit, cell_seconds=cell, trials=a.trials
                        )
                        for res in trials:
                            res["repeat"] = rep
                            res["matrix"] = m
                            runs.append(res)
            if a.latency_jobs <= 0:
                continue
            # Pick-up latency does not depend on the job's length (its start is taken before the
            # wait): the CPU matrix measures every system; the I/O matrix only setqueue at CONCURRENCY=C.
            for n, system in systems[m].items():
                if m == "io" and not n.startswith("setqueue"):
                    continue
                lat = latency_run(
                    server,
                    system,
                    count=a.latency_jobs,
                    workers=a.latency_workers,
                    spacing=a.latency_spacing,
                    logdir=mlogs,
                )
                lat["matrix"] = m
                latency.append(lat)
                log(f"{n:24s} pick-up p50 {fmt(lat.get('p50_ms'), 2)} ms p99 {fmt(lat.get('p99_ms'), 2)} ms")
        if not a.no_ceiling:
            ceil = ceiling(server, quick=a.jobs < 5000)
            if ceil is not None:
                ceil["python_incr_loop"] = incr_floor(server, worker_counts)
            log(f"ceiling: {ceil['results'] if ceil else None}")
            if "io" in matrices:
                io_floor = {}
                for mode in ("async", "threads"):
                    env = {"BENCH_IO_MODE": mode, "BENCH_CONCURRENCY": str(a.concurrency)}
                    env["BENCH_IO_SECONDS"] = repr(a.io_seconds)
                    io_floor[mode] = incr_floor(server, worker_counts, 3.5, "bench_io_loop.py", env)
                log(f"I/O job without a queue: {io_floor}")
    finally:
        for ms in systems.values():
            for s in ms.values():
                with contextlib.suppress(Exception):
                    s.close()
        server.stop()
    after = machine()
    settings = {
        m: {
            n: {"workers": s.settings("W"), "enqueue": s.enqueue_api(), "per_process": s.per_process()}
            for n, s in ms.items()
        }
        for m, ms in systems.items()
    }
    data = {
        "machine_before": before,
        "machine_after": after,
        "redis_version": server.version,
        "redis_py": redis.__version__,
        "args": vars(a),
        "matrices": matrices,
        "settings": settings,
        "runs": runs,
        "latency": latency,
        "ceiling": ceil,
        "io_floor": io_floor,
        "code": checkout_state(),
        "baseline": baseline.as_dict() if baseline else None,
        "memory": memory,
        "seconds": time.perf_counter() - started,
    }
    (out / f"{a.tag}.json").write_text(json.dumps(data, indent=1) + "\n")
    from report import write_markdown, write_plot  # noqa: PLC0415

    write_markdown(data, out / f"{a.tag}.md")
    write_plot(data, out / "throughput.png" if a.tag == "latest" else out / f"{a.tag}-throughput.png")
    log(f"wrote {out / (a.tag + '.md')} in {data['seconds']:.0f} s")
    bad = [r for r in runs if r["complete"] and (r["duplicates"] or r["missing"])]
    due_ok = True
    if a.due_jobs > 0:  # scheduled jobs: how late after its due time a job starts (its own server)
        due_out = out / ("due-latency.md" if a.tag == "latest" else f"{a.tag}-due-latency.md")
        spread = max(1.0, a.due_jobs / 100)
        due = [sys.executable, str(Path(__file__).resolve().parent / "due_latency.py"), "--jobs", str(a.due_jobs)]
        due_ok = subprocess.run([*due, "--spread", repr(spread), "--out", str(due_out)], check=False).returncode == 0
    return 1 if bad or not due_ok else 0


if __name__ == "__main__":
    sys.exit(main())
