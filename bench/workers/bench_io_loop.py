"""The floor of any Python worker for the I/O-bound job: BENCH_CONCURRENCY loops in one process
that only do the job's body (wait BENCH_IO_SECONDS, then one INCR), with no queue at all, as
asyncio tasks on one event loop (BENCH_IO_MODE=async, redis.asyncio) or as threads (threads,
redis-py). Runs until BENCH_SECONDS pass."""

from __future__ import annotations

import asyncio
import os
import threading
import time

from bench_common import COUNTER, aclient, client

CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "100"))
WAIT = float(os.environ.get("BENCH_IO_SECONDS") or 0.01)


async def _task(end: float) -> None:
    r = aclient()
    while time.monotonic() < end:
        await asyncio.sleep(WAIT)
        await r.incr(COUNTER)


async def _async_main(end: float) -> None:
    await aclient().ping()
    await asyncio.gather(*(_task(end) for _ in range(CONCURRENCY)))


def _thread(end: float) -> None:
    r = client()
    while time.monotonic() < end:
        time.sleep(WAIT)
        r.incr(COUNTER)


def main() -> None:
    end = time.monotonic() + float(os.environ.get("BENCH_SECONDS", "3"))
    if os.environ.get("BENCH_IO_MODE") == "async":
        asyncio.run(_async_main(end))
        return
    client().ping()
    threads = [threading.Thread(target=_thread, args=(end,)) for _ in range(CONCURRENCY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
