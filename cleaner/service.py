"""The cleaner: every SWEEP_INTERVAL, requeue jobs whose lease expired, trim done, create due
periodic runs (SCHEDULES), publish the queue depth and its live workers; with AUDIT, record lost leases and audit every
created id (``setqueue.runtime.audit``) each AUDIT_INTERVAL, into the setqueue_audit_* gauges."""

from __future__ import annotations

import functools
import time

from setqueue.interface import JobQueue
from setqueue.keys import STATES
from setqueue.registry import live_worker_count
from setqueue.runtime.audit import Auditor, AuditPass, AuditRecorder
from setqueue.runtime.logs import plural
from setqueue.runtime.metrics import GROUP_STANDS, CleanerMetrics, new_registry, watch_links
from setqueue.runtime.periodic import due_runs, parse_schedules, redis_now, register, registered
from setqueue.runtime.service import Service, Stopping
from setqueue.runtime.settings import CleanerSettings, SettingError

MAX_SWEEP_ROUNDS = 100  # sweeps back to back while each one hits SWEEP_BATCH
AUDIT_IDS_PER_ROUND = 20_000  # bounds one round's audit work: a larger queue takes several rounds


class CleanerService(Service[CleanerSettings, CleanerMetrics]):
    role = "cleaner"

    def __init__(self, settings: CleanerSettings, queue: JobQueue | None = None) -> None:
        try:
            schedules = parse_schedules(settings.schedules)
        except ValueError as exc:  # a @file may have changed since the settings were checked
            raise SettingError("SCHEDULES", str(exc)) from None
        metrics = CleanerMetrics(
            new_registry(), [s.name for s in schedules], audit=settings.audit, queues=settings.queue_names
        )
        super().__init__(settings, metrics, queue)
        self.served = self.queue.queues  # one named queue at a time (a sharded one is one)
        for served in self.served:  # releases its sweeps finished, that dead workers left
            watch_links(self.metrics.links, served)
        # Periodic runs go to QUEUE_NAME's first queue and the audit reads one queue's keys: unsharded.
        first = self.served[0].shards
        single = self.queue.shards[0] if len(self.queue.shards) == 1 else None
        if schedules and len(first) != 1:
            self.close()
            raise SettingError("SCHEDULES", "needs QUEUE_SHARDS=1 (its runs go to QUEUE_NAME's first queue), for now")
        if settings.audit and single is None:
            self.close()
            raise SettingError("AUDIT", "needs QUEUE_NAME to name one queue with QUEUE_SHARDS=1, for now")
        self.schedules = schedules  # registered at the first round
        self.periodic_home = first[0] if len(first) == 1 else None
        self._registered = not schedules
        self._problems_said: set[str] = set()
        self._priorities_seen: dict[str, set[int]] = {q.name: {0} for q in self.served}
        self.audit_log: AuditRecorder | None = None
        self.auditor: Auditor | None = None
        if single is not None and settings.audit:
            self.audit_log = AuditRecorder(single.redis, single.keys)
            self.auditor = Auditor(single.redis, single.keys, retention=settings.trims_done)
        self._audit: AuditPass | None = None
        self._next_audit_at = time.monotonic()

    @property
    def stall_seconds(self) -> float:
        return max(60.0, 3 * self.settings.sweep_interval)

    def run(self) -> int:
        s = self.settings
        self.log.info("sweeping every %gs, up to %d ids per sweep", s.sweep_interval, s.sweep_batch)
        for schedule in self.schedules:
            self.log.info("periodic job %s: %s (UTC)", schedule.name, schedule.expr)
        next_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                self.beat()
                self.sweep_once()  # runs while Redis is out of memory: it frees memory
                with self.unless_redis_full("periodic runs"):
                    self.create_periodic_runs()
                self.update_depth()
                self.check_memory()
                with self.unless_redis_full("the audit"):
                    self.audit_step()
                next_at += s.sweep_interval
                now = time.monotonic()
                next_at = max(next_at, now)  # after a slow sweep or an outage: no catching up
                self.stop_event.wait(next_at - now)
        except Stopping:
            pass
        return 0

    def sweep_once(self) -> None:
        started = time.monotonic()
        for queue in self.served:
            self._sweep(queue)
        self.metrics.sweep_seconds.observe(time.monotonic() - started)
        self.metrics.last_sweep_timestamp.set(time.time())

    def _sweep(self, queue: JobQueue) -> None:
        s = self.settings
        requeued = dead = trimmed = 0
        for _ in range(MAX_SWEEP_ROUNDS):
            result = self.retry(lambda: queue.sweep(s.sweep_batch), "sweep")
            if self.audit_log is not None and result.total:
                # Right after the sweep: a cleaner killed in between leaves these unrecorded.
                lost = result.requeued + result.dead_lettered
                self.retry(functools.partial(self.audit_log.lease_lost, lost), "audit")
            requeued += len(result.requeued)
            dead += len(result.dead_lettered)
            trimmed += result.done_trimmed
            if result.total < s.sweep_batch:
                break
        self.metrics.requeued.labels(queue.name).inc(requeued)
        self.metrics.history_records.labels(queue.name, "lease lost").inc(requeued + dead)
        self.metrics.jobs_dead_lettered.labels(queue.name).inc(dead)
        self.metrics.done_trimmed.labels(queue.name).inc(trimmed)
        if requeued or dead:
            self.log.info(
                "sweep of %s: requeued %s whose lease expired, dead-lettered %d, dropped %s from done",
                queue.name,
                plural(requeued, "job"),
                dead,
                plural(trimmed, "old id"),
            )
        elif trimmed:
            self.log.debug("sweep: dropped %d old ids from done", trimmed)

    def create_periodic_runs(self, now: float | None = None) -> list[str]:
        """Enqueue each registered schedule's latest run at or before ``now`` (default: Redis's clock)
        unless it or a later one exists; returns the run ids created."""
        home = self.periodic_home
        if home is None:
            return []
        if not self._registered:
            self.retry(lambda: register(home, self.schedules), "periodic")
            self._registered = True
        schedules, problems = self.retry(lambda: registered(home), "periodic")
        for problem in set(problems) - self._problems_said:
            self.log.warning("%s", problem)
            self._problems_said.add(problem)
        if not schedules:
            return []
        at = now if now is not None else self.retry(lambda: redis_now(self.queue.redis), "time")
        runs = due_runs(schedules, at)
        made, first_seen = self.retry(lambda: home.create_periodic_runs(runs), "periodic")
        run_ids = {name: run_id for name, _, run_id, _ in runs}
        created = [run_ids[name] for name in made]
        for name in made:
            self.metrics.periodic_runs.labels(name).inc()
            self.log.info("periodic: created %s", run_ids[name])
        for name in first_seen:
            self.log.info("periodic job %s seen for the first time: its first run is its next slot", name)
        return created

    def update_depth(self) -> None:
        m = self.metrics
        for queue in self.served:
            stats = self.retry(queue.stats, "stats")
            for state in STATES:
                m.queue_depth.labels(queue.name, state).set(stats[state])
            m.oldest_pending_age.labels(queue.name).set(stats["oldest_pending_age_seconds"])
            m.results_kept.labels(queue.name).set(stats["results_kept"])
            m.paused.labels(queue.name).set(stats["paused"])
            m.grouped_waiting.labels(queue.name).set(stats["grouped_waiting"])
            workers = self.retry(functools.partial(live_worker_count, queue.redis, queue.name), "workers")
            m.queue_workers.labels(queue.name).set(workers)
            for stand, field in GROUP_STANDS.items():
                m.groups.labels(queue.name, stand).set(stats[field])
            by_priority: dict[int, int] = stats["todos_by_priority"]
            # A priority that had jobs and has none now reads 0, not its last count.
            seen = self._priorities_seen[queue.name]
            seen |= by_priority.keys()
            for priority in seen:
                m.todos_by_priority.labels(queue.name, str(priority)).set(by_priority.get(priority, 0))

    def audit_step(self) -> None:
        """Advance the audit under way (or start one each AUDIT_INTERVAL); publish it once done."""
        auditor, gauges = self.auditor, self.metrics.audit
        if auditor is None or gauges is None:
            return
        if self._audit is None:
            if time.monotonic() < self._next_audit_at:
                return
            self._next_audit_at = time.monotonic() + self.settings.audit_interval
            self._audit = self.retry(auditor.start, "audit")
        audit = self._audit
        if not self.retry(lambda: audit.advance(AUDIT_IDS_PER_ROUND), "audit"):
            return
        self._audit = None
        report = audit.report()
        gauges.publish(report.as_dict())
        if not report.ok:
            self.log.error(
                "audit of %d ids: %d lost, %d in two states, %d run twice unexplained (e.g. %s)",
                report.created,
                report.lost,
                report.in_two_states,
                report.unexplained_duplicates,
                ", ".join((*report.lost_ids, *report.two_state_ids, *report.unexplained_ids)[:5]),
            )
