"""Redis memory per job of one code tree's setqueue, run by bench/memory.py with that tree on PYTHONPATH.
Prints one JSON object."""

import argparse
import json
import os
import time
from typing import Any

import redis

import setqueue
from setqueue import Queue

PREFIX = "setqueue:{bench}:"
KEEP: dict[str, Any] = {"done_max_count": 10**9, "done_max_age_seconds": 0}  # every id stays in done


def reading(r: redis.Redis, before: int, jobs: int) -> dict[str, Any]:
    for pattern in ("req:*", "wake"):  # what expires by itself anyway
        keys = list(r.scan_iter(match=PREFIX + pattern, count=1000))
        for i in range(0, len(keys), 1000):
            r.delete(*keys[i : i + 1000])
    time.sleep(0.5)  # serverCron finishes any incremental rehash
    keys = {}
    for key in sorted(r.scan_iter(match=PREFIX + "*", count=1000)):
        kind = str(r.type(key))
        size = {"set": r.scard, "zset": r.zcard, "hash": r.hlen, "list": r.llen}.get(kind)
        n, size_bytes = size(key) if size else 1, int(r.memory_usage(key, samples=0) or 0)
        keys[key.removeprefix(PREFIX)] = {"type": kind, "count": n, "bytes": size_bytes}
    used, by_keys = int(r.info("memory")["used_memory"]) - before, sum(k["bytes"] for k in keys.values()) / jobs
    return {
        "used_memory_delta": used,
        "bytes_per_job": used / jobs,
        "memory_usage_bytes_per_job": by_keys,
        "keys": keys,
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=100_000)
    jobs = p.parse_args().jobs
    url = os.environ["BENCH_REDIS_URL"]
    r = redis.Redis.from_url(url, decode_responses=True)
    r.flushall()
    scratch = Queue.from_url(url, name="memory-scratch", **KEEP)  # loads the scripts this run uses
    scratch.enqueue(["warm-up"])
    scratch.ack_many(scratch.claim(1))
    scratch.close()
    queue = Queue.from_url(url, name="bench", **KEEP)
    queue.stats()  # its connection is open before the first reading
    r.flushall()  # the script cache stays
    time.sleep(0.5)
    before = int(r.info("memory")["used_memory"])
    added = queue.enqueue([f"job-{i:07d}" for i in range(jobs)])  # 11 characters
    queued = reading(r, before, jobs)
    acked = 0
    while leases := queue.claim(500):
        acked += sum(res.acked for res in queue.ack_many(leases))
    done = reading(r, before, jobs)
    version = r.info("server")["redis_version"]
    out = {"setqueue": setqueue.__file__, "redis_version": version, "jobs": jobs, "id_length": 11}
    print(json.dumps({**out, "enqueued": added, "acked": acked, "queued": queued, "done": done}))
    queue.close()
    raise SystemExit(0 if added == acked == jobs else 1)
