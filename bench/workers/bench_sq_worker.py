"""Stand-in for `python -m worker`, used only while the real worker service does not exist.

Built on the library as the service is meant to be: Queue.claim(CLAIM_BATCH) -> handler per
lease -> Queue.ack_many, LeaseKeeper renewing held leases, WorkerMetrics served on METRICS_PORT,
BLPOP on the wake list when idle. Same environment variables as the service.
"""

from __future__ import annotations

import signal
import time

from prometheus_client import CollectorRegistry, start_http_server

from setqueue import LeaseKeeper, Queue
from setqueue.config import WorkerSettings, load_handler
from setqueue.metrics import WorkerMetrics


def main() -> None:
    s = WorkerSettings.from_env()
    handler = load_handler(s.job_handler)
    queue = Queue.from_url(s.redis_url, **s.queue_options())
    registry = CollectorRegistry()
    m = WorkerMetrics(registry)
    if s.metrics_port:
        start_http_server(s.metrics_port, registry=registry)
    keeper = LeaseKeeper(queue, on_renewed=m.lease_renewals.inc, on_lost=lambda _l: m.leases_lost.inc()).start()
    running = True

    def stop(*_: object) -> None:
        nonlocal running
        running = False

    signal.signal(signal.SIGTERM, stop)
    success = m.jobs_completed.labels("success")
    while running:
        leases = queue.claim(s.claim_batch)
        m.redis_up.set(1)
        if not leases:
            queue.wait_for_work(s.idle_wait_seconds)
            continue
        m.jobs_claimed.inc(len(leases))
        keeper.hold(leases)
        m.jobs_in_progress.set(len(leases))
        done = []
        for lease in leases:
            if lease.queue_wait_seconds is not None:
                m.queue_wait_seconds.observe(lease.queue_wait_seconds)
            t0 = time.perf_counter()
            handler(lease)
            m.processing_seconds.observe(time.perf_counter() - t0)
            done.append(lease)
        results = queue.ack_many(done)
        keeper.drop(done)
        m.jobs_in_progress.set(0)
        for r in results:
            if r.acked:
                success.inc()
                if r.end_to_end_seconds is not None:
                    m.end_to_end_seconds.observe(r.end_to_end_seconds)
            else:
                m.stale_acks.inc()
    keeper.stop()


if __name__ == "__main__":
    main()
