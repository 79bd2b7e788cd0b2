"""The counted workload of one code tree's setqueue, run by bench/instr.py with that tree on PYTHONPATH
against a redis-server under callgrind. Prints one JSON object: per phase (enqueue, claim, ack) the
script calls made, callgrind's counts of the server inside EVALSHA/EVAL (dumped when the phase ends)
and INFO commandstats of the phase.

Phases, one after the other so that each script's counts stand alone: enqueue every id in calls of
500; claim them all in batches of 100; ack each claim's leases with one ack_many (the worker acks the
successes a window collected together: with no-op jobs and claims of 100, about one claim's worth);
for the dependents variant, then the claims (of 100) that take the dependents those acks released.
Before counting, a queue in use: BACKDROP jobs of the same kind enqueued and claimed, half of them
acked, the other half left in progress, so that every structure already has the encoding a busy
queue's has (hash tables and skip lists, not the listpacks of a small key) and the counts are the
work per job, not a first fill. Ids, payloads, groups and results are fixed; claim tokens and
request ids are fixed too (from a counter), so that two runs send the same bytes."""

import argparse
import itertools
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import redis

import setqueue
from setqueue import Queue, scripts

ENQUEUE_CALL = 500
CLAIM_BATCH = 100
VARIANTS = ("plain", "payloads", "groups", "results", "dependents")
PAYLOAD = '{"task": "noop", "args": [1, 2]}'  # 32 bytes, kept with the job in done (under 1 KiB)
RESULT = {"ok": True}  # kept an hour: '{"ok":true}' as JSON
BACKDROP = 1000


def dump(pid: int, out: Path, phase: str) -> dict[str, int]:
    """callgrind's counts since the last dump or zero, from the dump file it writes (and zeroes)."""
    before = set(out.parent.glob(out.name + ".*"))
    subprocess.run(["callgrind_control", f"--dump={phase}", str(pid)], check=True, capture_output=True, timeout=120)
    deadline = time.monotonic() + 60
    while True:
        new = sorted(set(out.parent.glob(out.name + ".*")) - before)
        lines = new[0].read_text().splitlines() if new else []
        events = next((line.split()[1:] for line in lines if line.startswith("events:")), None)
        totals = next((line.split()[1:] for line in lines if line.startswith("totals:")), None)
        if events and totals:
            return dict(zip(events, map(int, totals), strict=True))
        if time.monotonic() > deadline:
            raise SystemExit(f"no callgrind dump for {phase}")
        time.sleep(0.05)


def commandstats(r: redis.Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT (INFO and CONFIG themselves left out)."""
    stats = r.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    r.config_resetstat()
    return {k: v for k, v in sorted(calls.items()) if k not in {"info", "config|resetstat", "config"}}


def fix_request_ids() -> None:
    """Request ids from a counter (as long as the random ones) and one identity in claim tokens: two runs
    send the same keys and values, so the server's hash tables do the same work."""
    numbers = itertools.count()
    scripts.new_request_id = lambda: f"{next(numbers):024x}"
    scripts.identity = lambda: "bench-host:1"
    try:  # a tree with dependencies names its staging lists with request ids too
        from setqueue import workflows  # noqa: PLC0415

        workflows.new_request_id = scripts.new_request_id  # type: ignore[attr-defined]
    except ImportError:
        pass


def enqueue(queue: Queue, ids: list[str], variant: str, groups: str) -> tuple[int, int]:
    """Enqueue ``ids`` in calls of ENQUEUE_CALL, as ``variant`` says; how many were added, in how many calls."""
    added, calls = 0, 0
    for start in range(0, len(ids), ENQUEUE_CALL):
        chunk = ids[start : start + ENQUEUE_CALL]
        group = f"{groups}-{start // ENQUEUE_CALL}" if variant == "groups" else None
        added += queue.enqueue({i: PAYLOAD for i in chunk} if variant == "payloads" else chunk, group=group)
        calls += 1
        if variant == "dependents":  # each job has one dependent, waiting for it: its ack releases one
            for i in chunk:
                queue.enqueue([f"{i}+"], depends_on=[i])  # type: ignore[call-arg]
                calls += 1
    return added, calls


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--variant", choices=VARIANTS, default="plain")
    a = p.parse_args()
    fix_request_ids()
    url, pid = os.environ["BENCH_REDIS_URL"], int(os.environ["BENCH_CALLGRIND_PID"])
    out = Path(os.environ["BENCH_CALLGRIND_OUT"])
    r = redis.Redis.from_url(url, decode_responses=True)
    options: dict[str, Any] = {"result_ttl_seconds": 3600 if a.variant == "results" else 0}
    options |= {"lease_seconds": 3600}  # nobody sweeps; a long lease keeps the counted ack on its happy path
    scratch = Queue.from_url(url, name="instr-scratch", **options)  # loads every script this run uses
    scratch.enqueue({"warm-up": PAYLOAD}, group="warm-up")
    scratch.ack_many(scratch.claim(1), results=[RESULT])
    scratch.close()
    r.flushall()  # the script cache stays
    queue = Queue.from_url(url, name="bench", **options)
    backdrop = [f"old-{i:07d}" for i in range(BACKDROP)]  # 11 characters, as the counted ones
    enqueue(queue, backdrop, a.variant, "old")
    held = [lease for _ in range(BACKDROP // CLAIM_BATCH) for lease in queue.claim(CLAIM_BATCH)]
    queue.ack_many(held[::2], results=[RESULT] * len(held[::2]) if a.variant == "results" else None)
    while queue.claim(CLAIM_BATCH):  # dependents those acks released: held too, out of the counted line
        pass
    commandstats(r)
    dump(pid, out, "warm-up")  # zeroes the counts

    ids = [f"job-{i:07d}" for i in range(a.jobs)]  # 11 characters
    phases: dict[str, dict[str, Any]] = {}
    added, calls = enqueue(queue, ids, a.variant, "group")
    phases["enqueue"] = {"calls": calls, "counts": dump(pid, out, "enqueue"), "commands": commandstats(r)}

    claims: list[list[Any]] = []
    while leases := queue.claim(CLAIM_BATCH, request_id=f"claim-{len(claims):06d}"):
        claims.append(leases)
    claimed = sum(len(c) for c in claims)
    phases["claim"] = {"calls": len(claims) + 1, "counts": dump(pid, out, "claim"), "commands": commandstats(r)}

    acked = 0
    for n, leases in enumerate(claims):
        results = [RESULT] * len(leases) if a.variant == "results" else None
        acked += sum(res.acked for res in queue.ack_many(leases, results=results, request_id=f"ack-{n:06d}"))
    phases["ack"] = {"calls": len(claims), "counts": dump(pid, out, "ack"), "commands": commandstats(r)}
    if a.variant == "dependents":  # the claims that take the released dependents, which their acks recorded
        calls, released = 0, 0
        while leases := queue.claim(CLAIM_BATCH, request_id=f"claim-released-{calls:06d}"):
            calls, released = calls + 1, released + len(leases)
        counts = dump(pid, out, "claim released")
        phases["claim released"] = {"calls": calls + 1, "counts": counts, "commands": commandstats(r)}
        if released != a.jobs:
            raise SystemExit(f"{released} released dependents claimed, of {a.jobs}")

    version = r.info("server")["redis_version"]
    about = {"setqueue": setqueue.__file__, "redis_version": version, "jobs": a.jobs, "variant": a.variant}
    print(json.dumps({**about, "enqueued": added, "claimed": claimed, "acked": acked, "phases": phases}))
    queue.close()
    return 0 if added == claimed == acked == a.jobs else 1


if __name__ == "__main__":
    raise SystemExit(main())
