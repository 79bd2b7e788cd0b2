"""The seed design, as a reference: one job per claim, every step its own round trip.

claim = SRANDMEMBER todos; SMOVE todos in_progress id; SETEX lock:id 30 token
ack   = SMOVE in_progress done id; DEL lock:id
An idle worker sleeps 1 ms when todos is empty. SIGTERM ends it at once: the trial is over by then.
"""

import os
import time

import redis
from bench_common import run_job

TODOS, IN_PROGRESS, DONE = "naive:todos", "naive:in_progress", "naive:done"

if __name__ == "__main__":
    r = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], decode_responses=True)
    token = os.urandom(8).hex()
    while True:
        job_id = r.srandmember(TODOS)
        if job_id is None:
            time.sleep(0.001)
        elif r.smove(TODOS, IN_PROGRESS, job_id):  # else another worker took it
            r.setex("naive:lock:" + job_id, 30, token)
            run_job(job_id)
            r.smove(IN_PROGRESS, DONE, job_id)
            r.delete("naive:lock:" + job_id)
