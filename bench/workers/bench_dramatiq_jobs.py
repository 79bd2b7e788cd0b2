"""Dramatiq actor on the Redis broker, all defaults (middleware, retries, prefetch)."""

import os
from typing import Any

import dramatiq
from bench_common import chain_step, run_job
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def job(arg: Any) -> None:
    run_job(arg)


@dramatiq.actor(queue_name="bench")
def step(arg: Any) -> None:
    """A step of a chain (dramatiq.pipeline): records its start."""
    chain_step(arg)
