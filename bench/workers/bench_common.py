"""The job every system runs: one INCR of the counter (counter == jobs: each ran once), after waiting
BENCH_IO_SECONDS if set (time.sleep, or asyncio.sleep in an async job). A latency job ("lat:<n>") also
records its start, time.time() before any wait, in the same round trip. With BENCH_NOOP=1 a job only adds
one to its process's tally, which a thread adds to the counter every FLUSH_SECONDS and at exit."""

import asyncio
import atexit
import os
import threading
import time
from typing import Any

COUNTER = "bench:counter"
LATENCY = "bench:latency"
FLOW = "bench:flow:"  # + run: hash, job id "<kind>:<run>:..." -> time.time() (bench/workflows.py)
IO_SECONDS = float(os.environ.get("BENCH_IO_SECONDS") or 0)
NOOP = os.environ.get("BENCH_NOOP") == "1"
FLUSH_SECONDS = 0.01
_clients: dict[tuple[str, int], Any] = {}


def client(asynchronous: bool = False) -> Any:
    """This process's client (made after a fork, never inherited)."""
    key = ("async" if asynchronous else "sync", os.getpid())
    if key not in _clients:
        import redis.asyncio  # noqa: PLC0415

        make = redis.asyncio.Redis if asynchronous else redis.Redis
        _clients[key] = make.from_url(os.environ["BENCH_REDIS_URL"])
    return _clients[key]


class Tally:
    """No-op jobs not yet added to COUNTER. A forked child starts afresh (os.register_at_fork): no getpid."""

    def __init__(self) -> None:
        self.forked()

    def add(self) -> None:
        with self.lock:
            self.pending += 1
            if self.flushing:
                return
            self.flushing = True
        threading.Thread(target=self.flush_forever, daemon=True).start()
        atexit.register(self.flush)

    def forked(self) -> None:
        self.lock, self.pending, self.flushing = threading.Lock(), 0, False  # flushing: the flusher thread runs

    def flush(self) -> None:
        with self.lock:
            n, self.pending = self.pending, 0
        if n:
            client().incrby(COUNTER, n)

    def flush_forever(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            self.flush()


TALLY = Tally()
os.register_at_fork(after_in_child=TALLY.forked)


def run_job(arg: Any) -> None:
    if NOOP and not str(arg).startswith("lat:"):
        TALLY.add()
        return
    started = time.time()
    if IO_SECONDS:
        time.sleep(IO_SECONDS)
    if not str(arg).startswith("lat:"):
        client().incr(COUNTER)  # the whole job: no pipeline object to pay for
        return
    client().pipeline(transaction=False).incr(COUNTER).hset(LATENCY, arg, repr(started)).execute()


async def run_job_async(redis: Any, arg: Any) -> None:
    if NOOP and not str(arg).startswith("lat:"):
        TALLY.add()
        return
    started = time.time()
    if IO_SECONDS:
        await asyncio.sleep(IO_SECONDS)
    if not str(arg).startswith("lat:"):
        await redis.incr(COUNTER)
        return
    async with redis.pipeline(transaction=False) as pipe:
        await pipe.incr(COUNTER).hset(LATENCY, arg, repr(started)).execute()


def record_time(job_id: str, when: float) -> None:
    """That job ``job_id`` ("<kind>:<run>:...") ran, in one round trip: INCR of the counter (counter == jobs:
    each ran once) and HSET of ``when`` in the hash FLOW + its run, field the job id."""
    run = job_id.split(":")[1]
    client().pipeline(transaction=False).incr(COUNTER).hset(FLOW + run, job_id, repr(when)).execute()


def chain_step(arg: Any) -> None:
    """A peer's chain step, "step:<run>:<n>" (bench/workflows.py): records its start."""
    record_time(str(arg), time.time())
