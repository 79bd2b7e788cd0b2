"""Prometheus metrics of the three services, one class per role.

Every name starts with ``setqueue_``; counters end in ``_total`` and durations are in seconds.
Every metric about jobs or a queue's state carries the ``queue`` label (the name in QUEUE_NAME;
a sharded queue's shards count as one); there are no per-worker or per-job labels: Prometheus's
``instance`` label already names the replica. Each role registers only its own metrics, so a
gauge such as ``setqueue_queue_depth`` comes from the cleaner alone and is not multiplied by the
number of worker replicas.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from setqueue.keys import STATES

# Processing time of a job: from milliseconds (no-op jobs) to minutes (long jobs renewing leases).
PROCESSING_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Queue wait and end-to-end time also cover a backlog that takes an hour to drain, in steps of at
# most 1.5x from 10 s up, so that a p99 read off them is within a step of the truth, not an
# interpolation across a decade.
WAIT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60,
    90, 120, 180, 240, 300, 450, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip
SWEEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def new_registry() -> CollectorRegistry:
    """A fresh registry per service instance, with the process collector (CPU, memory, fds)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


class BatchHistogram:
    """A Prometheus histogram for the worker's hot path: ``observe_many`` takes its lock once
    per batch of jobs, where prometheus_client's Histogram takes two locks per observation.
    Exported through the registry as an ordinary histogram (``_bucket``, ``_count``, ``_sum``),
    one series per combination of its ``labels``' values."""

    def __init__(
        self,
        name: str,
        documentation: str,
        buckets: Iterable[float],
        registry: CollectorRegistry,
        labels: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self._bounds = tuple(sorted(float(b) for b in buckets))  # the +Inf bucket is the extra slot
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}  # values -> (counts, [sum])
        self._lock = threading.Lock()
        if not self.labels:
            self.observe_many(())  # an unlabelled histogram exists from the start
        registry.register(self)

    def observe(self, value: float, *label_values: str) -> None:
        self.observe_many((value,), *label_values)

    def observe_many(self, values: Iterable[float], *label_values: str) -> None:
        """Observe ``values``, all in the series of ``label_values`` (one value per label)."""
        if len(label_values) != len(self.labels):
            raise ValueError(f"{self.name} takes the values of {self.labels}, got {label_values}")
        bounds = self._bounds
        with self._lock:
            series = self._series.get(label_values)
            if series is None:
                series = self._series[label_values] = ([0] * (len(bounds) + 1), [0.0])
            counts, total = series
            for value in values:
                counts[bisect_left(bounds, value)] += 1  # le is inclusive: value <= bound
                total[0] += value

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snapshot = {values: (list(counts), total[0]) for values, (counts, total) in self._series.items()}
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for label_values, (counts, total) in sorted(snapshot.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*self._bounds, float("inf")), counts, strict=True):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))  # type: ignore[no-untyped-call]
            family.add_metric(list(label_values), buckets, total)
        yield family


class ServiceMetrics:
    """What every service exports."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.redis_up = Gauge(
            "setqueue_redis_up",
            "1 when the last Redis call of this process succeeded, 0 while Redis is unreachable "
            "(or, with WAIT_REPLICAS, while its writes are not confirmed by enough replicas).",
            registry=registry,
        )
        self.redis_noeviction = Gauge(
            "setqueue_redis_noeviction",
            "1 when the maxmemory-policy of Redis (every master of a cluster) is noeviction, 0 when one "
            "evicts keys (a full Redis then drops queue keys: jobs are lost), -1 while unknown (not read "
            "yet, or this user may run neither INFO nor CONFIG GET).",
            registry=registry,
        )
        self.redis_noeviction.set(-1)
        self.redis_out_of_memory = Gauge(
            "setqueue_redis_out_of_memory",
            "1 while Redis refuses this process's writes because it is out of memory (maxmemory reached "
            "with noeviction: an enqueue waits), else 0.",
            registry=registry,
        )
        # The cleaner's alone: how full Redis is (see CleanerMetrics).
        self.redis_memory_used_ratio: Gauge | None = None


class CreatorMetrics(ServiceMetrics):
    def __init__(self, registry: CollectorRegistry, queue: str = "default") -> None:
        super().__init__(registry)
        self.jobs_created = Counter(
            "setqueue_jobs_created_total",
            "Job ids newly added to todos (ids the queue already knew are not counted), by queue.",
            ["queue"],
            registry=registry,
        ).labels(queue)
        self.jobs_duplicate = Counter(
            "setqueue_jobs_duplicate_total",
            "Job ids submitted that the queue already knew (todos, in_progress, done or failed), by queue.",
            ["queue"],
            registry=registry,
        ).labels(queue)


class WorkerMetrics(ServiceMetrics):
    """Counters and histograms of jobs carry the ``queue`` they came from; the gauges of slots and
    threads are the process's."""

    def __init__(self, registry: CollectorRegistry, queues: Sequence[str] = ("default",)) -> None:
        super().__init__(registry)

        def per_queue(name: str, documentation: str) -> Counter:
            counter = Counter(name, documentation, ["queue"], registry=registry)
            for queue in queues:
                counter.labels(queue)
            return counter

        self.jobs_claimed = per_queue("setqueue_jobs_claimed_total", "Jobs claimed (moved todos -> in_progress).")
        self.jobs_completed = Counter(
            "setqueue_jobs_completed_total",
            "Jobs finished by this worker, by queue and outcome: success (acked into done) or failure "
            "(the handler raised; retried or dead-lettered).",
            ["queue", "outcome"],
            registry=registry,
        )
        for queue in queues:
            for outcome in ("success", "failure"):
                self.jobs_completed.labels(queue, outcome)
        self.jobs_retried = per_queue(
            "setqueue_jobs_retried_total", "Failed jobs put back into todos for another attempt."
        )
        self.jobs_dead_lettered = dead_lettered_counter(registry, queues)
        self.jobs_released = per_queue(
            "setqueue_jobs_released_total",
            "Jobs handed back to todos unstarted or unfinished, without using an attempt (a buffered job "
            "that waited too long for a slot, or a shutdown).",
        )
        self.jobs_scheduled = per_queue(
            "setqueue_jobs_scheduled_total",
            "Failed jobs put into scheduled to be retried later (backoff or RetryLater).",
        )
        self.lease_renewals = Counter(
            "setqueue_lease_renewals_total", "Lease renewals that succeeded.", registry=registry
        )
        self.leases_lost = per_queue(
            "setqueue_leases_lost_total",
            "Leases found lost on renewal (the lock expired or another worker owns the job).",
        )
        self.stale_acks = per_queue(
            "setqueue_stale_acks_total",
            "Acks and fails refused because the lease was lost; nothing was changed.",
        )
        self.jobs_in_progress = Gauge(
            "setqueue_jobs_in_progress", "Jobs this worker holds right now.", registry=registry
        )
        self.jobs_running = Gauge(
            "setqueue_jobs_running", "Jobs running in this worker's slots right now.", registry=registry
        )
        self.worker_slots = Gauge(
            "setqueue_worker_slots", "Jobs this worker can run at once (CONCURRENCY).", registry=registry
        )
        self.job_timeouts = per_queue(
            "setqueue_job_timeouts_total", "Jobs that ran past JOB_TIMEOUT_SECONDS: failed with reason timeout."
        )
        self.standin_sweeps = per_queue(
            "setqueue_standin_sweeps_total",
            "Sweeps this worker made because nobody (no cleaner) had swept the queue for STANDIN_SWEEP_SECONDS.",
        )
        self.seconds_since_sweep = Gauge(
            "setqueue_seconds_since_sweep",
            "How long ago anyone swept the queue (its oldest shard), as this worker last looked, by queue.",
            ["queue"],
            registry=registry,
        )
        self.jobs_cancelled = Counter(
            "setqueue_jobs_cancelled_total",
            "Cancelled jobs this worker stopped, by queue and where they were: running (interrupted) "
            "or unstarted (dropped from its buffer).",
            ["queue", "where"],
            registry=registry,
        )
        self.history_records = history_counter(registry)
        self.claims_held = Counter(
            "setqueue_claims_held_total",
            "Claims that flow control held back (got fewer jobs than asked while jobs waited), by queue and "
            "reason: paused, rate (the queue's rate), group (a group's concurrency or rate).",
            ["queue", "reason"],
            registry=registry,
        )
        for queue in queues:
            for reason in ("paused", "rate", "group"):
                self.claims_held.labels(queue, reason)
        self.zombie_threads = Gauge(
            "setqueue_worker_zombie_threads",
            "Slots whose job timed out but has not returned: lost until it does.",
            registry=registry,
        )
        self.processing_seconds = BatchHistogram(
            "setqueue_job_processing_seconds",
            "Time the handler took per job, by queue.",
            PROCESSING_BUCKETS,
            registry,
            ["queue"],
        )
        self.queue_wait_seconds = BatchHistogram(
            "setqueue_job_queue_wait_seconds",
            "Enqueue (or becoming due) to claim, by the Redis clock, by queue and the job's priority.",
            WAIT_BUCKETS,
            registry,
            ["queue", "priority"],
        )
        self.end_to_end_seconds = BatchHistogram(
            "setqueue_job_end_to_end_seconds",
            "Enqueue to done, by the Redis clock, by queue.",
            WAIT_BUCKETS,
            registry,
            ["queue"],
        )
        for queue in queues:  # every queue's series, from the start
            self.processing_seconds.observe_many((), queue)
            self.queue_wait_seconds.observe_many((), queue, "0")
            self.end_to_end_seconds.observe_many((), queue)


class SupervisorMetrics:
    """What the worker's supervisor (PROCESSES > 1) exports of its own, beside the sum of its
    children's metrics (``worker.supervisor`` combines them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.processes = Gauge(
            "setqueue_worker_processes",
            "Worker processes of this supervisor running right now (PROCESSES when all are up).",
            registry=registry,
        )
        self.restarts = Counter(
            "setqueue_worker_process_restarts",
            "Worker processes this supervisor restarted after they exited unasked or were killed.",
            registry=registry,
        )


# setqueue_groups' stands, each from a field of stats().
GROUP_STANDS = {
    "waiting": "groups_waiting",
    "full": "groups_full",
    "resting": "groups_resting",
    "running": "groups_running",
}


class CleanerMetrics(ServiceMetrics):
    def __init__(
        self,
        registry: CollectorRegistry,
        schedules: Iterable[str] = (),
        *,
        audit: bool = False,
        queues: Sequence[str] = ("default",),
    ) -> None:
        super().__init__(registry)
        # Only with AUDIT on: a 0 from an audit that never ran would read as "nothing lost".
        self.audit = AuditMetrics(registry) if audit else None
        self.requeued = Counter(
            "setqueue_cleaner_requeued_total",
            "Jobs whose lease expired, moved back from in_progress to todos, by queue.",
            ["queue"],
            registry=registry,
        )
        self.jobs_dead_lettered = dead_lettered_counter(registry, queues)
        self.done_trimmed = Counter(
            "setqueue_done_trimmed_total",
            "Ids dropped from done by the age retention, by queue.",
            ["queue"],
            registry=registry,
        )
        self.redis_memory_used_ratio = Gauge(
            "setqueue_redis_memory_used_ratio",
            "Memory Redis counts against maxmemory, over maxmemory, of its fullest master (read every "
            "sweep round): 1 or more and Redis refuses the writes that add jobs; 0 when no maxmemory is "
            "set, -1 while unknown.",
            registry=registry,
        )
        self.redis_memory_used_ratio.set(-1)
        self.sweep_seconds = Histogram(
            "setqueue_sweep_duration_seconds", "Time one sweep took.", buckets=SWEEP_BUCKETS, registry=registry
        )
        self.last_sweep_timestamp = Gauge(
            "setqueue_last_sweep_timestamp_seconds",
            "Unix time of the last completed sweep.",
            registry=registry,
        )
        self.queue_depth = Gauge(
            "setqueue_queue_depth", "Number of ids in each state of each queue.", ["queue", "state"], registry=registry
        )
        self.todos_by_priority = Gauge(
            "setqueue_todos_by_priority",
            "Jobs waiting in todos, by queue and priority (-10 to 10, higher runs first).",
            ["queue", "priority"],
            registry=registry,
        )
        self.results_kept = Gauge(
            "setqueue_results_kept",
            "Results of done jobs kept for result() (dropped after RESULT_TTL_SECONDS), by queue.",
            ["queue"],
            registry=registry,
        )
        self.history_records = history_counter(registry)
        # Flow control, in aggregate: never one series per job group (their number is unbounded).
        self.paused = Gauge(
            "setqueue_queue_paused",
            "1 while the queue is paused (setqueue pause; a sharded queue: its shards paused), by queue.",
            ["queue"],
            registry=registry,
        )
        self.groups = Gauge(
            "setqueue_groups",
            "Job groups by queue and where they stand: waiting (with jobs waiting), full (at their "
            "concurrency), resting (their rate used up), running (with jobs in progress).",
            ["queue", "stand"],
            registry=registry,
        )
        self.grouped_waiting = Gauge(
            "setqueue_grouped_jobs_waiting",
            "Jobs waiting that have a group (part of todos), all groups together, by queue.",
            ["queue"],
            registry=registry,
        )
        self.oldest_pending_age = Gauge(
            "setqueue_oldest_pending_age_seconds",
            "Age of the oldest job not yet done or dead-lettered (0 when there is none), by queue.",
            ["queue"],
            registry=registry,
        )
        for queue in queues:
            self.requeued.labels(queue)
            self.done_trimmed.labels(queue)
            self.oldest_pending_age.labels(queue)
            self.todos_by_priority.labels(queue, "0")
            self.paused.labels(queue)
            self.grouped_waiting.labels(queue)
            for stand in GROUP_STANDS:
                self.groups.labels(queue, stand)
            for state in STATES:
                self.queue_depth.labels(queue, state)
        self.periodic_runs = Counter(
            "setqueue_periodic_runs_total",
            "Runs of periodic jobs (SCHEDULES) this cleaner created, by schedule name.",
            ["schedule"],
            registry=registry,
        )
        for name in schedules:
            self.periodic_runs.labels(name)


class AuditMetrics:
    """The cleaner's audit (AUDIT=true, ``setqueue.runtime.audit``): the findings of the last full audit."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(f"setqueue_audit_{name}", documentation, registry=registry)

        self.created = gauge("created", "Job ids the creators recorded as enqueued, as of the last audit.")
        self.lost = gauge("lost", "Created job ids in no state (todos, in_progress, done, failed, scheduled).")
        self.in_two_states = gauge("in_two_states", "Created job ids found in more than one state at once.")
        self.trimmed = gauge(
            "trimmed", "Created job ids in no state after a successful run: dropped from done by the retention."
        )
        self.duplicates = gauge("duplicates", "Job ids that ran successfully more than once.")
        self.unexplained_duplicates = gauge(
            "unexplained_duplicates",
            "Job ids that ran successfully more often than 1 + the times their lease was lost.",
        )
        self.last_timestamp = gauge("last_timestamp_seconds", "Unix time the last audit finished.")
        self.duration = gauge("duration_seconds", "Time the last audit took, spread over sweep rounds.")

    def publish(self, report: Mapping[str, Any]) -> None:
        """The figures of an audit report (``AuditReport.as_dict()``)."""
        self.created.set(report["created"])
        self.lost.set(report["lost"])
        self.in_two_states.set(report["in_two_states"])
        self.trimmed.set(report["trimmed"])
        self.duplicates.set(report["duplicates"])
        self.unexplained_duplicates.set(report["unexplained_duplicates"])
        self.last_timestamp.set(report["finished_at"])
        self.duration.set(report["seconds"])


def history_counter(registry: CollectorRegistry) -> Counter:
    """Workers (failed, timed out, handed back) and the cleaner (lease lost) record a line in a
    job's history for each transition off the happy path."""
    return Counter(
        "setqueue_history_records_total",
        "Transitions off the happy path this process recorded in jobs' histories, by queue and kind.",
        ["queue", "kind"],
        registry=registry,
    )


def dead_lettered_counter(registry: CollectorRegistry, queues: Sequence[str]) -> Counter:
    """Workers (attempts used up on fail) and the cleaner (on lease expiry) both dead-letter."""
    counter = Counter(
        "setqueue_jobs_dead_lettered_total",
        "Jobs moved into failed (the dead-letter set) by this process, by queue.",
        ["queue"],
        registry=registry,
    )
    for queue in queues:
        counter.labels(queue)
    return counter
