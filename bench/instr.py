"""Redis work per job counted, not timed: a redis-server under valgrind's callgrind (cache simulation on)
runs a fixed workload through this checkout's setqueue and, with --baseline, the baseline's
(workers/bench_sq_instr.py, run with that tree's setqueue), each variant on a fresh server. Counted:
the instructions and simulated last-level cache misses of the server inside EVALSHA/EVAL (the scripts
and the commands they run; not the event loop, the socket reads or the replies' writes), per phase,
so per script; and the commands run (INFO commandstats). The counts do not depend on what else the
machine is doing (see the summary for how deterministic they are)."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from common import CURRENT, WORKERS_DIR, CodeTree, Context, log
from report import header, table

from tests.support import free_port, redis_server_binary

NAME = "instr"
TITLE = "Redis work per job, counted: instructions and simulated cache misses per script"
VARIANTS = ("plain", "payloads", "groups", "results", "dependents")
# The simulated caches, fixed so the counts do not follow the host's: 32 KiB 8-way L1s and a 2 MiB
# 16-way last level with 64-byte lines. A last level smaller than a server's (tens of MiB, shared by
# every core) makes a queue of a few thousand jobs behave as a large one does on a real host: its
# structures do not stay in the cache between the calls of a phase.
CACHES = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=2097152,16,64")
# Counted: the functions the toggles name, and what they call (collection is off elsewhere).
COUNTED = ("evalShaCommand", "evalCommand")
# No work the server clock decides: incremental rehashing only by the commands, never by serverCron;
# serverCron as rarely as it goes (hz 1; with fixed_server.c's clock, never). No jemalloc background
# thread: it wakes by the clock and its work on the arenas changes what the counted calls' allocations do.
SERVER_ARGS = (
    *("--save", "", "--appendonly", "no", "--activerehashing", "no", "--hz", "1"),
    *("--jemalloc-bg-thread", "no", "--loglevel", "warning"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix instr (valgrind: about 50x slower than a plain server)")
    g.add_argument("--instr-jobs", type=int, default=2000, help="jobs of each counted run")
    g.add_argument("--instr-variants", default=",".join(VARIANTS), help=f"from {', '.join(VARIANTS)}")


# The wall clock of a counted server (bench/fixed_server.c): 2026-01-01 00:00:00 UTC, standing still.
FIXED_CLOCK_MS = 1_767_225_600_000


# jemalloc returns no memory to the system on a timer of its own (dirty and muzzy page decay).
NO_DECAY = "dirty_decay_ms:-1,muzzy_decay_ms:-1"


def fixed_server(out: Path) -> dict[str, str]:
    """The environment that gives a server the same random bytes and a clock that stands still in every
    run (bench/fixed_server.c), so that its work is the same; {} without a C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return {}
    library, zeros = out / "fixed_server.so", out / "fixed_random.bytes"
    source = Path(__file__).resolve().parent / "fixed_server.c"
    if not library.exists() or library.stat().st_mtime < source.stat().st_mtime:  # built from this source
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"], check=True)
        zeros.write_bytes(bytes(4096))
    fixed = {"LD_PRELOAD": str(library), "FIXED_RANDOM_FILE": str(zeros), "FIXED_CLOCK_MS": str(FIXED_CLOCK_MS)}
    return {**fixed, "MALLOC_CONF": NO_DECAY}


class CountedServer:
    """A redis-server under callgrind, counting only inside EVALSHA/EVAL, on a free loopback port;
    ``fixed``: the environment of fixed_server()."""

    def __init__(self, fixed: dict[str, str]) -> None:
        if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
            raise SystemExit("--matrix instr needs valgrind (apt-get install valgrind)")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="setqueue-instr-"))
        self.out = self.dir / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}", "--collect-atstart=no"]
        command += [f"--toggle-collect={name}" for name in COUNTED]
        command += ["--cache-sim=yes", *CACHES, redis_server_binary(), "--port", str(self.port)]
        command += ["--bind", "127.0.0.1", "--dir", str(self.dir), "--protected-mode", "no", *SERVER_ARGS]
        with open(self.dir / "valgrind.log", "wb") as logf:
            env = {**os.environ, **fixed}
            self.process = subprocess.Popen(command, stdout=logf, stderr=subprocess.STDOUT, env=env)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 120
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log_file = self.dir / "valgrind.log"
                    raise SystemExit(f"redis-server under valgrind did not start: {log_file}") from None
                time.sleep(0.2)
        client.close()

    def close(self) -> None:
        """Killed, not asked: with the clock stood still serverCron, which acts on SIGTERM, never runs,
        and nothing of a graceful exit is needed after the last dump."""
        self.process.kill()
        self.process.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


def count(tree: CodeTree, variant: str, jobs: int, fixed: dict[str, str]) -> dict[str, Any]:
    """One tree's counted run of ``variant``, or its error (not raised: the other runs still count)."""
    server = CountedServer(fixed)
    env = {
        **tree.env(),
        "BENCH_REDIS_URL": server.url,
        "BENCH_CALLGRIND_PID": str(server.process.pid),  # valgrind runs the server in its own process
        "BENCH_CALLGRIND_OUT": str(server.out),
    }
    argv = [sys.executable, str(WORKERS_DIR / "bench_sq_instr.py"), "--jobs", str(jobs), "--variant", variant]
    try:
        proc = subprocess.run(argv, env=env, cwd=tree.root, capture_output=True, text=True, timeout=7200, check=False)
        server_log = (server.dir / "valgrind.log").read_text(errors="replace")[-2000:]
    finally:
        server.close()
    name = f"setqueue{tree.suffix()}"
    if proc.returncode != 0 or not proc.stdout.strip():
        error = (proc.stderr or proc.stdout).strip()[-2000:]
        return {"tree": name, "variant": variant, "error": error, "server_log": server_log}
    res: dict[str, Any] = json.loads(proc.stdout)
    per_job = {phase: per_job_figures(res, phase) for phase in res["phases"]}
    text = ", ".join(f"{phase} {f['instructions']:,.0f} instr {f['ll_misses']:.1f} LL" for phase, f in per_job.items())
    log(f"instr {variant} {name}: per job {text}")
    return {"tree": name, **res, "per_job": per_job}


def ll_misses(counts: dict[str, int]) -> int:
    """Last-level misses: instruction reads, data reads and data writes."""
    return counts.get("ILmr", 0) + counts.get("DLmr", 0) + counts.get("DLmw", 0)


def per_job_figures(res: dict[str, Any], phase: str) -> dict[str, float]:
    ph, jobs = res["phases"][phase], res["jobs"]
    counts = ph["counts"]
    commands = sum(n for name, n in ph["commands"].items() if not name.startswith(("evalsha", "eval", "script")))
    return {
        "instructions": counts.get("Ir", 0) / jobs,
        "ll_misses": ll_misses(counts) / jobs,
        "d1_misses": (counts.get("D1mr", 0) + counts.get("D1mw", 0)) / jobs,
        "commands": commands / jobs,
        "script_calls": ph["calls"],
    }


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    trees = [CURRENT] + ([ctx.baseline] if ctx.baseline else [])
    variants = [v for v in a.instr_variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown --instr-variants {v!r} (from {', '.join(VARIANTS)})")
    fixed = fixed_server(ctx.out)
    if not fixed:
        log("instr: no C compiler: each server has its own hash seed and clock, and the counts vary a little")
    results = [count(tree, v, a.instr_jobs, fixed) for v in variants for tree in trees]
    version = next((m["redis_version"] for m in results if "redis_version" in m), "-")
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=False).stdout.strip()
    ok = not any("error" in m for m in results)
    return {"redis_version": version, "valgrind": valgrind, "fixed_seed": bool(fixed), "runs": results, "ok": ok}


def change(now: float, before: float) -> str:
    return f"{100 * (now - before) / before:+.0f}%" if before else "-"


def summary(data: dict[str, Any]) -> str:
    jobs = data["args"]["instr_jobs"]
    about = [
        f"{data.get('valgrind', 'valgrind')} (callgrind, cache simulation: L1 32 KiB 8-way, last level 2 MiB "
        "16-way, 64-byte lines); counted inside EVALSHA/EVAL only, each run on a fresh redis-server "
        "(`--activerehashing no`)",
        "a queue in use first, not counted: 1,000 jobs enqueued and claimed, half of them acked, half left in "
        "progress (every structure in the encoding of a busy queue's)",
        f"{jobs:,} jobs with ids of 11 characters, one phase after the other: enqueue in calls of 500, claim in "
        "batches of 100, ack each claim's leases with one ack_many; figures per job (a phase's counts over the "
        "jobs); LL misses: last-level misses, instruction and data, reads and writes; commands: those the "
        "scripts ran (INFO commandstats, EVALSHA itself left out)",
        "variants: plain (no payload), payloads (32 bytes each, kept in done), groups (each enqueue call of 500 "
        "its own group), results (a result kept an hour), dependents (each job has one dependent waiting for it: "
        "its ack releases one, which the claims of a last phase take)",
    ]
    lines = header(data, TITLE, about)
    runs = [r for r in data["runs"] if "error" not in r]
    failed = [r for r in data["runs"] if "error" in r]
    baseline = data.get("baseline")
    if baseline and runs:
        lines += [f"## Claim + ack per job: this checkout against {baseline['ref']} ({baseline['sha'][:12]})", ""]
        lines += ["Dependents: with the claims that take the released dependents, the work either code does.", ""]
        rows = []
        by = {(r["variant"], r["tree"]): r for r in runs}
        twin = f"setqueue@{baseline['label']}"
        for variant in VARIANTS:
            now, before = by.get((variant, "setqueue")), by.get((variant, twin))
            if not now or not before:
                continue
            cells = []
            phases = [p for p in now["per_job"] if p != "enqueue" and p in before["per_job"]]
            for key in ("instructions", "ll_misses", "commands"):
                n = sum(now["per_job"][p][key] for p in phases)
                b = sum(before["per_job"][p][key] for p in phases)
                digits = 0 if key == "instructions" else 2
                cells += [f"{b:,.{digits}f}", f"{n:,.{digits}f}", change(n, b)]
            rows.append([variant, *cells])
        cols = ["variant", "instr before", "instr after", "change", "LL before", "LL after", "change"]
        lines += table([*cols, "commands before", "commands after", "change"], rows)
        now, before = by.get(("plain", "setqueue")), by.get(("plain", twin))
        if now and before:
            lines += ["Targets (claim + ack of a no-op job, plain, against the baseline):", ""]
            for key, what in (("instructions", "instructions"), ("ll_misses", "simulated last-level misses")):
                n = sum(now["per_job"][p][key] for p in ("claim", "ack"))
                b = sum(before["per_job"][p][key] for p in ("claim", "ack"))
                met = "**met**" if n <= 0.6 * b else "**not met**"
                lines.append(f"- at least 40% fewer {what}: {change(n, b)}, {met}")
            where = "../reference.md#what-each-transition-of-a-job-touches-and-why"
            lines += [
                "",
                f"What each job touches, and where the work that is left goes: [the key layout]({where}).",
                "",
            ]
    lines += ["## Per job, per script", ""]
    rows = []
    for r in runs:
        for phase in r["per_job"]:
            f = r["per_job"][phase]
            rows.append(
                [
                    f"{r['variant']}, {r['tree']}, {phase}",
                    f"{f['script_calls']}",
                    f"{f['instructions']:,.0f}",
                    f"{f['ll_misses']:.2f}",
                    f"{f['d1_misses']:.1f}",
                    f"{f['commands']:.2f}",
                ]
            )
    lines += table(["variant, code, script", "calls", "instructions", "LL misses", "D1 misses", "commands"], rows)
    lines += ["## Commands run per phase (INFO commandstats, calls)", ""]
    rows = []
    for r in runs:
        for phase in r["phases"]:
            cmds = r["phases"][phase]["commands"]
            rows.append([f"{r['variant']}, {r['tree']}, {phase}", ", ".join(f"{k} {v}" for k, v in cmds.items())])
    lines += table(["variant, code, script", "commands"], rows)
    for r in failed:
        lines.append(f"- {r['variant']}, {r['tree']}: failed: {(r['error'] or '?').splitlines()[-1]}")
    return "\n".join(lines) + "\n"
