"""setqueue's JOB_HANDLER of the workflows matrix (bench/workflows.py): ``handle`` records, in one round
trip, that a job ran and when (bench_common.record_time):

- a fan-in member, ``m:<run>:<n>``: the end of its handler (the time taken just before that one write,
  its last act; the worker acks it after);
- a fan-in callback, ``cb:<run>``, or a chain step, ``step:<run>:<n>``: the start of its handler, as a
  peer's chain step (bench_common.chain_step) records it."""

import time
from typing import Any

from bench_common import record_time


def handle(lease: Any) -> None:
    now = time.time()
    job_id = str(lease.id)
    if job_id.startswith("m:"):
        now = time.time()  # a member: its end, as late as this handler can tell it
    record_time(job_id, now)
