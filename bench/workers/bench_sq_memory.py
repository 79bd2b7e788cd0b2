"""Redis memory per job of one code tree's setqueue; run by bench/memory.py with that tree's path.

    PYTHONPATH=<tree>/shared:<tree> BENCH_REDIS_URL=redis://... python bench_sq_memory.py --jobs 100000

On an empty server of its own: loads the scripts (one job through a scratch queue, then FLUSHALL,
which keeps them), reads INFO `used_memory`, enqueues N ids of 11 characters (`job-0000000`, no
payload) with `Queue.enqueue`, then claims and acks them all (`claim(500)`, `ack_many`) with a
retention that keeps every one in done. After each step it drops the keys that go by themselves
(`req:<id>`, the resend results, 2 minutes; `wake`, at most 64 tokens), waits for Redis to finish
rehashing, and reads `used_memory` again and `MEMORY USAGE <key> SAMPLES 0` of every key.
Prints one JSON object: bytes per job from the `used_memory` delta, and per key.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import redis

import setqueue
from setqueue import Queue

QUEUE = "bench"
PREFIX = f"setqueue:{{{QUEUE}}}:"
TRANSIENT = ("req:*", "wake")


def used_memory(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def settle(r: redis.Redis) -> None:
    """Drop what expires by itself anyway and let serverCron finish any incremental rehash."""
    for pattern in TRANSIENT:
        keys = list(r.scan_iter(match=PREFIX + pattern, count=1000))
        for i in range(0, len(keys), 1000):
            r.delete(*keys[i : i + 1000])
    time.sleep(0.5)


def keys_usage(r: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every key of the queue: its type, element count and MEMORY USAGE (all elements sampled)."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(r.scan_iter(match=PREFIX + "*", count=1000)):
        kind = str(r.type(key))  # decode_responses: already a str
        size = {"set": r.scard, "zset": r.zcard, "hash": r.hlen, "list": r.llen}.get(kind)
        out[key.removeprefix(PREFIX)] = {
            "type": kind,
            "count": size(key) if size else 1,
            "bytes": int(r.memory_usage(key, samples=0) or 0),
        }
    return out


def step(r: redis.Redis, before: int, jobs: int) -> dict[str, Any]:
    settle(r)
    now = used_memory(r)
    keys = keys_usage(r)
    return {
        "used_memory_delta": now - before,
        "bytes_per_job": (now - before) / jobs,
        "memory_usage_bytes_per_job": sum(k["bytes"] for k in keys.values()) / jobs,
        "keys": keys,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=100_000)
    a = p.parse_args()
    url = os.environ["BENCH_REDIS_URL"]
    r = redis.Redis.from_url(url, decode_responses=True)  # the measurements'; the queues have their own
    r.flushall()
    keep: dict[str, Any] = {"done_max_count": 10**9, "done_max_age_seconds": 0}  # every id stays in done
    scratch = Queue.from_url(url, name="memory-scratch", **keep)  # loads the scripts this test runs
    scratch.enqueue(["warm-up"])
    scratch.ack_many(scratch.claim(1))
    scratch.close()
    q = Queue.from_url(url, name=QUEUE, **keep)
    q.stats()  # its connection is open before the first reading
    r.flushall()  # the script cache stays
    time.sleep(0.5)
    before = used_memory(r)

    ids = [f"job-{i:07d}" for i in range(a.jobs)]  # 11 characters
    added = q.enqueue(ids)
    queued = step(r, before, a.jobs)
    acked = 0
    while leases := q.claim(500):
        acked += sum(res.acked for res in q.ack_many(leases))
    done = step(r, before, a.jobs)
    result = {
        "setqueue": setqueue.__file__,
        "redis_version": r.info("server")["redis_version"],
        "jobs": a.jobs,
        "id_length": len(ids[0]),
        "enqueued": added,
        "acked": acked,
        "used_memory_before": before,
        "queued": queued,
        "done": done,
    }
    q.close()
    print(json.dumps(result))
    return 0 if added == acked == a.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
