"""A worker stands in for a missing cleaner: when no one has swept a queue (or shard) for
STANDIN_SWEEP_SECONDS (each sweep stamps it; counting from the worker's start if never), it sweeps
it, warns and counts it. Sweeping is safe from any number of processes, a late cleaner included.
"""

from __future__ import annotations

import logging
import time

from setqueue.client import TRANSIENT_REDIS_ERRORS
from setqueue.interface import JobQueue
from setqueue.runtime.logs import plural
from setqueue.runtime.metrics import WorkerMetrics

LOOK_EVERY_SECONDS = 5.0  # at most; and at least four times in the window


class StandIn:
    """``after`` 0: never; ``tick`` from the supervisor."""

    def __init__(self, queue: JobQueue, after: float, metrics: WorkerMetrics, log: logging.Logger) -> None:
        self.queue = queue
        self.after = after
        self.metrics = metrics
        self.log = log
        self.started = time.monotonic()
        self.every = min(LOOK_EVERY_SECONDS, after / 4)
        self._next_look = self.started + self.every

    def tick(self, now: float) -> None:
        if not self.after or now < self._next_look:
            return
        self._next_look = now + self.every
        try:
            for named in self.queue.queues:
                self._look(named, now)
        except TRANSIENT_REDIS_ERRORS as exc:  # the supervisor's own calls wait out the outage
            self.log.debug("could not look at the sweep stamps: %s", exc)
        except Exception:  # never stops the worker
            self.log.exception("the stand-in sweep failed; trying again in %.0fs", self.every)

    def _look(self, queue: JobQueue, now: float) -> None:
        ages = [shard.seconds_since_sweep() for shard in queue.shards]
        up = now - self.started
        age = max(up if a is None else a for a in ages)
        self.metrics.seconds_since_sweep.labels(queue.name).set(age)
        if age < self.after:
            return
        result = queue.sweep()
        self.metrics.standin_sweeps.labels(queue.name).inc()
        self.log.warning(
            "no cleaner has swept queue %s for %.0fs: this worker swept it (requeued %s, dead-lettered %d); "
            "run a cleaner (python -m cleaner)",
            queue.name,
            age,
            plural(len(result.requeued), "job"),
            len(result.dead_lettered),
        )
