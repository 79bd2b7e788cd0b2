"""setqueue: a reliable Redis work queue on the set model.

from setqueue import Queue
q = Queue.from_url("redis://localhost:6379/0", name="default", lease_seconds=30, max_attempts=5)
q.enqueue(["a", "b"])
for lease in q.claim(count=10):
    ...
    q.ack(lease)
"""

from setqueue.backoff import Backoff
from setqueue.keys import QueueKeys
from setqueue.lease import LeaseKeeper
from setqueue.queue import AckResult, FailOutcome, JobInfo, Lease, Queue, SweepResult

__all__ = [
    "AckResult",
    "Backoff",
    "FailOutcome",
    "JobInfo",
    "Lease",
    "LeaseKeeper",
    "Queue",
    "QueueKeys",
    "SweepResult",
]
__version__ = "0.1.0"

# Raise it from a job handler to dead-letter the job at once (see setqueue.demo for the convention).
from setqueue.runners import PermanentJobError

__all__ += ["PermanentJobError"]
