"""setqueue's JOB_HANDLER of the workflows matrix (bench/workflows.py): ``handle`` records, in one round
trip, that a job ran (INCR of the bench's counter: counter == jobs means each ran once) and when (HSET of
time.time() in the hash FLOW + the job's run, field the job id):

- a fan-in member, ``m:<run>:<n>``: the end of its handler (the time taken just before that one write,
  its last act; the worker acks it after);
- a fan-in callback, ``cb:<run>``, or a chain step, ``step:<run>:<n>``: the start of its handler."""

import time
from typing import Any

from bench_common import COUNTER, client

FLOW = "bench:flow:"  # + run: hash, job id -> time.time() of its end (member) or start (callback, step)


def handle(lease: Any) -> None:
    now = time.time()
    job_id = str(lease.id)
    kind, run = job_id.split(":")[:2]
    if kind == "m":
        now = time.time()  # a member: its end, as late as this handler can tell it
    client().pipeline(transaction=False).incr(COUNTER).hset(FLOW + run, job_id, repr(now)).execute()
