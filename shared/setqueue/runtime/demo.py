"""The demo job handler, and the convention for configuring any handler (docs/guide.md).

``JOB_HANDLER=module:function`` names the job function, called with each claimed ``Lease``; returning
acks it, raising fails the attempt (``setqueue.PermanentJobError``: dead-letter at once). A module's
``configure_worker(settings)`` is called once at start with the ``WorkerSettings``: this one takes
WORK_SECONDS, WORK_JITTER, FAIL_RATE and, with AUDIT=true, records every run for the audit.
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
    """For the FAIL_RATE share of jobs."""


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
    global _settings
    _settings = DemoSettings(work_seconds, work_jitter, fail_rate, audit)


def configure_worker(settings: WorkerSettings) -> None:
    audit = None
    if settings.audit:
        timeout = settings.redis_timeout_seconds
        client = connect(
            settings.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout, **settings.tls_options()
        )
        queue = Queue(client, settings.queue_names[0])
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
    """Waits out an outage: giving up would fail a run that succeeded (maybe recorded already), and its
    retry would look like an unexplained second success."""
    backoff = Backoff(base=0.1, cap=2.0)
    while True:
        try:
            audit.run(lease, succeeded=succeeded)
            return
        except TRANSIENT_REDIS_ERRORS:
            time.sleep(backoff.next())


def noop(lease: Lease) -> None:
    """Measures the queue's own overhead."""
