"""The seed design, as a reference: one job per claim, every step its own round trip.

claim = SRANDMEMBER todos; SMOVE todos in_progress id; SETEX lock:id 30 token
ack   = SMOVE in_progress done id; DEL lock:id
An idle worker polls (sleeps BENCH_NAIVE_POLL seconds, default 0.001, when todos is empty).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import redis
from bench_common import run_job

PREFIX = "naive:"
TODOS, IN_PROGRESS, DONE = PREFIX + "todos", PREFIX + "in_progress", PREFIX + "done"


def main() -> None:
    r = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], decode_responses=True)
    poll = float(os.environ.get("BENCH_NAIVE_POLL", "0.001"))
    token = os.urandom(8).hex()
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    while running:
        job_id = r.srandmember(TODOS)
        if job_id is None:
            time.sleep(poll)
            continue
        if not r.smove(TODOS, IN_PROGRESS, job_id):
            continue  # another worker took it
        r.setex(PREFIX + "lock:" + job_id, 30, token)
        run_job(job_id)
        r.smove(IN_PROGRESS, DONE, job_id)
        r.delete(PREFIX + "lock:" + job_id)
    sys.exit(0)


if __name__ == "__main__":
    main()
