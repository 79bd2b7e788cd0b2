"""setqueue: a reliable Redis work queue on the set model.

from setqueue import Queue
q = Queue.from_url("redis://localhost:6379/0", name="default", lease_seconds=30, max_attempts=5)
q.enqueue(["a", "b"])
for lease in q.claim(count=10):
    ...
    q.ack(lease)
"""

import logging

from setqueue.backoff import Backoff
from setqueue.keys import QueueKeys
from setqueue.lease import LeaseKeeper
from setqueue.queue import (
    AckResult,
    FailOutcome,
    JobInfo,
    JobTimeout,
    Lease,
    MoveTo,
    PermanentJobError,
    Queue,
    RetryLater,
    SweepResult,
)
from setqueue.replication import NotReplicated
from setqueue.sharded import open_queue

__all__ = [
    "AckResult",
    "Backoff",
    "FailOutcome",
    "JobInfo",
    "JobTimeout",
    "Lease",
    "LeaseKeeper",
    "MoveTo",
    "NotReplicated",
    "PermanentJobError",
    "Queue",
    "QueueKeys",
    "RetryLater",
    "SweepResult",
    "open_queue",
]
__version__ = "0.1.0"

# A library stays quiet unless the application configures logging (the services do).
logging.getLogger("setqueue").addHandler(logging.NullHandler())
