"""One scenario, every kind of queue, both clients: the blocking ``setqueue`` and ``setqueue.aio`` run
the same operations (written once in ``setqueue.operations``), so for each kind of queue (plain, three
shards, two queues served as one) they must give the same answers and leave the same Redis state."""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import setqueue
import setqueue.aio
from setqueue import FailOutcome, JobFailed
from setqueue.jobs import Lease

KINDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "plain": lambda name: {"name": name},
    "three shards": lambda name: {"name": name, "shards": 3},
    "two queues": lambda name: {"name": [f"{name}-a", f"{name}-b"]},
}


class Driver:
    """Calls a queue's operations alike on either client: a coroutine is run to its end on one loop."""

    def __init__(self, queue: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.queue = queue
        self.loop = loop

    def __getattr__(self, operation: str) -> Callable[..., Any]:
        method = getattr(self.queue, operation)

        def call(*args: Any, **kwargs: Any) -> Any:
            answer = method(*args, **kwargs)
            return self.loop.run_until_complete(answer) if inspect.isawaitable(answer) else answer

        return call


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def open_driver(flavour: str, kind: str, redis_url: str, name: str, loop: asyncio.AbstractEventLoop) -> Driver:
    where = KINDS[kind](name)
    options: dict[str, Any] = {"retry_backoff_seconds": 0, "max_attempts": 3}
    if flavour == "sync":
        return Driver(setqueue.open_queue(redis_url, **where, **options), loop)
    return Driver(setqueue.aio.open_queue(redis_url, **where, **options), loop)


def ids(leases: list[Lease]) -> list[str]:
    return [lease.id for lease in leases]


def scenario(q: Driver) -> list[Any]:
    """enqueue, claim, ack, fail, retry, dead letter, requeue, cancel, pause, stats, inspect, result:
    each answer, with what is random (tokens, times) left out."""
    answers: list[Any] = []
    say = answers.append
    say(q.enqueue({"a": {"n": 1}, "b": {"n": 2}, "c": {"n": 3}, "d": {"n": 4}}))
    say(q.enqueue(["e"], priority=5))
    say(q.enqueue(["a", "e"]))  # known ids: nothing new
    first = q.claim(2)
    say(ids(first))
    by_id = {lease.id: lease for lease in first}
    say(q.ack(by_id["e"], {"sum": 3}))
    say(q.ack(by_id["e"], "twice"))  # stale now
    say(q.fail(by_id["a"], "boom", delay=0))
    rest = q.claim(10)
    say(sorted((lease.id, lease.attempt, lease.payload) for lease in rest))
    by_id = {lease.id: lease for lease in rest}
    say(q.fail(by_id["b"], "broken", retry=False))
    say(q.cancel("c"))
    say(q.renew_outcomes([by_id["c"], by_id["d"]]))
    say([r.acked for r in q.ack_many([by_id["a"], by_id["d"]], results=[None, [4]])])
    say(q.requeue_failed())
    (again,) = q.claim(5)
    say((again.id, again.attempt))
    say(q.release([again]))
    (again,) = q.claim(5)
    say(q.ack(again, "fixed"))
    say(q.pause())
    say(q.enqueue(["f"]))
    say(ids(q.claim(1)))
    say(q.resume())
    (last,) = q.claim(1)
    say(last.id)
    say(q.ack(last))
    stats = q.stats()
    say({k: v for k, v in stats.items() if k not in ("oldest_pending_age_seconds",)})
    info = q.inspect("a")
    say((info.state, info.attempts, info.payload, info.result, [h.kind for h in info.history]))
    say([h.kind for h in q.history("b")])
    say(q.inspect("nobody"))
    say(q.result("e", timeout=5))
    say(q.results(["d", "b"], timeout=5))
    with pytest.raises(JobFailed) as cancelled:
        q.result("c", timeout=5)
    say((cancelled.value.state, cancelled.value.job_id))
    say(q.delete("f"))
    say(q.sweep().total)
    q.set_rate("50/s")
    say(q.limits())
    say([g.name for g in q.groups()])
    say(q.ping())
    return answers


def state(client: redis.Redis, name: str) -> dict[str, Any]:
    """The queue's keys with the name, claim tokens and request ids made alike: each key's type and its
    members or fields (not scores or values, which hold times)."""
    seen: dict[str, Any] = {}
    for key in client.scan_iter(match=f"setqueue:{{{name}*"):
        kind = client.type(key)
        shape = re.sub(r":(lock|req):.*", r":\1:*", key.replace(name, "Q"))
        if kind == "set":
            value: Any = sorted(client.smembers(key))
        elif kind == "zset":
            value = sorted(client.zrange(key, 0, -1))
        elif kind == "hash":
            value = sorted(client.hkeys(key))
        elif kind == "list":
            value = client.llen(key)
        else:
            value = kind
        if shape.endswith("*"):  # one per call or claim: count them
            seen[shape] = seen.get(shape, 0) + 1
        else:
            seen[shape] = value
    return seen


@pytest.mark.parametrize("kind", list(KINDS))
def test_both_clients_give_the_same_answers_and_leave_the_same_state(
    kind: str, redis_url: str, queue_name: str, client: redis.Redis, loop: asyncio.AbstractEventLoop
) -> None:
    runs: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for flavour in ("sync", "async"):
        name = f"{queue_name}-{flavour}"
        q = open_driver(flavour, kind, redis_url, name, loop)
        try:  # answers as text, the queue's name made alike
            answers = [repr(answer).replace(name, "Q") for answer in scenario(q)]
            runs[flavour] = (answers, state(client, name))
        finally:
            q.close()
    (sync_answers, sync_state), (async_answers, async_state) = runs["sync"], runs["async"]
    assert len(sync_answers) == len(async_answers)
    for n, (blocking, awaited) in enumerate(zip(sync_answers, async_answers, strict=True)):
        assert blocking == awaited, f"answer {n}"
    assert sync_state == async_state
    # And the answers are the model's, whatever the kind.
    assert sync_answers[:4] == ["4", "1", "0", "['e', 'a']"]
    assert sync_answers[6] == repr(FailOutcome.RETRIED)


def test_both_clients_work_on_one_queue_at_once(
    redis_url: str, queue_name: str, loop: asyncio.AbstractEventLoop
) -> None:
    """A blocking producer and an asyncio worker (and the other way round) on the same queue."""
    blocking = setqueue.open_queue(redis_url, queue_name, shards=3)
    awaited = setqueue.aio.open_queue(redis_url, queue_name, shards=3)

    async def serve(count: int) -> list[str]:
        served: list[str] = []
        while len(served) < count:
            leases = await awaited.claim(10)
            if not leases:
                await awaited.wait_for_work(1)
                continue
            await awaited.ack_many(leases, results=[lease.id.upper() for lease in leases])
            served += ids(leases)
        return served

    try:
        assert blocking.enqueue([f"j{n}" for n in range(30)]) == 30
        assert sorted(loop.run_until_complete(serve(30))) == sorted(f"j{n}" for n in range(30))
        assert blocking.results(["j0", "j29"], timeout=5) == {"j0": "J0", "j29": "J29"}
        assert loop.run_until_complete(awaited.enqueue(["k"])) == 1
        [lease] = blocking.claim(1)
        assert lease.id == "k" and blocking.ack(lease, 7)
        assert loop.run_until_complete(awaited.result("k", timeout=5)) == 7
    finally:
        blocking.close()
        loop.run_until_complete(awaited.aclose())
