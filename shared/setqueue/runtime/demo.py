"""The demo job handler, and the convention for configuring any handler from the worker's settings.

``JOB_HANDLER=module:function`` names the job function. The worker imports it and calls
``function(lease)`` for every job it claims (``lease.id`` is the job id, ``lease.payload`` its
payload or None, ``lease.attempt`` 1 on the first try). Returning means success: the job is acked
into done. Raising any exception fails this attempt: the job is retried until MAX_ATTEMPTS claims
are used up, then dead-lettered into failed with ``repr(exception)`` as the reason. Raise
``setqueue.PermanentJobError`` to dead-letter at once (no retry can fix it).

If the handler's module defines ``configure_worker(settings)``, the worker calls it once at start,
before the first job, with its ``setqueue.runtime.settings.WorkerSettings``: the hook to read settings, open
connections or warm caches. This module uses it to pick up WORK_SECONDS, WORK_JITTER and FAIL_RATE,
and with AUDIT=true to record every run in Redis for the audit (``setqueue.runtime.audit``).

A worker runs CONCURRENCY jobs at once: a plain function on that many threads, an ``async def``
one on an event loop; ``configure_worker`` may be async too. Leases are renewed in the background,
so a job may take longer than LEASE_SECONDS; a job longer than JOB_TIMEOUT_SECONDS fails with
reason timeout (``setqueue.JobTimeout`` is raised in its thread).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from setqueue.client import TRANSIENT_REDIS_ERRORS, connect
from setqueue.jobs import Lease
from setqueue.queue import Queue
from setqueue.runtime.audit import AuditRecorder
from setqueue.runtime.backoff import Backoff
from setqueue.runtime.settings import WorkerSettings, default


class SimulatedFailure(RuntimeError):
    """What the demo handler raises for the FAIL_RATE share of jobs."""


@dataclass(frozen=True)
class DemoSettings:
    work_seconds: float = default("WORK_SECONDS")
    work_jitter: float = default("WORK_JITTER")
    fail_rate: float = default("FAIL_RATE")
    audit: AuditRecorder | None = None  # records every run (AUDIT=true)


_settings = DemoSettings()


def configure(
    work_seconds: float, work_jitter: float = 0.0, fail_rate: float = 0.0, audit: AuditRecorder | None = None
) -> None:
    """Set the demo's knobs directly (for embedding and tests)."""
    global _settings
    _settings = DemoSettings(work_seconds, work_jitter, fail_rate, audit)


def configure_worker(settings: WorkerSettings) -> None:
    """The worker's start hook: take WORK_SECONDS, WORK_JITTER, FAIL_RATE and AUDIT from the settings."""
    audit = None
    if settings.audit:
        # Its own client (resends, timeouts), on the first queue.
        queue = Queue(connect(settings.redis_url, **settings.tls_options()), settings.queue_names[0])
        audit = AuditRecorder(queue.redis, queue.keys)
    configure(settings.work_seconds, settings.work_jitter, settings.fail_rate, audit)


def simulated_work(lease: Lease) -> None:
    """Sleep WORK_SECONDS ± WORK_JITTER (a fraction), then raise with probability FAIL_RATE."""
    s = _settings
    duration = s.work_seconds * (1 + random.uniform(-s.work_jitter, s.work_jitter))
    if duration > 0:
        time.sleep(duration)
    failed = bool(s.fail_rate) and random.random() < s.fail_rate
    if s.audit is not None:
        _record_run(s.audit, lease, succeeded=not failed)
    if failed:
        raise SimulatedFailure(f"simulated failure of job {lease.id} (attempt {lease.attempt})")


def _record_run(audit: AuditRecorder, lease: Lease, *, succeeded: bool) -> None:
    """Record the run, waiting out a Redis outage: giving up would fail a run that succeeded (and
    may be recorded already), and its retry would look like an unexplained second success. The
    lease is renewed meanwhile; a job that waits past JOB_TIMEOUT_SECONDS fails with a timeout."""
    backoff = Backoff(base=0.1, cap=2.0)
    while True:
        try:
            audit.run(lease, succeeded=succeeded)
            return
        except TRANSIENT_REDIS_ERRORS:
            time.sleep(backoff.next())


def noop(lease: Lease) -> None:
    """Does nothing: measures the queue's own overhead."""
