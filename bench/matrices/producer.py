"""The producer matrix: what one producer process gets from the blocking client (``setqueue.open_queue``,
on threads) and the asyncio one (``setqueue.aio.open_queue``, on tasks), side by side on one redis-server:
enqueue of single ids, send of single task calls (``send(noop)``: one job, its payload the task envelope),
and the ``result()`` round trip (enqueue one id, a worker acks it, ``result(id)`` returns). Each trial is a
fresh producer process (workers/bench_sq_producer_load.py) on an empty queue; the rows take turns trial by
trial, enqueue's and send's too. With --baseline the blocking rows get a twin running the baseline's code
(a tree before setqueue.aio has no asyncio client; one before tasks by name, no send)."""

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import report
from common import CURRENT, QUEUE, WORKERS_DIR, CodeTree, Command, Context, Server, Workers, fmt, log
from drain import delta, percentiles, snapshot, tree_cpu_seconds
from systems import SetQueue

NAME = "producer"
TITLE = "The producer: enqueue and result() round trips, blocking and asyncio clients"
OPS = {"enqueue": "Enqueue of single ids", "send": "Send of single task calls", "roundtrip": "The result() round trip"}
PHASES = (("enqueue", "send"), ("roundtrip",))  # the ops of a phase take turns trial by trial
SEND_WITHIN = 0.2  # issue 33: send's calls/s within 20% of enqueue's, from one process
Rows = dict[tuple[str, str, int], list[dict[str, Any]]]  # (op, client name, at once) -> its trials


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix producer (setqueue only; CLAIM_BATCH: --claim-batch)")
    g.add_argument("--producer-ops", default=",".join(OPS), help=f"from {', '.join(OPS)}")
    g.add_argument("--producer-threads", default="1", help="blocking client: threads calling at once")
    g.add_argument("--producer-tasks", default="1,100", help="asyncio client: tasks calling at once")
    g.add_argument("--producer-seconds", type=float, default=3, help="the measured window of one trial")
    g.add_argument("--producer-warmup", type=float, default=0.5, help="seconds before it, after the first call")
    g.add_argument("--producer-trials", type=int, default=3, help="trials of each row; the median is reported")
    g.add_argument("--producer-workers", type=int, default=1, help="worker processes serving the round trips")
    g.add_argument(
        "--producer-worker",
        choices=("acker", "service"),
        default="acker",
        help="acker: claims and acks at once (workers/bench_sq_acker.py); service: `python -m worker`, "
        "which acks successes together (ACK_DELAY_SECONDS)",
    )
    g.add_argument("--producer-concurrency", type=int, default=1, help="the service's CONCURRENCY")


@dataclass(frozen=True)
class Load:
    """A row: ``at_once`` threads (blocking) or tasks (asyncio) of one client, running ``code``."""

    client: str
    at_once: int
    code: CodeTree = CURRENT

    @property
    def name(self) -> str:  # blocking, asyncio, blocking@49c1119
        return self.client + self.code.suffix()


def at_once_text(client: str, n: int) -> str:
    return f"{n} {'thread' if client.startswith('blocking') else 'task'}{'s' if n > 1 else ''}"


def loads(a: argparse.Namespace, ctx: Context) -> list[Load]:
    threads = [int(n) for n in a.producer_threads.split(",") if n]
    made = [Load("blocking", n) for n in threads] + [Load("asyncio", int(n)) for n in a.producer_tasks.split(",") if n]
    return made + ([Load("blocking", n, ctx.baseline) for n in threads] if ctx.baseline else [])


def service(a: argparse.Namespace, url: str, code: CodeTree) -> SetQueue:
    """`python -m worker` whose handler INCRs and returns a small result, kept."""
    how = {"concurrency": a.producer_concurrency, "claim_batch": a.claim_batch, "results": True, "code": code}
    return SetQueue("setqueue-results" + code.suffix(), url, **how)


def env(url: str, code: CodeTree) -> dict[str, str]:
    """A producer's or acker's: ``code``'s setqueue first on the path, then workers/."""
    return {**code.env([str(WORKERS_DIR)]), "BENCH_REDIS_URL": url, "PYTHONUNBUFFERED": "1"}


def workers(a: argparse.Namespace, url: str, code: CodeTree) -> list[Command]:
    """The round trips' workers: --producer-workers of --producer-worker."""
    if a.producer_worker == "service":
        return service(a, url, code).commands(a.producer_workers)
    argv = [sys.executable, str(WORKERS_DIR / "bench_sq_acker.py"), QUEUE, str(a.claim_batch)]
    return [Command(argv, env(url, code), code.root)] * a.producer_workers


def worker_text(a: argparse.Namespace, url: str, code: CodeTree) -> tuple[str, str]:
    """The round trips' workers for the summary: (name, how)."""
    tree = "" if code.is_current else f"; the code of {code.ref} ({code.sha[:12]})"
    if a.producer_worker == "service":
        served = service(a, url, code)
        settings = ", ".join(f"{k}={v}" for k, v in served.worker_settings().items() if k != "REDIS_URL")
        return served.name, f"{a.producer_workers} x `python -m worker`, {settings}{tree}"
    how = f"claim({a.claim_batch}), one INCRBY a batch, ack_many with the results; wait_for_work when idle"
    return "acker" + code.suffix(), f"{a.producer_workers} x workers/bench_sq_acker.py: {how}{tree}"


def expect(proc: subprocess.Popen[str], want: str = "") -> str:
    """The producer's next line; RuntimeError if it is not ``want`` (any line if "") or it exited."""
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line or (want and line != want):
        raise RuntimeError(f"the producer said {line!r}, not {want or 'a line'!r} (exit code {proc.poll()})")
    return line


def trial(a: argparse.Namespace, server: Server, op: str, load: Load, *, n: int, logs: Path) -> dict[str, Any]:
    """FLUSHALL, the workers (round trips only), then one producer process; its window's figures."""
    server.r.flushall()
    res: dict[str, Any] = {"op": op, "system": load.name, "client": load.client, "at_once": load.at_once, "trial": n}
    res["load_1min"] = round(os.getloadavg()[0], 2)
    procs = Workers(workers(a, server.url, load.code), logs, f"{op}-{load.name}") if op == "roundtrip" else None
    argv = [sys.executable, str(WORKERS_DIR / "bench_sq_producer_load.py"), op, load.client, str(load.at_once)]
    argv += [str(a.producer_seconds), str(a.producer_warmup), QUEUE]
    with open(logs / f"{op}-{load.name}-x{load.at_once}-producer.log", "ab") as stderr:
        how: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": stderr, "text": True}
        proc = subprocess.Popen(argv, env=env(server.url, load.code), cwd=load.code.root, **how)
    pids = procs.pids() if procs else []

    def mark() -> dict[str, Any]:
        return {
            "server": snapshot(server.r),
            "producer": sum(tree_cpu_seconds([proc.pid]).values()),
            "workers": sum(tree_cpu_seconds(pids).values()),
        }

    try:
        imported = expect(proc)
        if not Path(imported).resolve().is_relative_to(load.code.root):
            raise RuntimeError(f"the producer imported {imported}, not the setqueue of {load.code.root}")
        expect(proc, "start")
        first = mark()
        expect(proc, "end")
        last = mark()
        out = json.loads(expect(proc))
        proc.wait(60)
        if procs:
            res["executed"] = server.counter()  # every round trip's job ran before its result() returned
    except Exception as exc:  # recorded, not raised: the other rows still count
        log(f"{op} {load.name} x{load.at_once}: {exc}")
        return {**res, "error": str(exc), "ok": False}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if procs:
            procs.stop()
    lat = out.pop("latencies_ms")
    res |= {k: out[k] for k in ("seconds", "ops", "sent", "added", "wrong", "todos")}
    res |= {"errors": out["errors"][:5], "error_count": len(out["errors"]), "jobs_per_s": out["ops"] / out["seconds"]}
    if lat:
        res |= {**percentiles(lat), "max_ms": lat[-1], "mean_ms": sum(lat) / len(lat)}
    res |= costs(first, last, out["ops"], bool(procs))
    res["ok"] = once(res)
    log(
        f"{op:9s} {load.name:18s} {at_once_text(load.client, load.at_once):>10s} #{n + 1}: "
        f"{res['jobs_per_s']:>7,.0f}/s, p50 {res.get('p50_ms', 0):.3f} ms, p99 {res.get('p99_ms', 0):.3f} ms, "
        f"producer CPU {res.get('producer_cpu_ms_per_job', 0):.3f} ms/job" + ("" if res["ok"] else ": FAILED")
    )
    return res


def costs(first: dict[str, Any], last: dict[str, Any], jobs: int, workers: bool) -> dict[str, Any]:
    """Per job over the window: the producer's CPU (/proc), the workers' and Redis's (INFO)."""
    if not jobs:
        return {}
    bench = delta(first["server"], last["server"], {})
    producer = last["producer"] - first["producer"]
    out: dict[str, Any] = {
        "producer_cpu_ms_per_job": 1000 * producer / jobs,
        "producer_cpu_utilisation": producer / bench["seconds"],
        "redis_cpu_ms_per_job": 1000 * bench["cpu_seconds"] / jobs,
        "redis_commands_per_job": bench["commands"] / jobs,
        "redis_cpu_utilisation": bench["cpu_seconds"] / bench["seconds"],
        "commands_per_job_by_name": {k: round(v / jobs, 3) for k, v in bench["commands_by_name"].items()},
    }
    if workers:
        out["worker_cpu_ms_per_job"] = 1000 * (last["workers"] - first["workers"]) / jobs
    return out


def once(r: dict[str, Any]) -> bool:
    """Enqueue and send: every call added its job and the queue holds each once; round trip: every call got
    its own job's result and every job sent ran once (INCR counter = sent)."""
    if "error" in r or r["error_count"] or r["wrong"] or r["added"] != r["sent"]:
        return False
    return bool(r["executed"] == r["sent"] if r["op"] == "roundtrip" else r["todos"] == r["sent"])


def can_send(code: CodeTree) -> bool:
    return (code.root / "shared" / "setqueue" / "tasks.py").exists()


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    server = Server()
    rows, logs, runs = loads(a, ctx), ctx.logs(NAME), []
    chosen = a.producer_ops.split(",")
    if unknown := set(chosen) - set(OPS):
        raise SystemExit(f"--producer-ops: unknown {', '.join(sorted(unknown))}")
    try:
        for repeat in range(a.repeat):
            for phase in PHASES:
                for n in range(a.producer_trials):
                    for op in (op for op in phase if op in chosen):
                        for load in rows:  # turn by turn: a change of load hits every row
                            if op == "send" and not can_send(load.code):
                                continue
                            runs.append({**trial(a, server, op, load, n=n, logs=logs), "repeat": repeat})
    finally:
        server.close()
    settings = dict(worker_text(a, server.url, code) for code in dict.fromkeys(load.code for load in rows))
    return {"redis_version": server.version, "settings": settings, "runs": runs, "ok": all(r["ok"] for r in runs)}


# -- the summary


def by_row(runs: list[dict[str, Any]]) -> Rows:
    out: Rows = defaultdict(list)
    for r in runs:
        out[(r["op"], r["system"], r["at_once"])].append(r)
    return out


def rate(rs: list[dict[str, Any]]) -> float | None:
    return report.cost(rs, "jobs_per_s")


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def once_text(rs: list[dict[str, Any]]) -> str:
    if all(r["ok"] for r in rs):
        return "yes"
    failed = [r for r in rs if not r["ok"]]
    why = failed[0].get("error") or "; ".join(failed[0].get("errors") or []) or "counts differ"
    return f"**no** ({len(failed)} of {len(rs)}: {why[:80]})"


def op_table(data: dict[str, Any], op: str) -> list[str]:
    rows, suffix, cost = by_row(data["runs"]), report.baseline_suffix(data), report.cost
    unit = "round trips/s" if op == "roundtrip" else "jobs/s"
    latency = ["p50 ms", "p90 ms", "p99 ms"] if op == "roundtrip" else ["call p50 ms", "call p99 ms"]
    cols = ["client", "at once", unit, "range (trials)", *(["vs baseline"] if suffix else []), *latency]
    cols += ["producer CPU ms/job", "producer busy"] + (["worker CPU ms/job"] if op == "roundtrip" else [])
    cols += ["Redis CPU ms/job", "Redis cmds/job", "Redis busy", "every call once"]
    lines = []
    for (o, name, n), rs in rows.items():
        if o != op:
            continue
        rates = [r["jobs_per_s"] for r in rs if "jobs_per_s" in r]
        row = [name, at_once_text(name, n), fmt(rate(rs))]
        row.append(f"{min(rates):,.0f} to {max(rates):,.0f} ({len(rs)})" if len(rates) > 1 else f"- ({len(rs)})")
        if suffix:
            twin = ratio(rate(rs), rate(rows.get((op, name + suffix, n), [])))
            row.append("baseline" if name.endswith(suffix) else f"{twin:.2f}x" if twin else "-")
        row += [fmt(cost(rs, k.split()[-2] + "_ms"), 3) for k in latency]
        busy = cost(rs, "producer_cpu_utilisation")
        row += [fmt(cost(rs, "producer_cpu_ms_per_job"), 3), fmt(busy and 100 * busy) + "%"]
        if op == "roundtrip":
            row.append(fmt(cost(rs, "worker_cpu_ms_per_job"), 3))
        busy = cost(rs, "redis_cpu_utilisation")
        row += [fmt(cost(rs, "redis_cpu_ms_per_job"), 3), fmt(cost(rs, "redis_commands_per_job"), 1)]
        lines.append([*row, fmt(busy and 100 * busy) + "%", once_text(rs)])
    return [f"## {OPS[op]}\n", *report.table(cols, lines)] if lines else []


def send_targets(data: dict[str, Any]) -> list[str]:
    """Send against enqueue, row by row (the same client and calls at once), producer CPU per call beside:
    the target is the blocking client's single thread (issue 33), the others are for information."""
    rows, cost, L = by_row(data["runs"]), report.cost, []
    for (op, name, n), rs in rows.items():
        if op != "send" or not (x := ratio(rate(rs), rate(enq := rows.get(("enqueue", name, n), [])))):
            continue
        cpu = [fmt(cost(cell, "producer_cpu_ms_per_job"), 4) for cell in (rs, enq)]
        what = (
            f"{fmt(rate(rs))} against {fmt(rate(enq))} calls/s, **{x:.2f}x**; producer CPU {cpu[0]} vs {cpu[1]} ms/call"
        )
        if name == "blocking" and n == 1:
            ok = report.verdict(x >= 1 - SEND_WITHIN)
            L.append(f"- send within {SEND_WITHIN:.0%} of enqueue, {name}, {at_once_text(name, n)}: {what}: {ok}")
        else:
            L.append(f"  - send ÷ enqueue, {name}, {at_once_text(name, n)}: {what}")
    return L


def comparisons(data: dict[str, Any]) -> list[str]:
    """Each asyncio row against the first blocking row of this checkout; this checkout against the baseline."""
    rows, suffix, cost, L = by_row(data["runs"]), report.baseline_suffix(data), report.cost, []
    for op, title in OPS.items():
        ours = [(name, n) for o, name, n in rows if o == op]
        base = next(((name, n) for name, n in ours if name == "blocking"), None)
        if base is None:
            continue
        b = rows[(op, *base)]
        for name, n in ours:
            if name != "asyncio" or not (x := ratio(rate(rows[(op, name, n)]), rate(b))):
                continue
            rs, what = rows[(op, name, n)], title.lower().replace("the ", "")
            line = f"- {what}: asyncio, {at_once_text(name, n)} ÷ blocking, {at_once_text(*base)}: **{x:.2f}x**"
            if op == "roundtrip":
                line += f"; p50 {fmt(cost(rs, 'p50_ms'), 3)} vs {fmt(cost(b, 'p50_ms'), 3)} ms"
            cpu = [fmt(cost(cell, "producer_cpu_ms_per_job"), 3) for cell in (rs, b)]
            L.append(f"{line}; producer CPU {cpu[0]} vs {cpu[1]} ms/job")
        for name, n in ours if suffix else []:
            twin = (op, name + suffix, n)
            if twin in rows and (x := ratio(rate(rows[(op, name, n)]), rate(rows[twin]))):
                what = title.lower().replace("the ", "")
                L.append(f"- {what}: {name}, {at_once_text(name, n)}, against {name}{suffix}: **{x:.2f}x**")
    return L


def summary(data: dict[str, Any]) -> str:
    a = data["args"]
    about = [
        f"each trial a fresh producer process on an empty queue: {a['producer_seconds']:g} s measured, after its "
        f"first call and {a['producer_warmup']:g} s more; {a['producer_trials']} trials per row, the rows taking "
        f"turns; figures are medians; repeats: {a['repeat']}",
        "blocking: threads sharing one `setqueue.open_queue` client; asyncio: tasks sharing one "
        "`setqueue.aio.open_queue` client on one event loop",
        "enqueue: `enqueue([id])`, a new id a call, no worker running; send: `send(noop)`, a call of a no-op "
        "task (workers/bench_sq_tasks.py; the Task, so its signature is checked): one job of an id send makes, "
        "its payload the task envelope, no worker running; round trip: `enqueue([id])`, then "
        "`result(id)`, which returns once a worker ran the job and acked it with a 30-byte result, kept (the "
        f"workers: {a['producer_worker']}, under Settings)",
        "cost per job, over the measured window: the producer process's CPU (/proc), the workers' and Redis's "
        "(INFO); busy: CPU seconds per second (100% = one core); latency: from the call to its return",
    ]
    runs = data["runs"]
    checks = [
        f"- every call did its job exactly once in every trial: {'yes' if data['ok'] else '**no**'} ({len(runs)} "
        "trials; enqueue and send: each job added once and queued once; round trip: each call got its own job's "
        "result, and the INCR counter = jobs sent)",
        *send_targets(data),
        *comparisons(data),
        "",
    ]
    L = [*report.header(data, TITLE, about), "## Checks\n", *checks]
    L += [line for op in OPS for line in op_table(data, op)]
    L += ["## Settings\n", *(f"- **{name}**: {text}" for name, text in data["settings"].items())]
    if a["producer_worker"] == "acker":
        L.append("- `--producer-worker service` runs the worker service instead, which acks successes together")
    return "\n".join([*L, ""])
