"""setqueue: a reliable Redis work queue on the set model.

    from setqueue import open_queue
    q = open_queue("redis://localhost:6379/0", "default", lease_seconds=30, max_attempts=5)
    q.enqueue(["a", "b"])
    for lease in q.claim(count=10):
        ...
        q.ack(lease)

The core needs only redis-py; ``setqueue.runtime`` (what the services run on) is never imported here."""

import logging

from setqueue.client import OptionError
from setqueue.factory import open_queue
from setqueue.interface import JobQueue, Shard
from setqueue.jobs import (
    AckResult,
    DependencyResult,
    FailOutcome,
    HistoryEntry,
    JobCancelled,
    JobFailed,
    JobInfo,
    JobRef,
    JobTimeout,
    Lease,
    Link,
    MoveTo,
    PayloadError,
    PermanentJobError,
    Progress,
    RenewOutcome,
    ResultGone,
    RetryLater,
    SweepResult,
    UnknownJob,
    WaitProgress,
)
from setqueue.keys import QueueKeys
from setqueue.layout import LayoutVersionError
from setqueue.lease import LeaseKeeper
from setqueue.queue import Queue
from setqueue.replication import NotReplicated
from setqueue.scripts import new_request_id
from setqueue.tasks import Sent, Task, Tasks, current_lease
from setqueue.version import __version__

__all__ = [
    "AckResult",
    "DependencyResult",
    "FailOutcome",
    "HistoryEntry",
    "JobCancelled",
    "JobFailed",
    "JobInfo",
    "JobQueue",
    "JobRef",
    "JobTimeout",
    "LayoutVersionError",
    "Lease",
    "LeaseKeeper",
    "Link",
    "MoveTo",
    "NotReplicated",
    "OptionError",
    "PayloadError",
    "PermanentJobError",
    "Progress",
    "Queue",
    "QueueKeys",
    "RenewOutcome",
    "ResultGone",
    "RetryLater",
    "Sent",
    "Shard",
    "SweepResult",
    "Task",
    "Tasks",
    "UnknownJob",
    "WaitProgress",
    "__version__",
    "current_lease",
    "new_request_id",
    "open_queue",
]

# A library stays quiet unless the application configures logging (the services do).
logging.getLogger("setqueue").addHandler(logging.NullHandler())
