"""The job with no queue at all: BENCH_CONCURRENCY loops running bench_common's job for BENCH_SECONDS, as
asyncio tasks (BENCH_IO_MODE=async) or as threads."""

import asyncio
import os
import threading
import time

from bench_common import client, run_job, run_job_async

LOOPS = int(os.environ.get("BENCH_CONCURRENCY") or 1)
END = time.monotonic() + float(os.environ.get("BENCH_SECONDS", "3"))


async def task() -> None:
    while time.monotonic() < END:
        await run_job_async(client(asynchronous=True), "job")


async def tasks() -> None:
    await asyncio.gather(*(task() for _ in range(LOOPS)))


def loop() -> None:
    while time.monotonic() < END:
        run_job("job")


if __name__ == "__main__":
    if os.environ.get("BENCH_IO_MODE") == "async":
        asyncio.run(tasks())
    else:
        threads = [threading.Thread(target=loop) for _ in range(LOOPS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
