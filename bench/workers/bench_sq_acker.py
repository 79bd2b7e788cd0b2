"""The producer matrix's worker that acks at once (``--producer-worker acker``), run with a code tree's
setqueue: ``python bench_sq_acker.py QUEUE CLAIM_BATCH``. It claims up to CLAIM_BATCH jobs, runs each (a
no-op, counted: one INCRBY of the counter by the batch's size, so the counter still proves each job ran
once), acks them in one ``ack_many`` with each job's result (what bench_sq_handler.handle_result returns),
and waits on the queue's wake list when nothing is left. No ack delay, no threads, no round trip per job:
a round trip is the client's and the queue's, not the worker's. SIGTERM ends it at once: the trial is
over by then."""

import os
import sys

from bench_common import COUNTER, client

import setqueue

if __name__ == "__main__":
    queue, batch = setqueue.open_queue(os.environ["BENCH_REDIS_URL"], sys.argv[1]), int(sys.argv[2])
    while True:
        leases = queue.claim(batch)
        if not leases:
            queue.wait_for_work(1.0)
            continue
        client().incrby(COUNTER, len(leases))
        queue.ack_many(leases, results=[{"id": lease.id, "ok": True} for lease in leases])
