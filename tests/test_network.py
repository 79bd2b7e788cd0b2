"""A bad network between the clients or services and Redis (tests/support/faultproxy.py): half-open
connections, resets, partitions. Each waits on conditions; the bounds it states are in
docs/guide.md#network, and the times it measures are printed (``-s``), never asserted."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from setqueue import Queue, aio
from setqueue.client import LISTENER_DEAD_SECONDS, LISTENER_PING_SECONDS, listener_catch_ups
from tests.support import RedisServer
from tests.support.faultproxy import FaultProxy
from tests.support.waits import wait_until

# A listener finds a silent subscription within this (client.py), then resubscribes and catches up.
SILENCE_FOUND_SECONDS = LISTENER_PING_SECONDS + LISTENER_DEAD_SECONDS + 0.5


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as p:
        yield p


@pytest.fixture
def name() -> str:
    return f"net-{uuid.uuid4().hex[:10]}"


def finish(direct: Queue, job_id: str, value: Any) -> None:
    [lease] = direct.claim(1)
    assert lease.id == job_id
    assert direct.ack(lease, result=value)


class Waiting:
    """``result(job_id)`` in a thread: its value and when it came."""

    def __init__(self, queue: Queue, job_id: str) -> None:
        self.value: Any = None
        self.at: float | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(queue, job_id), daemon=True)
        self._thread.start()

    def _run(self, queue: Queue, job_id: str) -> None:
        try:
            self.value = queue.result(job_id, timeout=60)
        except BaseException as exc:
            self.error = exc
        self.at = time.monotonic()


@pytest.mark.parametrize("fault", ["blackhole", "reset"])
def test_a_result_waiter_whose_subscription_went_silent_still_sees_the_end(
    proxy: FaultProxy, redis_server: RedisServer, name: str, fault: str
) -> None:
    direct = Queue.from_url(redis_server.url, name=name)
    through = Queue.from_url(proxy.url(), name=name)
    direct.enqueue(["a"])
    before = listener_catch_ups()
    waiting = Waiting(through, "a")
    wait_until(lambda: through._ended, 10, "the result listener")
    [listener] = through._ended.values()
    wait_until(listener._subscribed.is_set, 10, "the subscription")
    if fault == "blackhole":
        proxy.blackhole()  # the end-of-job message below vanishes, and nothing tells the listener
    else:
        proxy.reset_all()  # the listener's connection is reset: it knows at once
    finish(direct, "a", {"n": 1})
    ended = time.monotonic()
    if fault == "blackhole":
        wait_until(lambda: proxy.dropped_bytes, 10, "the end-of-job message dropped")
    proxy.heal()
    wait_until(lambda: waiting.at is not None, 30, "result() to return")
    assert waiting.error is None and waiting.value == {"n": 1}
    assert listener.catch_ups >= 1 and listener_catch_ups() > before
    print(f"\n{fault}: result() saw the end after {waiting.at - ended:.2f}s (bound {SILENCE_FOUND_SECONDS:g}s)")  # type: ignore[operator]
    through.close()


def test_an_async_result_waiter_whose_subscription_went_silent_still_sees_the_end(
    proxy: FaultProxy, redis_server: RedisServer, name: str
) -> None:
    direct = Queue.from_url(redis_server.url, name=name)
    direct.enqueue(["a"])

    async def main() -> tuple[Any, float, int]:
        through = aio.open_queue(proxy.url(), name)
        try:
            waiter = asyncio.create_task(through.result("a", timeout=60))
            while not (through._ended and next(iter(through._ended.values()))._subscribed.is_set()):
                await asyncio.sleep(0.05)
            [listener] = through._ended.values()
            proxy.blackhole()
            await asyncio.to_thread(finish, direct, "a", "done")
            ended = time.monotonic()
            while not proxy.dropped_bytes:  # the end-of-job message dropped
                await asyncio.sleep(0.01)
            proxy.heal()
            value = await asyncio.wait_for(waiter, 30)
            return value, time.monotonic() - ended, listener.catch_ups
        finally:
            await through.aclose()

    value, seconds, catch_ups = asyncio.run(main())
    assert value == "done" and catch_ups >= 1
    print(f"\nasync result() saw the end after {seconds:.2f}s (bound {SILENCE_FOUND_SECONDS:g}s)")
