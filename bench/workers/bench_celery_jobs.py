"""Celery app on the Redis broker, no result backend, defaults otherwise (acks early, prefetch 4)."""

import os
from typing import Any

from bench_common import chain_step, run_job
from celery import Celery

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.broker_connection_retry_on_startup = True
app.conf.task_default_queue = "bench"


@app.task(name="bench.job")
def job(arg: Any) -> None:
    run_job(arg)


@app.task(name="bench.step")
def step(arg: Any) -> None:
    """A step of a chain (celery.chain): records its start."""
    chain_step(arg)
