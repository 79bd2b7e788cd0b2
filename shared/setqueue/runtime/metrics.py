"""Prometheus metrics of the three services, one class per role (docs/reference.md lists them).

Metrics about jobs carry the ``queue`` label (a sharded queue counts as one); no per-worker or per-job
labels: ``instance`` names the replica. Each role registers only its own metrics, so that a gauge such
as ``setqueue_queue_depth`` comes from the cleaner alone, not once per worker replica.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from setqueue.keys import STATES

PROCESSING_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# Up to an hour's backlog, in steps of at most 1.5x from 10 s: a p99 read off them is within a step.
WAIT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60,
    90, 120, 180, 240, 300, 450, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip
SWEEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
# The task label of a job that names no task the worker's registry declares (an unknown name, or no
# task call at all): the label's values are the declared names and this, never a name from a payload.
OTHER_TASK = "other"
JOB_OUTCOMES = ("success", "failure")


def new_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


def _gauge(registry: CollectorRegistry, name: str, documentation: str, *labels: str) -> Gauge:
    return Gauge(name, documentation, labels, registry=registry)


class BatchHistogram:
    """A histogram for the worker's hot path: ``observe_many`` takes its lock once per batch, where
    prometheus_client's takes two per observation. Exported as an ordinary histogram."""

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


class LinkCounters:
    """``setqueue_dependents_released_total`` and ``setqueue_dependency_failures_total``, by queue: read at
    each scrape from the dependency steps of the queues this process serves (``Workflows.released``: jobs
    it released from waiting, to the line or to run after a failed dependency with "run";
    ``Workflows.dependency_failures``: dependents it failed because a dependency failed, was cancelled
    or deleted). A release counts where it was made: the worker whose ack (or fail, cancel, delete)
    ended the dependency, or the cleaner whose sweep finished a release that a dead worker left."""

    RELEASED = "setqueue_dependents_released"
    FAILURES = "setqueue_dependency_failures"

    def __init__(self, registry: CollectorRegistry) -> None:
        self._steps: dict[str, object] = {}  # queue label -> the Workflows of the queue that counts
        self._lock = threading.Lock()
        registry.register(self)

    def watch(self, queue: str, steps: object) -> None:
        """Export the counters of ``steps`` (a queue's ``operations.links``) under label ``queue``."""
        with self._lock:
            self._steps[queue] = steps

    def _families(self) -> tuple[CounterMetricFamily, CounterMetricFamily]:
        released = CounterMetricFamily(
            self.RELEASED,
            "Jobs this process released from waiting once their dependencies ended (to the line, or to run).",
            labels=["queue"],
        )
        failures = CounterMetricFamily(
            self.FAILURES,
            "Waiting jobs this process failed because a dependency failed, was cancelled or deleted.",
            labels=["queue"],
        )
        return released, failures

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        released, failures = self._families()
        with self._lock:
            watched = sorted(self._steps.items())
        for queue, steps in watched:
            # Plain ints the dependency steps add to as they count (0 before a queue counted any).
            released.add_metric([queue], float(getattr(steps, "released", 0)))
            failures.add_metric([queue], float(getattr(steps, "dependency_failures", 0)))
        yield released
        yield failures


def watch_links(counters: LinkCounters, queue: object) -> None:
    """Export the dependency counters of ``queue`` (any queue of the library), and of each queue it serves
    as one that has dependency steps of its own, each under its name."""
    seen: set[int] = set()
    for each in (queue, *getattr(queue, "queues", ())):
        steps = getattr(getattr(each, "operations", None), "links", None)
        if steps is not None and id(steps) not in seen:
            seen.add(id(steps))
            counters.watch(str(getattr(each, "name", "default")), steps)


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.redis_up = _gauge(
            registry,
            "setqueue_redis_up",
            "1 when the last Redis call succeeded, 0 while Redis is unreachable (or writes are not replicated).",
        )
        self.redis_noeviction = _gauge(
            registry,
            "setqueue_redis_noeviction",
            "1 when every master's maxmemory-policy is noeviction, 0 when one evicts keys, -1 unknown.",
        )
        self.redis_noeviction.set(-1)
        self.redis_out_of_memory = _gauge(
            registry, "setqueue_redis_out_of_memory", "1 while Redis refuses this process's writes for lack of memory."
        )
        # The cleaner's alone.
        self.redis_memory_used_ratio: Gauge | None = None


class CreatorMetrics(ServiceMetrics):
    def __init__(self, registry: CollectorRegistry, queue: str = "default") -> None:
        super().__init__(registry)
        self.jobs_created = Counter(
            "setqueue_jobs_created_total", "Job ids newly added to todos.", ["queue"], registry=registry
        ).labels(queue)
        self.jobs_duplicate = Counter(
            "setqueue_jobs_duplicate_total",
            "Job ids submitted that the queue already knew.",
            ["queue"],
            registry=registry,
        ).labels(queue)


class WorkerMetrics(ServiceMetrics):
    """Job counters and histograms carry the ``queue``; the gauges of slots and threads are the process's.
    ``tasks``: the names a Tasks registry declares, when the worker serves one (None: a plain handler,
    and no series by task)."""

    def __init__(
        self, registry: CollectorRegistry, queues: Sequence[str] = ("default",), tasks: Sequence[str] | None = None
    ) -> None:
        super().__init__(registry)

        def per_queue(name: str, documentation: str) -> Counter:
            counter = Counter(name, documentation, ["queue"], registry=registry)
            for queue in queues:
                counter.labels(queue)
            return counter

        self.jobs_claimed = per_queue("setqueue_jobs_claimed_total", "Jobs claimed (moved todos -> in_progress).")
        self.jobs_completed = Counter(
            "setqueue_jobs_completed_total",
            "Jobs finished by this worker, by outcome: success or failure (the handler raised).",
            ["queue", "outcome"],
            registry=registry,
        )
        for queue in queues:
            for outcome in JOB_OUTCOMES:
                self.jobs_completed.labels(queue, outcome)
        self.task_jobs = Counter(
            "setqueue_task_jobs_total",
            "Jobs of a task registry finished by this worker, by task (a declared name, or other) and outcome.",
            ["queue", "task", "outcome"],
            registry=registry,
        )
        self.task_run_seconds = BatchHistogram(
            "setqueue_task_run_seconds",
            "Time the task took per job, by task (a declared name, or other).",
            PROCESSING_BUCKETS,
            registry,
            ["queue", "task"],
        )
        for queue in queues:  # every declared task's counts, from the start (run times: from its first run)
            for task in (*tasks, OTHER_TASK) if tasks is not None else ():
                for outcome in JOB_OUTCOMES:
                    self.task_jobs.labels(queue, task, outcome)
        self.jobs_retried = per_queue(
            "setqueue_jobs_retried_total", "Failed jobs put back into todos for another attempt."
        )
        self.jobs_dead_lettered = dead_lettered_counter(registry, queues)
        self.jobs_released = per_queue(
            "setqueue_jobs_released_total",
            "Jobs handed back to todos unstarted or unfinished, without using an attempt.",
        )
        self.jobs_scheduled = per_queue("setqueue_jobs_scheduled_total", "Failed jobs scheduled to be retried later.")
        self.links = LinkCounters(registry)  # the service watches its queue's
        self.lease_renewals = Counter(
            "setqueue_lease_renewals_total", "Lease renewals that succeeded.", registry=registry
        )
        self.leases_lost = per_queue("setqueue_leases_lost_total", "Leases found lost on renewal.")
        self.stale_acks = per_queue("setqueue_stale_acks_total", "Acks and fails refused because the lease was lost.")
        self.jobs_in_progress = _gauge(registry, "setqueue_jobs_in_progress", "Jobs this worker holds right now.")
        self.jobs_running = _gauge(registry, "setqueue_jobs_running", "Jobs running in this worker's slots right now.")
        self.worker_slots = _gauge(registry, "setqueue_worker_slots", "Jobs this worker can run at once (CONCURRENCY).")
        self.job_timeouts = per_queue(
            "setqueue_job_timeouts_total", "Jobs that ran past JOB_TIMEOUT_SECONDS: failed with reason timeout."
        )
        self.standin_sweeps = per_queue(
            "setqueue_standin_sweeps_total",
            "Sweeps this worker made because nobody had swept the queue for STANDIN_SWEEP_SECONDS.",
        )
        self.seconds_since_sweep = _gauge(
            registry,
            "setqueue_seconds_since_sweep",
            "How long ago anyone swept the queue (its oldest shard), as this worker last looked.",
            "queue",
        )
        self.jobs_cancelled = Counter(
            "setqueue_jobs_cancelled_total",
            "Cancelled jobs this worker stopped: running or unstarted.",
            ["queue", "where"],
            registry=registry,
        )
        self.history_records = history_counter(registry)
        self.claims_held = Counter(
            "setqueue_claims_held_total",
            "Claims that limits held back, by reason: paused, rate or group.",
            ["queue", "reason"],
            registry=registry,
        )
        for queue in queues:
            for reason in ("paused", "rate", "group"):
                self.claims_held.labels(queue, reason)
        self.zombie_threads = _gauge(
            registry,
            "setqueue_worker_zombie_threads",
            "Slots whose job timed out but has not returned: lost until it does.",
        )
        self.processing_seconds = BatchHistogram(
            "setqueue_job_processing_seconds", "Time the handler took per job.", PROCESSING_BUCKETS, registry, ["queue"]
        )
        self.queue_wait_seconds = BatchHistogram(
            "setqueue_job_queue_wait_seconds",
            "Enqueue (or becoming due) to claim, by the Redis clock.",
            WAIT_BUCKETS,
            registry,
            ["queue", "priority"],
        )
        self.end_to_end_seconds = BatchHistogram(
            "setqueue_job_end_to_end_seconds", "Enqueue to done, by the Redis clock.", WAIT_BUCKETS, registry, ["queue"]
        )
        for queue in queues:  # every queue's series, from the start
            self.processing_seconds.observe_many((), queue)
            self.queue_wait_seconds.observe_many((), queue, "0")
            self.end_to_end_seconds.observe_many((), queue)


class SupervisorMetrics:
    """The supervisor's own (PROCESSES > 1), beside the sum of its children's."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.processes = _gauge(
            registry, "setqueue_worker_processes", "Worker processes of this supervisor running now."
        )
        self.restarts = Counter(
            "setqueue_worker_process_restarts", "Worker processes this supervisor restarted.", registry=registry
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
            "Jobs whose lease expired, moved back to todos.",
            ["queue"],
            registry=registry,
        )
        self.jobs_dead_lettered = dead_lettered_counter(registry, queues)
        self.done_trimmed = Counter(
            "setqueue_done_trimmed_total", "Ids dropped from done by the age retention.", ["queue"], registry=registry
        )
        self.redis_memory_used_ratio = _gauge(
            registry,
            "setqueue_redis_memory_used_ratio",
            "Used over maxmemory of the fullest master: 1 and writes are refused; 0 no maxmemory, -1 unknown.",
        )
        self.redis_memory_used_ratio.set(-1)
        self.sweep_seconds = Histogram(
            "setqueue_sweep_duration_seconds", "Time one sweep took.", buckets=SWEEP_BUCKETS, registry=registry
        )
        self.last_sweep_timestamp = _gauge(
            registry, "setqueue_last_sweep_timestamp_seconds", "Unix time of the last completed sweep."
        )
        self.queue_depth = _gauge(
            registry, "setqueue_queue_depth", "Number of ids in each state of each queue.", "queue", "state"
        )
        self.todos_by_priority = _gauge(
            registry, "setqueue_todos_by_priority", "Jobs waiting in todos, by priority.", "queue", "priority"
        )
        self.results_kept = _gauge(
            registry, "setqueue_results_kept", "Results of done jobs kept for result().", "queue"
        )
        self.history_records = history_counter(registry)
        self.links = LinkCounters(registry)  # releases a sweep finished: the service watches each queue's
        # Never one series per job group: their number is unbounded.
        self.paused = _gauge(registry, "setqueue_queue_paused", "1 while the queue is paused.", "queue")
        self.groups = _gauge(
            registry,
            "setqueue_groups",
            "Job groups by stand: waiting, full (at their concurrency), resting (rate used up), running.",
            "queue",
            "stand",
        )
        self.grouped_waiting = _gauge(
            registry, "setqueue_grouped_jobs_waiting", "Jobs waiting that have a group (part of todos).", "queue"
        )
        self.oldest_pending_age = _gauge(
            registry,
            "setqueue_oldest_pending_age_seconds",
            "Age of the oldest job not yet done or dead-lettered (0 if none).",
            "queue",
        )
        self.queue_workers = _gauge(
            registry,
            "setqueue_queue_workers",
            "Live workers serving the queue, as the registry of live workers counts them.",
            "queue",
        )
        for queue in queues:
            self.queue_workers.labels(queue)
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
            "Runs of periodic jobs this cleaner created.",
            ["schedule"],
            registry=registry,
        )
        for name in schedules:
            self.periodic_runs.labels(name)


class AuditMetrics:
    """The findings of the cleaner's last full audit (AUDIT=true)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(f"setqueue_audit_{name}", documentation, registry=registry)

        self.created = gauge("created", "Job ids the creators recorded.")
        self.lost = gauge("lost", "Created job ids in no state.")
        self.in_two_states = gauge("in_two_states", "Created job ids in more than one state.")
        self.trimmed = gauge("trimmed", "Created job ids dropped from done by the retention.")
        self.duplicates = gauge("duplicates", "Job ids that succeeded more than once.")
        self.unexplained_duplicates = gauge(
            "unexplained_duplicates", "Job ids that succeeded more often than 1 + their lost leases."
        )
        self.last_timestamp = gauge("last_timestamp_seconds", "Unix time the last audit finished.")
        self.duration = gauge("duration_seconds", "Time the last audit took.")

    def publish(self, report: Mapping[str, Any]) -> None:
        """The figures of ``AuditReport.as_dict()``."""
        for name in ("created", "lost", "in_two_states", "trimmed", "duplicates", "unexplained_duplicates"):
            getattr(self, name).set(report[name])
        self.last_timestamp.set(report["finished_at"])
        self.duration.set(report["seconds"])


def history_counter(registry: CollectorRegistry) -> Counter:
    return Counter(
        "setqueue_history_records_total",
        "Transitions off the happy path recorded in jobs' histories.",
        ["queue", "kind"],
        registry=registry,
    )


def dead_lettered_counter(registry: CollectorRegistry, queues: Sequence[str]) -> Counter:
    counter = Counter(
        "setqueue_jobs_dead_lettered_total",
        "Jobs moved into failed (dead-lettered) by this process.",
        ["queue"],
        registry=registry,
    )
    for queue in queues:
        counter.labels(queue)
    return counter
