"""The queue on asyncio: ``from setqueue.aio import open_queue``.

``open_queue`` takes the same arguments as ``setqueue.open_queue`` and returns a ``Queue`` whose every
``JobQueue`` operation is a coroutine of the same name and signature (``await q.enqueue([...])``,
``await q.claim()``, ``await q.result(job_id)``, ...), plus ``aclose()`` and ``async with``. The
operations are ``setqueue.operations``'s, the very code the blocking client runs, sent by
``AsyncExecutor`` on ``redis.asyncio``: no thread, and no call that blocks the event loop. Waiting
for results shares one subscription per queue among every waiter (no polling per waiter), and both
clients may work on one queue at once.

What differs from the blocking client: a lease claimed here reports progress through
``await q.progress(lease, fraction)`` (``lease.progress`` would block); ``wait_replicas`` is not
supported on a Redis Cluster yet (OptionError on the first write)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

import redis
import redis.asyncio
from redis import exceptions as rexc
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff

from setqueue.client import (
    CATCH_UPS,
    LISTEN_SLICE_SECONDS,
    LIVENESS_MESSAGE,
    Liveness,
    OptionError,
    Waiters,
    blocking_limit,
    connection_options,
    redact_url,
)
from setqueue.core import QueueCore
from setqueue.executors import AsyncExecutor
from setqueue.factory import queue_layout
from setqueue.front import QueueFront
from setqueue.group import MultiRouter
from setqueue.keys import check_seconds, validate_job_id
from setqueue.layout import LayoutCheck
from setqueue.operations import Operations
from setqueue.replication import NotReplicated
from setqueue.routing import PlainRouter, Router
from setqueue.script_cache import SCRIPT_LOAD_ATTEMPTS, is_noscript, name_script
from setqueue.sentinel import async_master_pool, is_sentinel_url
from setqueue.sharded import ShardRouter
from setqueue.steps import RunScript, Steps
from setqueue.tasks import Sent, Task
from setqueue.workflows import Workflows

P = ParamSpec("P")
R = TypeVar("R")

__all__ = ["AsyncRedis", "Queue", "connect", "open_queue"]


class _AsyncRetry(AsyncRetry):
    """redis.asyncio's Retry, but a refused password is final (as ``setqueue.client._Retry``)."""

    async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().call_with_retry(do, fail, *args, **kwargs)
        except rexc.AuthenticationError:
            raise


class AsyncRedis:
    """An asyncio client for a URL naming one Redis or any Redis Cluster node: the first command asks
    the node (``HELLO``) whether it is in cluster mode; if so commands go through a ``RedisCluster``
    from the same URL and options. Pub/sub always goes to the URL's node (a Cluster delivers every
    PUBLISH to every node)."""

    def __init__(self, url: str, *, max_connections: int = 32, **options: Any) -> None:
        self.url = url
        self._options = options
        # Coroutines beyond max_connections wait for a connection (at most the socket timeout) rather
        # than fail: a thousand producers awaiting results on one loop share a few connections.
        pool_of = async_master_pool if is_sentinel_url(url) else redis.asyncio.BlockingConnectionPool.from_url
        pool = pool_of(url, max_connections=max_connections, timeout=options.get("socket_timeout"), **options)
        self.plain: redis.asyncio.Redis = redis.asyncio.Redis.from_pool(pool)  # closing it closes the pool
        self._cluster: AsyncRedisCluster | None = None
        self._decided = is_sentinel_url(url)  # a master found through sentinels is never a cluster node

    async def target(self) -> Any:
        """The client that sends commands: the plain one, or the cluster one (connects to decide)."""
        if not self._decided:
            try:
                reply = await self.plain.execute_command("HELLO")  # type: ignore[no-untyped-call]
            except redis.ResponseError:  # not an auth error (a ConnectionError): a Redis before 6, no cluster
                reply = {}
            if isinstance(reply, list):
                reply = dict(zip(reply[::2], reply[1::2], strict=False))
            if reply.get("mode", reply.get(b"mode")) in ("cluster", b"cluster") and self._cluster is None:
                if self.url.startswith("unix:"):
                    raise OptionError("url", f"{redact_url(self.url)} is a Redis Cluster node: reach it over TCP")
                options = {k: v for k, v in self._options.items() if k not in ("retry", "health_check_interval")}
                self._cluster = AsyncRedisCluster.from_url(self.url, require_full_coverage=False, **options)
            self._decided = True
        return self._cluster if self._cluster is not None else self.plain

    async def on_a_cluster(self) -> bool:
        """Whether this client runs on a Redis Cluster."""
        await self.target()
        return self._cluster is not None

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await (await self.target()).execute_command(*args, **options)

    async def evalsha_step(self, sha: str, source: str, keys: Any, args: Any) -> Any:
        """EVALSHA, loading the script on NOSCRIPT (``is_noscript``: by its code, not its text) and
        resending, at most SCRIPT_LOAD_ATTEMPTS times (``setqueue.script_cache.call_script``'s rule)."""
        target = await self.target()
        try:
            return await target.evalsha(sha, len(keys), *keys, *args)
        except rexc.ResponseError as exc:
            if not is_noscript(exc):
                name_script(exc, sha)
                raise
        for attempt in range(1, SCRIPT_LOAD_ATTEMPTS + 1):
            try:
                if target is not self.plain:  # a Cluster: load on every master, then resend
                    await target.script_load(source)
                    return await target.evalsha(sha, len(keys), *keys, *args)
                if attempt == SCRIPT_LOAD_ATTEMPTS:  # loaded and run in one command: no flush between
                    return await target.eval(source, len(keys), *keys, *args)
                pipe = target.pipeline(transaction=False)  # one Redis: load and resend back to back
                pipe.script_load(source)
                pipe.evalsha(sha, len(keys), *keys, *args)
                return (await pipe.execute())[1]
            except rexc.ResponseError as exc:
                if not is_noscript(exc) or attempt == SCRIPT_LOAD_ATTEMPTS:
                    name_script(exc, sha)
                    raise
        raise AssertionError("unreachable")

    async def snapshot(self, commands: tuple[tuple[Any, ...], ...], transaction: bool) -> list[Any]:
        """The commands in one pipeline: in one MULTI if ``transaction``."""
        pipe = (await self.target()).pipeline(transaction=transaction)
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute())

    async def replica_call(self, step: RunScript, sha: str) -> Any:
        """The script and a WAIT on one connection (WAIT counts that connection's writes); its reply, or
        NotReplicated (``setqueue.replication``)."""
        wait = step.wait
        assert wait is not None
        for _ in range(SCRIPT_LOAD_ATTEMPTS):
            pipe = self.plain.pipeline(transaction=False)
            pipe.evalsha(sha, len(step.keys), *step.keys, *step.args)
            pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
            try:
                reply, confirmed = await pipe.execute()
            except rexc.ResponseError as exc:  # NOSCRIPT: a node lost it or never saw it (restart, failover)
                if not is_noscript(exc):
                    raise
                await self.plain.script_load(step.source)
                continue
            if confirmed < wait.replicas:
                raise NotReplicated(step.name, wait.replicas, confirmed, wait.timeout_ms)
            return reply
        raise rexc.NoScriptError(f"{step.name}: the script is not loaded after SCRIPT LOAD")

    async def blpop(self, keys: Sequence[str], timeout: float) -> Any:
        return await (await self.target()).blpop(list(keys), timeout=timeout)

    def pubsub(self) -> Any:
        """A PubSub on the URL's node; its subscribe confirmations are messages too."""
        return self.plain.pubsub()

    async def aclose(self) -> None:
        await self.plain.aclose()
        if self._cluster is not None:
            await self._cluster.aclose()


def connect(
    url: str,
    *,
    socket_connect_timeout: float = 5,
    socket_timeout: float = 30,
    retries: int = 5,
    max_connections: int = 32,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
) -> AsyncRedis:
    """The asyncio twin of ``setqueue.client.connect``: the same options, timeouts and resends; at most
    ``max_connections`` connections at once (more coroutines wait for one)."""
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0) if retries else NoBackoff()
    options = connection_options(
        url,
        socket_connect_timeout=socket_connect_timeout,
        socket_timeout=socket_timeout,
        tls_ca_file=tls_ca_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
    )
    return AsyncRedis(url, max_connections=max_connections, retry=_AsyncRetry(backoff, retries=retries), **options)


class EndedListener:
    """One subscription to a queue's ended channel shared by every ``result()`` waiting on it: a task
    sets waiters' events as their ids end. A dropped or silent subscription is replaced and, once Redis
    confirms the new one, every waiter reads its jobs again (a catch-up, as in
    ``setqueue.client.EndedListener``). NOPERM is no outage: the listener stops and ``watch``/``check``
    raise it to every waiter."""

    def __init__(self, client: AsyncRedis, channel: str) -> None:
        self._client = client
        self._channel = channel
        self._waiting: Waiters[asyncio.Event] = Waiters()
        self._subscribed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._refused: rexc.NoPermissionError | None = None
        self.catch_ups = 0

    async def watch(self, job_ids: Sequence[str]) -> asyncio.Event:
        """An event set when any of ``job_ids`` ends or the subscription drops; subscribes if not yet."""
        event = asyncio.Event()
        self._waiting.add(job_ids, event)
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="setqueue-results")
        try:
            await asyncio.wait_for(self._subscribed.wait(), 30)
        except TimeoutError:
            self.forget(job_ids, event)
            raise rexc.ConnectionError(f"could not subscribe to {self._channel}") from None
        self.check()
        return event

    def check(self) -> None:
        """Raise NoPermissionError if Redis refused the subscription."""
        if self._refused is not None:
            raise rexc.NoPermissionError(str(self._refused))

    def forget(self, job_ids: Sequence[str], event: asyncio.Event) -> None:
        self._waiting.forget(job_ids, event)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _listen(self) -> None:
        confirmed = False  # Redis confirmed a subscription before: another one follows a gap
        while True:
            pubsub = self._client.pubsub()
            try:
                await pubsub.subscribe(self._channel)
                alive = Liveness()
                while True:
                    message = await pubsub.get_message(timeout=LISTEN_SLICE_SECONDS)
                    if message is None:
                        alive.check()
                        if alive.ping_due():
                            await pubsub.ping(LIVENESS_MESSAGE)
                        continue
                    alive.heard()
                    kind = message.get("type")
                    if kind == "message":
                        self._wake(str(message["data"]).split("\n")[1:])
                    elif kind == "subscribe":
                        self._subscribed.set()
                        # Not the first (ours after a drop, or redis-py's own after a reconnect):
                        # jobs may have ended unseen, so every waiter reads again.
                        if confirmed:
                            self.catch_ups += 1
                            CATCH_UPS.add()
                            self._wake(None)
                        confirmed = True
            except rexc.NoPermissionError as exc:  # no resubscription helps: every waiter is told
                self._refused = exc
                self._subscribed.set()
                self._wake(None)
                return
            except Exception:  # dropped or dead: subscribe again, then waiters look again
                self._subscribed.clear()
                await asyncio.sleep(0.1)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()

    def _wake(self, job_ids: Sequence[str] | None) -> None:
        self._waiting.wake(job_ids)


def _awaitable(
    op: Callable[Concatenate[Operations, P], Steps[R]],
) -> Callable[Concatenate[Queue, P], Coroutine[Any, Any, R]]:
    """The operation ``op`` as a coroutine method: it awaits ``op``'s steps on the queue's client."""

    @functools.wraps(op)
    async def run(self: Queue, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.executor.run(op(self.operations, *args, **kwargs))

    return run


class Queue(QueueFront):
    """A queue of any kind (plain, sharded, several served as one) on asyncio; made by ``open_queue``.
    Every method that talks to Redis is a coroutine."""

    operations: Operations  # every operation, sans-I/O, run here

    def __init__(
        self,
        client: AsyncRedis,
        router: Router[QueueCore],
        shards: Sequence[Queue] | None,
        queues: Sequence[Queue] | None,
    ) -> None:
        self.redis = client
        self._made_of(router, shards, queues)
        self.operations = Operations(router, Workflows)
        self.executor = AsyncExecutor(client, LayoutCheck([core.name for core in router.cores]))
        self._ended: dict[QueueCore, EndedListener] = {}
        self._blocked: dict[str, asyncio.Task[Any]] = {}  # BLPOPs across Cluster slots still waiting

    # -- every operation of JobQueue, written once in setqueue.operations

    enqueue = _awaitable(Operations.enqueue)
    claim = _awaitable(Operations.claim)
    renew = _awaitable(Operations.renew)
    renew_many = _awaitable(Operations.renew_many)
    renew_outcomes = _awaitable(Operations.renew_outcomes)
    ack = _awaitable(Operations.ack)
    ack_many = _awaitable(Operations.ack_many)
    fail = _awaitable(Operations.fail)
    release = _awaitable(Operations.release)
    sweep = _awaitable(Operations.sweep)
    stats = _awaitable(Operations.stats)
    inspect = _awaitable(Operations.inspect)
    requeue_failed = _awaitable(Operations.requeue_failed)
    delete = _awaitable(Operations.delete)
    cancel = _awaitable(Operations.cancel)
    history = _awaitable(Operations.history)
    progress = _awaitable(Operations.progress)
    pause = _awaitable(Operations.pause)
    resume = _awaitable(Operations.resume)
    set_rate = _awaitable(Operations.set_rate)
    set_group_limits = _awaitable(Operations.set_group_limits)
    limits = _awaitable(Operations.limits)
    groups = _awaitable(Operations.groups)
    dependencies = _awaitable(Operations.dependencies)
    chain = _awaitable(Operations.chain)
    fan_in = _awaitable(Operations.fan_in)

    async def ping(self, *, record: bool = False) -> bool:
        """``Operations.ping``, checking the key-layout version and recording none (``setqueue.Queue.ping``)."""
        return await self.executor.run(self.operations.ping(record=record), check_layout=False)

    wake_keys = _awaitable(Operations.wake_keys)

    @overload
    async def send(self, task: Task[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Sent[R]: ...
    @overload
    async def send(self, task: str, /, *args: Any, **kwargs: Any) -> Sent[Any]: ...

    async def send(self, task: Task[Any, Any] | str, /, *args: Any, **kwargs: Any) -> Sent[Any]:
        """Send a call of ``task`` as one job (``setqueue.Queue.send``, awaited)."""
        return await self.executor.run(self.operations.send(task, args, kwargs))

    async def wait_for_work(self, timeout: float) -> bool:
        """Wait until woken by an enqueue or requeue, ``timeout`` passes, or ``due_in`` comes; True when
        woken (or due). BLPOPs across Cluster slots that are still waiting are kept for the next call,
        so no wake token is lost."""
        due = self.due_in()
        if due is not None:
            timeout = min(timeout, due)
            if timeout <= 0:
                return True
        keys = await self.wake_keys()
        blpop_timeout = blocking_limit(self.redis.plain, timeout)  # replies before the socket timeout
        if len(keys) == 1 or not await self.redis.on_a_cluster():
            return await self.redis.blpop(keys, blpop_timeout) is not None
        for key in keys:
            if key not in self._blocked:
                self._blocked[key] = asyncio.create_task(self.redis.blpop([key], blpop_timeout))
        finished, _ = await asyncio.wait(self._blocked.values(), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        woken = False
        for key, task in list(self._blocked.items()):
            if task in finished:
                del self._blocked[key]
                woken = task.result() is not None or woken
        return woken

    # -- one plain queue alone (setqueue.interface.Shard)

    async def seconds_since_sweep(self) -> float | None:
        return await self.executor.run(self.operations.seconds_since_sweep(self.core))

    async def create_periodic_runs(
        self, runs: Sequence[tuple[str, int, str, str | None]]
    ) -> tuple[list[str], list[str]]:
        return await self.executor.run(self.operations.create_periodic_runs(self.core, runs))

    async def periodic_slots(self) -> dict[str, float]:
        return await self.executor.run(self.operations.periodic_slots(self.core))

    # -- results

    @overload
    async def result(self, job_id: Sent[R], timeout: float | None = None) -> R: ...
    @overload
    async def result(self, job_id: str, timeout: float | None = None) -> Any: ...

    async def result(self, job_id: str | Sent[Any], timeout: float | None = None) -> Any:
        """What the job's handler returned, once it ends (``setqueue.Queue.result``, awaited)."""
        wanted = job_id.id if isinstance(job_id, Sent) else job_id
        return (await self.results([wanted], timeout))[wanted]

    async def result_async(self, job_id: str, timeout: float | None = None) -> Any:
        """The same as ``result`` (the blocking client's name for it)."""
        return await self.result(job_id, timeout)

    async def results(self, job_ids: Iterable[str], timeout: float | None = None) -> dict[str, Any]:
        """``result`` of several jobs: id -> value; raises as ``result`` for the first that does."""
        wanted = list(dict.fromkeys(validate_job_id(job_id) for job_id in job_ids))
        if timeout is not None:
            check_seconds("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        found: dict[str, Any] = {}
        for core, ids in (await self.executor.run(self.operations.holders_of(wanted))).items():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            found.update(await self._results_in(core, ids, left, len(wanted)))
        return {job_id: found[job_id] for job_id in wanted}

    async def _results_in(
        self, core: QueueCore, wanted: list[str], timeout: float | None, asked: int
    ) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        ended: dict[str, Any] = {}
        listener = self._ended.get(core)
        if listener is None:
            listener = self._ended[core] = EndedListener(self.redis, core.keys.ended_channel)
        woken = await listener.watch(wanted)  # first: no job can end unseen between a look and the wait
        try:
            waiting = await self.executor.run(self.operations.look(core, wanted, ended))
            while waiting:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{len(waiting)} of {asked} jobs have not ended (e.g. {waiting[0]!r})")
                try:
                    await asyncio.wait_for(woken.wait(), left)
                except TimeoutError:
                    continue
                woken.clear()
                listener.check()
                waiting = await self.executor.run(self.operations.look(core, waiting, ended))
        finally:
            listener.forget(wanted, woken)
        return ended

    async def aclose(self) -> None:
        """Stop the result listeners and waits, and close the client."""
        for listener in self._ended.values():
            await listener.close()
        for task in self._blocked.values():
            task.cancel()
        await self.redis.aclose()

    async def close(self) -> None:
        """The same as ``aclose``."""
        await self.aclose()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()


def open_queue(
    url: str,
    name: str | Sequence[str] = "default",
    *,
    shards: int = 1,
    client: AsyncRedis | None = None,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    **options: Any,
) -> Queue:
    """``setqueue.open_queue`` on asyncio: the same arguments, checked the same way (ValueError,
    OptionError) before anything connects; ``client``: an open ``AsyncRedis`` to use instead. Connects
    on the first operation."""
    layout = queue_layout(name, shards)
    if client is None:
        client = connect(url, tls_ca_file=tls_ca_file, tls_cert_file=tls_cert_file, tls_key_file=tls_key_file)
    members: list[Queue] = []
    for queue_name, names in layout:
        plain = [Queue(client, PlainRouter(QueueCore(shard, **options)), None, None) for shard in names]
        if len(plain) == 1:
            members.append(plain[0])
        else:
            members.append(Queue(client, ShardRouter([q.core for q in plain], queue_name), plain, None))
    if len(members) == 1:
        return members[0]
    router = MultiRouter([member.router for member in members])
    return Queue(client, router, [s for m in members for s in m.shards], members)
