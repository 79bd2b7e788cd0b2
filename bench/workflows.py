"""What dependencies cost (docs/guide.md#dependencies), on one redis-server of the bench's own:

1. ack: the Redis CPU (INFO cpu, used_cpu_sys + used_cpu_user, read just before the first ack and just
   after the last) of acking no-op jobs by hand, ``claim(100)`` then ``ack_many`` of each claim's
   leases: plain jobs, against jobs that each release one dependent in the same queue, and in another
   queue of the same server (the library's ack tells those in the same call). The three variants take
   turns, trial by trial, each trial on a flushed server.
2. fan-in: N members and one callback depending on all of them (``enqueue(["cb"], depends_on=members)``),
   run by a real ``python -m worker`` (workers/bench_sq_flow.py): the delay from the last member's
   handler ending to the callback's handler starting (time.time() both, on this machine). It holds the
   worker's ack of that member, the release, the wake and the claim of the callback.
3. chain: steps each depending on the one before, on one worker (CONCURRENCY=1): steps per second from
   the first step's start to the last's.
4. big fan-ins: the time to enqueue a callback with N dependencies and to delete it, and to ack a job
   with N dependents (every one released when the ack returns) and to delete it, with the longest
   single Redis command meanwhile (SLOWLOG): how long Redis was blocked at most.
5. chains beside the peers: the same chain of steps on one worker process running one job at a time,
   for setqueue and each peer of ``--systems`` that has chains (RQ's ``depends_on``, Celery's ``chain``,
   Dramatiq's ``pipeline``; arq and saq have none): steps per second, and the Redis CPU per step of
   sending the chain and of running it.
"""

import argparse
import hashlib
import itertools
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench_common import FLOW
from common import QUEUE, WORKERS_DIR, Context, Server, Workers, log, wait_until
from drain import percentiles
from report import header, table, verdict
from systems import BIN, RQ, Celery, Dramatiq, RQSimple, SetQueue, System, job_module

from setqueue.keys import LINKS_PER_CALL

NAME = "workflows"
TITLE = "Dependencies: the Redis CPU of a release, fan-in delay, chain speed, big fan-ins"
VARIANTS = ("plain", "same queue", "two queues")
OTHER = "bench-b"  # the queue of the two-queue variant's dependents
CLAIM = 100  # leases a claim, acked together (what a worker's window of no-op jobs collects)
ENQUEUE_CALL = 500
ACK_TARGET = 1.5  # the issue's: an ack releasing one dependent within 1.5x a plain ack's Redis CPU
FAN_IN_TARGET_MS = 100.0
# Commands logged by SLOWLOG while a big fan-in is enqueued or released: those of 1 ms or more. At 0
# every command a script runs is logged too, and that logging itself slows the script down.
SLOW_US = 1000
LAST_ENDED = 300  # members that ended last whose ack times are read: the last ack is among them


# The systems whose chains section 5 runs, as --systems names them.
CHAIN_SYSTEMS = ("setqueue", "rq", "rq-simple", "celery", "dramatiq")


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--matrix workflows")
    g.add_argument("--flow-ack-jobs", type=int, default=10_000, help="jobs acked per variant and trial")
    g.add_argument("--flow-ack-trials", type=int, default=3, help="trials of each ack variant (median reported)")
    g.add_argument("--flow-fan-in", default="1000x20,10000x5", help="fan-in runs: MEMBERSxRUNS, comma-separated sizes")
    g.add_argument("--flow-chain", type=int, default=2000, help="steps of a chain")
    g.add_argument("--flow-chain-trials", type=int, default=1, help="chains run (median reported)")
    g.add_argument("--flow-big", default="10000,100000", help="dependencies of a callback / dependents of a job")
    g.add_argument("--flow-peer-chain", type=int, default=200, help="steps of a chain beside the peers")
    g.add_argument("--flow-peer-trials", type=int, default=3, help="chains per system beside the peers")
    g.add_argument("--flow-timeout", type=float, default=300, help="longest wait for one run's jobs")


def open_queue(server: Server, name: str = QUEUE) -> Any:
    from setqueue import Queue  # noqa: PLC0415  (this checkout's, put first on sys.path by common)

    # Nobody sweeps: a long lease keeps every hand-made ack on its happy path; no results kept.
    return Queue.from_url(server.url, name=name, lease_seconds=3600, result_ttl_seconds=0)


def redis_cpu(server: Server) -> float:
    """Seconds of CPU the server has used, its main thread and the others."""
    cpu = server.r.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def enqueue_in_calls(queue: Any, ids: list[str], **options: Any) -> None:
    for start in range(0, len(ids), ENQUEUE_CALL):
        queue.enqueue(ids[start : start + ENQUEUE_CALL], **options)


# 1. The ack -------------------------------------------------------------------------------------------


def ack_trial(server: Server, variant: str, jobs: int) -> dict[str, Any]:
    from setqueue import JobRef  # noqa: PLC0415

    server.r.flushall()
    queue, other = open_queue(server), open_queue(server, OTHER)
    try:
        ids = [f"job-{i:07d}" for i in range(jobs)]
        enqueue_in_calls(queue, ids)
        for job_id in ids if variant != "plain" else ():  # one dependent each: its ack releases it
            if variant == "same queue":
                queue.enqueue([f"{job_id}+"], depends_on=[job_id])
            else:
                other.enqueue([f"{job_id}+"], depends_on=[JobRef(queue=QUEUE, id=job_id)])
        claims = []
        before = redis_cpu(server)
        while leases := queue.claim(CLAIM):
            claims.append(leases)
        claim_cpu = redis_cpu(server) - before
        before, started = redis_cpu(server), time.perf_counter()
        acked = sum(res.acked for leases in claims for res in queue.ack_many(leases))
        seconds, cpu = time.perf_counter() - started, redis_cpu(server) - before
        released = 0
        if variant != "plain":  # the claims that take the released dependents
            before = redis_cpu(server)
            while leases := (queue if variant == "same queue" else other).claim(CLAIM):
                released += len(leases)
            claim_cpu = redis_cpu(server) - before
    finally:
        queue.close()
        other.close()
    ok = acked == jobs and released == (0 if variant == "plain" else jobs)
    us, claim_us = 1e6 * cpu / jobs, 1e6 * claim_cpu / jobs
    log(f"workflows ack, {variant}: {us:.1f} µs Redis CPU per job, {acked} acked, {released} released")
    return {
        "variant": variant,
        "jobs": jobs,
        "acked": acked,
        "released": released,
        "redis_cpu_us_per_job": us,
        "claim_cpu_us_per_job": claim_us,
        "ack_seconds": seconds,
        "ok": ok,
    }


def acks(server: Server, a: argparse.Namespace) -> list[dict[str, Any]]:
    trials = []
    for trial in range(a.flow_ack_trials):
        for variant in VARIANTS:
            trials.append({"trial": trial, **ack_trial(server, variant, a.flow_ack_jobs)})
    return trials


# 2 and 3. On a real worker ------------------------------------------------------------------------------


class FlowQueue(SetQueue):
    """`python -m worker` serving workers/bench_sq_flow.py's handler."""

    def worker_settings(self) -> dict[str, str]:
        return {**super().worker_settings(), "JOB_HANDLER": "bench_sq_flow:handle"}


def times(server: Server, run: str) -> dict[str, float]:
    return {k: float(v) for k, v in server.r.hgetall(FLOW + run).items()}


def enqueue_chain(queue: Any, ids: list[str]) -> None:
    """``ids`` as a chain in ``queue``: each waits for the one before, one enqueue call a step."""
    queue.enqueue(ids[:1])
    for prev, step in itertools.pairwise(ids):
        queue.enqueue([step], depends_on=[prev])


def chain_order(server: Server, run: str, ids: list[str]) -> tuple[bool, float | None]:
    """Whether chain ``run``'s steps ``ids`` all started, in order (the times they recorded), and its
    steps per second from the first step's start to the last's (None if not in order)."""
    seen = times(server, run)
    starts = [seen.get(i) for i in ids]
    in_order = all(s is not None for s in starts) and starts == sorted(starts)  # type: ignore[type-var]
    span = (starts[-1] - starts[0]) if in_order else None  # type: ignore[operator]
    return in_order, (len(ids) - 1) / span if span else None


def counted(server: Server, expected: int, workers: Workers, timeout: float) -> bool:
    return wait_until(lambda: server.counter() >= expected or not workers.alive(), timeout)


def fan_in_run(server: Server, queue: Any, run: str, members: int, a: argparse.Namespace) -> dict[str, Any]:
    """One fan-in, enqueued while the queue is paused, then let go."""
    ids = [f"m:{run}:{i}" for i in range(members)]
    before = server.counter()
    queue.pause()
    enqueue_in_calls(queue, ids)
    started = time.perf_counter()
    queue.enqueue([f"cb:{run}"], depends_on=ids)
    enqueue_seconds = time.perf_counter() - started
    queue.resume()
    callback = f"cb:{run}"
    wait_until(lambda: server.counter() >= before + members + 1, a.flow_timeout)
    seen = times(server, run)
    ran = server.counter() - before
    ends = [seen[i] for i in ids if i in seen]
    delay = after_ack = None
    if callback in seen and len(ends) == members:
        delay = 1000 * (seen[callback] - max(ends))
        # The worker acks what ended together: the last ack is among the members that ended last.
        last = sorted((i for i in ids), key=seen.__getitem__)[-LAST_ENDED:]
        acked = [queue.inspect(i).done_at for i in last]
        if all(t is not None for t in acked):
            after_ack = 1000 * (seen[callback] - max(acked))
    # The callback runs once, after every member: ran == members + 1 and it started after the last end.
    ok = ran == members + 1 and delay is not None and delay >= 0
    return {
        "run": run,
        "members": members,
        "ran": ran,
        "delay_ms": delay,
        "after_ack_ms": after_ack,
        "enqueue_s": enqueue_seconds,
        "ok": ok,
    }


def chain_run(server: Server, queue: Any, run: str, steps: int, a: argparse.Namespace) -> dict[str, Any]:
    ids = [f"step:{run}:{i}" for i in range(steps)]
    before = server.counter()
    queue.pause()
    started = time.perf_counter()
    enqueue_chain(queue, ids)
    enqueue_seconds = time.perf_counter() - started
    queue.resume()
    wait_until(lambda: server.counter() >= before + steps, a.flow_timeout)
    in_order, rate = chain_order(server, run, ids)
    ran = server.counter() - before
    return {
        "run": run,
        "steps": steps,
        "ran": ran,
        "in_order": in_order,
        "steps_per_s": rate,
        "enqueue_s": enqueue_seconds,
        "ok": ran == steps and in_order,
    }


def chain_by_hand(server: Server, steps: int) -> dict[str, Any]:
    """The same chain claimed and acked one step at a time by this process, no worker: what Redis and the
    library allow without a worker around them."""
    server.r.flushall()
    queue = open_queue(server)
    try:
        ids = [f"hand:{i}" for i in range(steps)]
        enqueue_chain(queue, ids)
        order: list[str] = []
        started = time.perf_counter()
        while leases := queue.claim(1):
            order += [lease.id for lease in leases]
            queue.ack_many(leases)
        seconds = time.perf_counter() - started
    finally:
        queue.close()
    ok = order == ids
    log(f"workflows chain by hand: {steps / seconds:,.0f} steps/s, in order: {ok}")
    return {"steps": steps, "seconds": seconds, "steps_per_s": steps / seconds, "in_order": ok, "ok": ok}


def on_worker(
    server: Server, ctx: Context, label: str, concurrency: int, body: Callable[[Any], list[dict[str, Any]]]
) -> tuple[str, list[dict[str, Any]]]:
    """Flush, start one worker, warm it up, run ``body(queue)``; the worker's settings and the runs."""
    server.r.flushall()
    system = FlowQueue("setqueue", server.url, concurrency=concurrency, claim_batch=CLAIM)
    workers = Workers(system.commands(1), ctx.logs(NAME), label)
    queue = open_queue(server)
    try:
        queue.enqueue(["warm:0"])
        if not counted(server, 1, workers, 60):
            raise SystemExit(f"workflows {label}: the worker never ran the warm-up job")
        return system.describe(), body(queue)
    finally:
        queue.close()
        workers.stop()
        system.close()


def fan_ins(server: Server, a: argparse.Namespace, ctx: Context) -> tuple[str, list[dict[str, Any]]]:
    sizes = [tuple(int(x) for x in part.split("x")) for part in a.flow_fan_in.split(",") if part]

    def body(queue: Any) -> list[dict[str, Any]]:
        runs = []
        for members, count in sizes:
            for n in range(count):
                runs.append(fan_in_run(server, queue, f"{members}-{n}", members, a))
                r = runs[-1]
                log(f"workflows fan-in of {members:,}: run {n}, delay {r['delay_ms']} ms, {r['ran']} ran")
        return runs

    return on_worker(server, ctx, "fan-in", 4, body)


def chains(server: Server, a: argparse.Namespace, ctx: Context) -> tuple[str, list[dict[str, Any]]]:
    def body(queue: Any) -> list[dict[str, Any]]:
        runs = []
        for n in range(a.flow_chain_trials):
            runs.append(chain_run(server, queue, str(n), a.flow_chain, a))
            log(f"workflows chain {n}: {runs[-1]['steps_per_s']} steps/s, in order: {runs[-1]['in_order']}")
        return runs

    return on_worker(server, ctx, "chain", 1, body)


# 4. Big fan-ins: how long Redis is blocked ----------------------------------------------------------------


def script_names() -> dict[str, str]:
    """SHA1 -> the file name of each of the library's Lua scripts, as EVALSHA names them."""
    from setqueue import scripts  # noqa: PLC0415

    lua = Path(scripts.__file__).parent / "lua"
    return {hashlib.sha1(scripts.load(f.stem).encode()).hexdigest(): f.name for f in lua.glob("*.lua")}


def command_name(command: Any, names: dict[str, str]) -> str:
    words = (command.decode(errors="replace") if isinstance(command, bytes) else str(command)).split()
    if len(words) > 1 and words[0].upper() == "EVALSHA":
        return f"EVALSHA {names.get(words[1].lower(), words[1][:12])}"
    return " ".join(words[:2])


def watched(server: Server, action: Callable[[], Any]) -> dict[str, Any]:
    """Run ``action``: its wall time; the script calls it made and their time in Redis (INFO
    commandstats, EVALSHA); its longest single command (SLOWLOG at SLOW_US: below it, "under 1 ms")."""
    server.r.config_resetstat()
    server.r.slowlog_reset()
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    names = script_names()
    entries = [(command_name(e["command"], names), e["duration"]) for e in server.r.slowlog_get(-1)]
    entries = [(what, us) for what, us in entries if what.split()[0].upper() not in {"SLOWLOG", "CONFIG"}]
    longest = max(entries, key=lambda e: e[1], default=None)
    evalsha = server.r.info("commandstats").get("cmdstat_evalsha", {})
    return {
        "seconds": seconds,
        "scripts": int(evalsha.get("calls", 0)),
        "scripts_ms": float(evalsha.get("usec", 0)) / 1000,
        "longest_ms": longest[1] / 1000 if longest else None,
        "longest_command": longest[0] if longest else f"none over {SLOW_US / 1000:g} ms",
    }


def entries(server: Server, queue: Any, key: str, job_id: str) -> int:
    """How many entries job ``job_id`` has in the lexicographic sorted set ``key`` of ``queue``."""
    return int(server.r.zlexcount(getattr(queue.core.keys, key), f"[{job_id}\0", f"({job_id}\1"))


# What each measured action of big() is, in the summary.
BIG = {
    "enqueue": "enqueue of a callback with {n:,} dependencies",
    "delete callback": "delete of that callback (its dependency list dropped when it returns)",
    "release": "ack of a job with {n:,} dependents (all released when it returns)",
    "delete root": "delete of that job, done (its dependents' entries dropped when it returns)",
}


def big(server: Server, a: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    server.r.config_set("slowlog-max-len", 10_000)
    server.r.config_set("slowlog-log-slower-than", SLOW_US)
    try:
        for n in (int(x) for x in a.flow_big.split(",") if x):
            server.r.flushall()
            queue = open_queue(server)
            try:
                ids = [f"d-{i:07d}" for i in range(n)]
                enqueue_in_calls(queue, ids)
                row = watched(server, lambda q=queue, ids=ids: q.enqueue(["callback"], depends_on=ids))
                waiting = int(queue.stats()["waiting"])
                rows.append({"what": "enqueue", "n": n, **row, "ok": waiting == 1})
                log(f"workflows enqueue of a callback with {n:,} dependencies: {rows[-1]}")
                row = watched(server, lambda q=queue: q.delete("callback"))
                left = entries(server, queue, "dep_lines", "callback")
                rows.append({"what": "delete callback", "n": n, **row, "ok": left == 0})
                log(f"workflows delete of a callback with {n:,} dependencies: {rows[-1]}")

                server.r.flushall()
                queue.close()
                queue = open_queue(server)
                queue.enqueue(["root"])
                enqueue_in_calls(queue, ids, depends_on=["root"])
                [lease] = queue.claim(1)
                row = watched(server, lambda q=queue, lease=lease: q.ack_many([lease]))
                todos = int(queue.stats()["todos"])
                rows.append({"what": "release", "n": n, **row, "released": todos, "ok": todos == n})
                log(f"workflows release of {n:,} dependents: {rows[-1]}")
                row = watched(server, lambda q=queue: q.delete("root"))
                left = entries(server, queue, "dependents", "root")
                rows.append({"what": "delete root", "n": n, **row, "ok": left == 0})
                log(f"workflows delete of a job with {n:,} dependents: {rows[-1]}")
            finally:
                queue.close()
    finally:
        server.r.config_set("slowlog-log-slower-than", 10_000)
        server.r.slowlog_reset()
    return rows


# 5. Chains beside the peers ----------------------------------------------------------------------------


@dataclass
class Chainer:
    """How one system runs a chain: its worker (one process, one job at a time) and how it sends a chain
    of steps ``step:<run>:<n>``, each of which records its start (bench_common.record_time), in order."""

    system: System
    how: str  # the chain's API, for the summary
    send: Callable[[list[str]], None]
    close: Callable[[], None]


def chainer(name: str, server: Server) -> Chainer:
    """``name`` (from CHAIN_SYSTEMS) on ``server``."""
    if name == "setqueue":
        queue = open_queue(server)

        def send_sq(ids: list[str]) -> None:
            queue.pause()  # one call a step: the worker must not wait on its producer
            enqueue_chain(queue, ids)
            queue.resume()

        worker = FlowQueue("setqueue", server.url, concurrency=1, claim_batch=CLAIM)
        return Chainer(worker, "enqueue(..., depends_on=[the step before]) per step", send_sq, queue.close)
    if name in ("rq", "rq-simple"):
        import redis  # noqa: PLC0415
        from bench_common import chain_step  # noqa: PLC0415
        from rq import Queue  # noqa: PLC0415

        rq_queue = Queue(QUEUE, connection=redis.Redis.from_url(server.url))

        def send_rq(ids: list[str]) -> None:
            before = None
            for step in ids:
                before = rq_queue.enqueue(chain_step, step, depends_on=before)

        system: System = RQ(name, server.url) if name == "rq" else RQSimple(name, server.url)
        how = "Queue.enqueue(..., depends_on=the step before) per step"
        return Chainer(system, how, send_rq, rq_queue.connection.close)
    if name == "celery":
        from celery import chain  # noqa: PLC0415

        celery = Celery(name, server.url)  # prefork: one process at W=1

        def send_celery(ids: list[str]) -> None:
            step = job_module(celery, "bench_celery_jobs").step
            chain(*(step.si(i) for i in ids)).apply_async()

        return Chainer(celery, "chain(step.si(...), ...).apply_async(), one call", send_celery, celery.close)
    if name == "dramatiq":
        import dramatiq  # noqa: PLC0415

        system = Dramatiq(name, server.url, concurrency=1)

        def send_dramatiq(ids: list[str]) -> None:
            step = job_module(system, "bench_dramatiq_jobs").step
            messages = [step.message_with_options(args=(i,), pipe_ignore=True) for i in ids]
            if len(messages) == 1:
                step.send(ids[0])
            else:
                dramatiq.pipeline(messages).run()

        return Chainer(system, "pipeline(step.message(...), ...).run(), one call", send_dramatiq, system.close)
    raise SystemExit(f"no chain for {name!r}")


def peer_chain_trial(server: Server, c: Chainer, workers: Workers, run: str, a: argparse.Namespace) -> dict[str, Any]:
    """One chain of ``--flow-peer-chain`` steps, named by ``run``, sent whole (a setqueue queue paused
    meanwhile: no step waits on its producer) and run by ``workers``, warm already."""
    steps = a.flow_peer_chain
    ids = [f"step:{run}:{i}" for i in range(steps)]
    before, cpu_before = server.counter(), redis_cpu(server)
    c.send(ids)
    cpu_sent = redis_cpu(server)
    counted(server, before + steps, workers, a.flow_timeout)
    cpu = redis_cpu(server) - cpu_before
    ran = server.counter() - before
    in_order, rate = chain_order(server, run, ids)
    return {
        "run": run,
        "steps": steps,
        "ran": ran,
        "in_order": in_order,
        "steps_per_s": rate,
        "redis_cpu_us_per_step": 1e6 * cpu / steps,
        # Raw data only, the sending's part: a peer's worker runs meanwhile, setqueue's queue is paused.
        "sending_us_per_step": 1e6 * (cpu_sent - cpu_before) / steps,
        "ok": ran == steps and in_order,
    }


def worker_line(system: System) -> str:
    """The one worker process's command, as the summary shows it, with the system's version."""
    [command] = system.commands(1)
    argv = " ".join(command.argv).replace(f"{BIN}/", "").replace(f"{WORKERS_DIR}/", "").replace(system.url, "$URL")
    if isinstance(system, SetQueue):
        settings = ", ".join(f"{k}={v}" for k, v in system.worker_settings().items() if k != "REDIS_URL")
        return f"`{argv}`, {settings}"
    return f"`{argv}` ({system.package} {version(system.package)})"


def peer_chains(server: Server, a: argparse.Namespace, ctx: Context) -> list[dict[str, Any]]:
    """Each system of --systems that has chains (CHAIN_SYSTEMS), on a flushed server: one worker started
    and warmed up by a step, then ``--flow-peer-trials`` chains, one after the other."""
    rows = []
    for name in (n for n in CHAIN_SYSTEMS if n in a.systems.split(",")):
        server.r.flushall()
        c = chainer(name, server)
        workers = Workers(c.system.commands(1), ctx.logs(NAME), f"chain-{name}")
        try:
            c.send(["step:warm:0"])
            if not counted(server, 1, workers, 60):
                raise SystemExit(f"workflows chain of {name}: the worker never ran the warm-up step")
            trials = []
            for n in range(a.flow_peer_trials):
                trials.append(peer_chain_trial(server, c, workers, f"{name}-{n}", a))
                log(f"workflows chain of {name}, trial {n}: {trials[-1]}")
        finally:
            workers.stop()
            c.close()
            c.system.close()
        rows.append({"system": name, "how": c.how, "worker": worker_line(c.system), "trials": trials})
    return rows


def instr_counts(ctx: Context) -> dict[str, dict[str, float]] | None:
    """Instructions per job and phase (enqueue, claim, ack), plain and dependents, from the instr matrix of
    the same run if it ran first (``--matrix instr,workflows --instr-variants plain,dependents``)."""
    path = Path(ctx.out) / "instr.json"
    if not path.exists():
        return None
    runs = json.loads(path.read_text()).get("runs", [])
    found = {
        r["variant"]: {phase: f["instructions"] for phase, f in r["per_job"].items()}
        for r in runs
        if r.get("tree") == "setqueue" and "per_job" in r
    }
    for r in runs:  # the --baseline tree's, when it ran: "dependents, <its tree name>"
        if r.get("tree", "").startswith("setqueue@") and r.get("variant") == "dependents" and "per_job" in r:
            found[f"dependents, {r['tree']}"] = {phase: f["instructions"] for phase, f in r["per_job"].items()}
    return found if {"plain", "dependents"} <= set(found) else None


def run(a: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    server = Server()
    try:
        ack_runs = acks(server, a)
        fan_in_worker, fan_in_runs = fan_ins(server, a, ctx)
        chain_worker, chain_runs = chains(server, a, ctx)
        by_hand = chain_by_hand(server, a.flow_chain)
        big_rows = big(server, a)
        peer_rows = peer_chains(server, a, ctx)
    finally:
        server.close()
    peer_trials = [t for r in peer_rows for t in r["trials"]]
    ok = all(r["ok"] for r in [*ack_runs, *fan_in_runs, *chain_runs, by_hand, *big_rows, *peer_trials])
    return {
        "redis_version": server.version,
        "acks": ack_runs,
        "fan_in_worker": fan_in_worker,
        "fan_ins": fan_in_runs,
        "chain_worker": chain_worker,
        "chains": chain_runs,
        "chain_by_hand": by_hand,
        "big": big_rows,
        "peer_chains": peer_rows,
        "instr": instr_counts(ctx),
        "ok": ok,
    }


def why(med: dict[str, float | None], counts: dict[str, dict[str, float]] | None) -> list[str]:
    """Why the release costs what it does, with this run's figures."""
    plain, same, two = (med[v] for v in VARIANTS)
    if not plain or same is None or two is None:
        return []
    text = (
        f"What a release costs in the same queue ({same / plain:.1f}x): the acked job's linked field names its "
        "sole dependent (one HMGET for the batch), and the ack records the release in the queue's released "
        "list (one RPUSH for the batch: the linked value, then the acked id) and wakes a worker. It reads and "
        "checks nothing more: the next claim (or sweep, stats, inspect) moves the dependent to the line, "
        "checking it still waits in that run, and writes its arrival. So the work of joining the line "
        "(todos, pending), which a plain job's enqueue does, is done by the claim that takes the dependent."
    )
    if counts:
        enqueue = counts["plain"]["enqueue"]
        pair = counts["dependents"]["enqueue"]
        text += (
            f" Counted, a plain job's enqueue is {enqueue:,.0f} instructions, most of it joining the line; a "
            "release that joins the line inside the ack, cut down to the least it can do, was 1.9x a plain ack "
            "(docs/reference.md#dependencies-what-each-step-touches-and-the-bounds). The dependent's own "
            f"enqueue (a job and its dependent: {pair:,.0f} per pair) is where the rest of its cost goes."
        )
    text += (
        f" Across two queues ({two / plain:.1f}x) no script can touch both: ack.lua reads the dependents and "
        "records the release in its own slot (releasing, release_outcomes), and the library then makes two "
        "more script calls per batch of acks: arrive.lua tells them in their queue, release.lua clears the "
        "record. Each link is handled in three scripts instead of one, and the record is written and removed "
        "again (small keys: their listpack inserts cost more per member than a large key's)."
    )
    return [text]


# The summary ------------------------------------------------------------------------------------------


def chains_beside_peers(data: dict[str, Any]) -> list[str]:
    """Section 5's table: per system, the medians of its chains."""
    found = data.get("peer_chains") or []
    if not found:
        return []
    args = data["args"]
    rows = []
    for r in found:
        trials = r["trials"]
        rates = [t["steps_per_s"] for t in trials if t["steps_per_s"]]
        cpu = [t["redis_cpu_us_per_step"] for t in trials]
        rate = f"{statistics.median(rates):,.0f}" if rates else "-"
        spread = f"{min(rates):,.0f} to {max(rates):,.0f}" if rates else "-"
        once = "yes" if all(t["ok"] for t in trials) else "**no**"
        rows.append([r["system"], r["how"], rate, spread, f"{statistics.median(cpu):,.0f}", once])
    cols = ["system", "how the chain is sent", "steps/s (median)", "trials' range", "Redis CPU µs per step"]
    L = ["## Chains beside the peers", ""]
    L += table([*cols, "every step once, in order"], rows)
    L += [
        f"- {args['flow_peer_chain']:,} steps a chain, {args['flow_peer_trials']} chains per system one after "
        "the other (medians), on one worker process running one job at a time, started on a flushed server "
        "and warmed up by one step; the chain sent whole (setqueue's queue paused meanwhile, so that no step "
        "waits on its producer) and run; a step records its start and "
        "counts itself in one round trip (workers/bench_common.py, the same for all); steps/s from the "
        "first step's start to the last's; Redis CPU (INFO cpu) from before the chain is sent to the last "
        "step's count: sending and running it",
        *(f"- {r['system']}: {r['worker']}" for r in found),
        "- setqueue and RQ keep each step's dependency in Redis from its enqueue, where it waits until the "
        "step before ends (setqueue: its ack records the release, and the claim that takes it moves it to "
        "the line first). A setqueue step is three "
        "script calls (its enqueue, which checks its dependency and registers it; its claim; its ack), and a "
        "script call of one job pays a fixed cost of its own: the script's keys, arguments and functions "
        "made anew each call (counted: docs/reference.md#dependencies-what-each-step-touches-and-the-bounds)"
        ". Celery and Dramatiq carry the rest of the chain in each message: the worker sends the next step "
        "when one ends, one message a step, whose body holds the steps still to come.",
        "",
    ]
    return L


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def summary(data: dict[str, Any]) -> str:
    args = data["args"]
    about = [
        f"one redis-server; {args['flow_ack_jobs']:,} no-op jobs acked by hand per variant and trial "
        f"({args['flow_ack_trials']} trials each, the variants taking turns), claims of {CLAIM} acked with one "
        "`ack_many` each; Redis CPU: INFO cpu used_cpu_sys + used_cpu_user, read just before the first ack and "
        "just after the last",
        f"fan-in and chain on a real worker: {data['fan_in_worker']}; the chain's worker the same at CONCURRENCY=1",
        "the machine is shared with other work (the load above): the timed figures are noisy; the counted "
        "instructions are not",
    ]
    L = header(data, TITLE, about)

    L += ["## Redis CPU per ack", ""]
    per: dict[str, list[float]] = {
        v: [r["redis_cpu_us_per_job"] for r in data["acks"] if r["variant"] == v] for v in VARIANTS
    }
    med = {v: statistics.median(xs) if xs else None for v, xs in per.items()}
    # Runs from before the claims were timed have none.
    claimed: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in data["acks"]:
        if "claim_cpu_us_per_job" in r:
            claimed[r["variant"]].append(r["claim_cpu_us_per_job"])
    plain = med["plain"]
    rows = []
    for v in VARIANTS:
        m = med[v]
        ratio = f"{m / plain:.1f}x" if m is not None and plain else "-"
        spread = f"{min(per[v]):.1f} to {max(per[v]):.1f}" if per[v] else "-"
        claim = ms(statistics.median(claimed[v])) if claimed[v] else "-"
        rows.append([v, ms(m), spread, ratio, claim])
    cols = ["each job's ack releases", "µs per job (median)", "trials' range", "vs plain"]
    L += table([*cols, "the claim that takes the job or its dependent, µs per job"], rows)
    for v in VARIANTS[1:]:
        m = med[v]
        if m is not None and plain:
            L.append(
                f"- {v}: {m / plain:.1f}x a plain ack; target within {ACK_TARGET}x: {verdict(m <= ACK_TARGET * plain)}"
            )
    counts = data.get("instr")
    if counts:
        plain_ack, dep_ack = counts["plain"]["ack"], counts["dependents"]["ack"]
        L.append(
            f"- counted (the instr matrix of this run, valgrind, deterministic): ack instructions per job "
            f"{plain_ack:,.0f} plain, {dep_ack:,.0f} releasing one dependent in the same queue "
            f"({dep_ack / plain_ack:.2f}x); target within {ACK_TARGET}x: {verdict(dep_ack <= ACK_TARGET * plain_ack)}"
        )
        taken = counts["dependents"].get("claim released")
        if taken is not None:
            L.append(
                f"- counted, the claim that takes a released dependent: {taken:,.0f} instructions per job, against "
                f"{counts['plain']['claim']:,.0f} for a plain job's claim: it moves the dependent to the line first "
                "(the work the ack recorded and left)"
            )
        for name, before in counts.items():
            if name.startswith("dependents, ") and taken is not None and "claim released" in before:
                was, now = before["ack"] + before["claim released"], dep_ack + taken
                L.append(
                    f"- counted, the ack and that claim together: {now:,.0f} instructions per job, against "
                    f"{was:,.0f} in {name.removeprefix('dependents, ')} ({100 * (now - was) / was:+.0f}%)"
                )
    L += ["", *why(med, counts), ""]

    L += ["## Fan-in: the callback's start after the last member", ""]
    rows = []
    for members in sorted({r["members"] for r in data["fan_ins"]}):
        rs = [r for r in data["fan_ins"] if r["members"] == members]
        ended = sorted(r["delay_ms"] for r in rs if r["delay_ms"] is not None)
        acked = sorted(r["after_ack_ms"] for r in rs if r.get("after_ack_ms") is not None)
        e, k = percentiles(ended) if ended else {}, percentiles(acked) if acked else {}
        enq = statistics.median(r["enqueue_s"] for r in rs) * 1000
        good = bool(acked) and k["p99_ms"] <= FAN_IN_TARGET_MS
        rows.append(
            [
                f"{members:,}",
                f"{len(ended)}/{len(rs)}",
                ms(k.get("p50_ms")),
                ms(k.get("p99_ms")),
                verdict(good),
                ms(e.get("p50_ms")),
                ms(e.get("p99_ms")),
                ms(max(ended, default=None)),
                f"{enq:,.0f}",
            ]
        )
    cols = ["members", "runs", "after the ack: p50 ms", "p99 ms", f"p99 within {FAN_IN_TARGET_MS:.0f} ms"]
    L += table([*cols, "after the handler's end: p50 ms", "p99 ms", "max ms", "enqueue of the callback, ms"], rows)
    L += [
        "After the ack: from the last member's ack (its `done_at`, the server's clock in ms, the same machine's) "
        "to the callback's handler starting: the release, the wake and the claim. After the handler's end: "
        "from the last member's handler returning, which adds the worker's ack: at once when it was the "
        "last job the worker had, else with what ended together once the oldest has waited "
        "`ACK_DELAY_SECONDS` (50 ms, checked every 50 ms). With few runs, p99 is near the maximum.",
        "",
    ]

    L += ["## Chain on one worker", ""]
    rates = [r["steps_per_s"] for r in data["chains"] if r["steps_per_s"]]
    if rates:
        spread = f" (median; {min(rates):,.0f} to {max(rates):,.0f})" if len(rates) > 1 else ""
        L.append(
            f"- {args['flow_chain']:,} steps, each depending on the one before, "
            f"{len(rates)} chain{'s' if len(rates) > 1 else ''}: {statistics.median(rates):,.0f} steps/s{spread}, "
            f"first step's start to the last's; every chain in order: "
            f"{'yes' if all(r['in_order'] for r in data['chains']) else '**no**'}"
        )
    hand = data["chain_by_hand"]
    L += [
        f"- the same chain claimed and acked one step at a time by one process, no worker: "
        f"{hand['steps_per_s']:,.0f} steps/s (in order: {'yes' if hand['in_order'] else '**no**'})",
        "- a step is released by its predecessor's ack; a worker acks a job that was the last it had at "
        "once (waiting for its ack window instead, up to about 100 ms a step, a chain ran 11 steps "
        "a second); on a worker, each step also pays the release's wake and the worker's claim",
        "",
    ]

    L += chains_beside_peers(data)

    L += ["## Big fan-ins: how long Redis is blocked", ""]
    rows = []
    for r in data["big"]:
        what = BIG[r["what"]].format(n=r["n"])
        rows.append(
            [
                what,
                f"{r['seconds'] * 1000:,.0f}",
                f"{r['scripts']:,}",
                ms(r["scripts_ms"]),
                ms(r["longest_ms"]),
                f"`{r['longest_command']}`",
            ]
        )
    cols = ["what", "wall ms", "script calls", "their time in Redis, ms", "longest single command, ms", "which"]
    L += table(cols, rows)
    bounds = "../reference.md#dependencies-what-each-step-touches-and-the-bounds"
    for r in data["big"]:
        if r["longest_ms"] is not None:
            what = BIG[r["what"]].format(n=r["n"])
            L.append(f"- {what}: Redis blocked up to {r['longest_ms']:,.1f} ms, in one `{r['longest_command']}`")
    L.append(f"- the bounds each step keeps: [the reference]({bounds})")
    L.append("")
    L += [
        "The longest single command bounds how long Redis was blocked, each script call being one "
        f"command; a page of a release, registration or forgetting holds at most {LINKS_PER_CALL} links "
        f"(`setqueue.keys.LINKS_PER_CALL`). Script calls and their time: INFO commandstats (EVALSHA); the "
        f"longest command: SLOWLOG, which logs those of {SLOW_US / 1000:g} ms or more (at 0 it logs every "
        "command a script runs too, and that logging slows the scripts several times over). Durations are "
        "the server's, without the round trips.",
        "",
    ]
    return "\n".join(L) + "\n"
