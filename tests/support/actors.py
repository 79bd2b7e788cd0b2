"""Processes that use the library directly, for the race tests: ``python -m tests.support.actors``
``hold URL QUEUE COUNT`` (then hang), ``sweep URL QUEUE SECONDS``, ``work URL QUEUE LEASE JOB_SECONDS``.
Each prints a JSON line, flushed, as soon as it has something to report, so a test can SIGKILL it at
any moment and know what it held."""

from __future__ import annotations

import json
import sys
import time

from setqueue import LeaseKeeper, Queue


def executions_key(q: Queue) -> str:
    return q.keys.prefix + "test-executions"


def hold(q: Queue, count: int) -> None:
    leases = q.claim(count)
    print(json.dumps([[lease.id, lease.token] for lease in leases]), flush=True)
    time.sleep(3600)


def sweep(q: Queue, seconds: float) -> None:
    """Prints "sweeping" after the first sweep, then the ids requeued in ``seconds``."""
    requeued = q.sweep(limit=1000).requeued
    print(json.dumps("sweeping"), flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        requeued += q.sweep(limit=1000).requeued
    print(json.dumps(requeued), flush=True)


def work(q: Queue, job_seconds: float) -> None:
    """Claim, log, 'run', count the run and ack one job at a time until the queue is drained."""
    idle_since = None
    with LeaseKeeper(q) as keeper:
        while True:
            leases = q.claim(1)
            if not leases:
                stats = q.stats()
                if stats["todos"] == 0 and stats["in_progress"] == 0:
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 1.0:
                        return
                q.wait_for_work(0.05)
                continue
            idle_since = None
            [lease] = leases
            print(json.dumps({"claimed": lease.id, "attempt": lease.attempt}), flush=True)
            keeper.hold(leases)
            time.sleep(job_seconds)
            q.redis.hincrby(executions_key(q), lease.id, 1)
            keeper.drop(leases)
            acked = q.ack(lease)
            print(json.dumps({"acked": lease.id, "ok": acked}), flush=True)


def main() -> None:
    role, url, name, arg = sys.argv[1:5]
    if role == "work":
        q = Queue.from_url(url, name=name, lease_seconds=float(arg), max_attempts=100)
        work(q, float(sys.argv[5]))
        return
    q = Queue.from_url(url, name=name, lease_seconds=0.5, max_attempts=100)
    if role == "hold":
        hold(q, int(arg))
    elif role == "sweep":
        sweep(q, float(arg))
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main()
