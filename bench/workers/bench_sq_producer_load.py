"""A producer under load for the producer matrix (bench/matrices/producer.py), run with a code tree's
setqueue: ``python bench_sq_producer_load.py MODE CLIENT AT_ONCE SECONDS WARMUP QUEUE``.

MODE ``enqueue``: each of AT_ONCE loops calls ``enqueue([id])``, a new id each call, no worker running;
``send``: ``send(noop)``, a call of the no-op task of workers/bench_sq_tasks.py (its id made by send), no
worker running; ``roundtrip``: ``enqueue([id])`` then ``result(id)``, which a worker's ack ends. CLIENT ``blocking``:
AT_ONCE threads sharing one ``setqueue.open_queue`` client; ``asyncio``: AT_ONCE tasks sharing one
``setqueue.aio.open_queue`` client on one event loop.

Prints the setqueue it imported, then ``start`` and ``end`` around the measured window of SECONDS (after
the first call returned and WARMUP more seconds: the bench reads CPU and Redis figures at those lines),
then one JSON line: the window, the latency of every call that ended in it, and the checks."""

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import setqueue

MODE, CLIENT, AT_ONCE = sys.argv[1], sys.argv[2], int(sys.argv[3])
SECONDS, WARMUP, QUEUE = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
URL = os.environ["BENCH_REDIS_URL"]
RESULT_TIMEOUT = 30  # seconds one result() waits (the first waits for the worker to start)
FIRST_CALL_TIMEOUT = 60


class Loop:
    """One loop's tally; its own, so threads share no counter."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.done: list[tuple[float, float]] = []  # (end, seconds) of each call
        self.sent = self.added = self.wrong = 0
        self.errors: list[str] = []

    def next_id(self) -> str:  # send makes its own
        self.sent += 1
        return f"{MODE[0]}{self.n}-{self.sent}"

    def ended(self, job_id: str, start: float, added: int, value: Any) -> None:
        end = time.perf_counter()
        self.done.append((end, end - start))
        self.added += added
        self.wrong += int(MODE == "roundtrip" and value != {"id": job_id, "ok": True})


class Conductor:
    """Waits for the first call, warms up, marks the window, stops the loops: ``sleep`` is the client's."""

    def __init__(self) -> None:
        self.loops = [Loop(n) for n in range(AT_ONCE)]
        self.stop = False
        self.window = (0.0, 0.0)

    def first_call_done(self) -> bool:
        return any(loop.done or loop.errors for loop in self.loops)

    def mark(self, line: str) -> float:
        t = time.perf_counter()
        print(line, flush=True)
        return t

    def report(self, todos: int | None) -> dict[str, Any]:
        t0, t1 = self.window
        lat = sorted(round(1000 * s, 4) for loop in self.loops for end, s in loop.done if t0 <= end < t1)
        errors = [e for loop in self.loops for e in loop.errors]
        total = {k: sum(getattr(loop, k) for loop in self.loops) for k in ("sent", "added", "wrong")}
        return {"seconds": t1 - t0, "ops": len(lat), "latencies_ms": lat, **total, "todos": todos, "errors": errors}


def the_task() -> Any:
    """The task ``send`` calls; imported only then (a tree before tasks by name runs the other modes)."""
    from bench_sq_tasks import noop  # noqa: PLC0415

    return noop


def run_blocking(c: Conductor) -> dict[str, Any]:
    q = setqueue.open_queue(URL, QUEUE)
    task = the_task() if MODE == "send" else None

    def loop(me: Loop) -> None:
        while not c.stop:
            job_id, start = me.next_id(), time.perf_counter()
            try:
                added = int(q.send(task).created) if task is not None else q.enqueue([job_id])
                value = q.result(job_id, timeout=RESULT_TIMEOUT) if MODE == "roundtrip" else None
            except Exception as exc:
                me.errors.append(f"{job_id}: {exc!r}")
                return
            me.ended(job_id, start, added, value)

    threads = [threading.Thread(target=loop, args=(me,)) for me in c.loops]
    for t in threads:
        t.start()
    try:
        conduct(c, time.sleep)
    finally:
        c.stop = True
        for t in threads:
            t.join()
    todos = q.stats()["todos"] if MODE != "roundtrip" else None
    q.close()
    return c.report(todos)


async def run_asyncio(c: Conductor) -> dict[str, Any]:
    from setqueue.aio import open_queue  # noqa: PLC0415  (a tree before setqueue.aio runs blocking only)

    task = the_task() if MODE == "send" else None
    async with open_queue(URL, QUEUE) as q:

        async def loop(me: Loop) -> None:
            while not c.stop:
                job_id, start = me.next_id(), time.perf_counter()
                try:
                    added = int((await q.send(task)).created) if task is not None else await q.enqueue([job_id])
                    value = await q.result(job_id, timeout=RESULT_TIMEOUT) if MODE == "roundtrip" else None
                except Exception as exc:
                    me.errors.append(f"{job_id}: {exc!r}")
                    return
                me.ended(job_id, start, added, value)

        tasks = [asyncio.create_task(loop(me)) for me in c.loops]
        try:
            await conduct_async(c)
        finally:
            c.stop = True
            await asyncio.gather(*tasks)
        todos = (await q.stats())["todos"] if MODE != "roundtrip" else None
    return c.report(todos)


def conduct(c: Conductor, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + FIRST_CALL_TIMEOUT
    while not c.first_call_done() and time.monotonic() < deadline:
        sleep(0.01)
    sleep(WARMUP)
    t0 = c.mark("start")
    sleep(SECONDS)
    c.window = (t0, c.mark("end"))


async def conduct_async(c: Conductor) -> None:
    deadline = time.monotonic() + FIRST_CALL_TIMEOUT
    while not c.first_call_done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    await asyncio.sleep(WARMUP)
    t0 = c.mark("start")
    await asyncio.sleep(SECONDS)
    c.window = (t0, c.mark("end"))


def main() -> None:
    print(setqueue.__file__, flush=True)
    c = Conductor()
    out = run_blocking(c) if CLIENT == "blocking" else asyncio.run(run_asyncio(c))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
