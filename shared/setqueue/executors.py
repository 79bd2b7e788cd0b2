"""The two executors of the queue's sans-I/O operations (``setqueue.steps``): ``Executor`` sends
their steps on redis-py's blocking client, ``AsyncExecutor`` on ``redis.asyncio``. Nothing else in
the core sends a command on an operation's behalf."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import redis
from redis import exceptions as rexc
from redis.commands.core import Script as RedisScript

from setqueue.client import OptionError, on_a_cluster
from setqueue.layout import LayoutCheck
from setqueue.replication import confirmed_call
from setqueue.script_cache import call_script
from setqueue.steps import AskCluster, RunScript, Send, Snapshot, Step, Steps

R = TypeVar("R")


def _drive(steps: Steps[R], do: Callable[[Step], Any]) -> R:
    """Run ``steps`` to their end, sending each step to ``do``: its reply goes back in, and so does its
    exception (the operation may handle it, else it rises out of here with the operation's frames)."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]
        try:
            reply, error = do(step), None
        except Exception as exc:
            reply, error = None, exc


class Executor:
    """Runs operations on one blocking client (``redis.Redis``, or ``ClusterAwareRedis``)."""

    def __init__(self, client: redis.Redis, layout: LayoutCheck | None = None) -> None:
        self.client = client
        self.layout = layout  # the queue's layout version check, run before its first operation
        self._scripts: dict[str, RedisScript] = {}  # by source: EVALSHA, loaded on NOSCRIPT (call_script)

    def run(self, steps: Steps[R], *, check_layout: bool = True) -> R:
        """The result of the operation ``steps``, having sent each of its steps (after the layout check,
        until it has passed, unless ``check_layout`` is False: the operation checks it itself)."""
        return _drive(steps if self.layout is None or not check_layout else self.layout.around(steps), self.do)

    def do(self, step: Step) -> Any:
        """Send one step; its reply."""
        if isinstance(step, RunScript):
            script = self._scripts.get(step.source)
            if script is None:
                script = self._scripts[step.source] = self.client.register_script(step.source)
            if step.wait is not None:
                return confirmed_call(self.client, step, script)
            return call_script(self.client, script.sha, step.source, step.keys, step.args)
        if isinstance(step, Send):
            return self.client.execute_command(*step.args)  # type: ignore[no-untyped-call]
        if isinstance(step, Snapshot):
            return self._snapshot(step)
        if isinstance(step, AskCluster):
            return on_a_cluster(self.client)
        raise TypeError(f"not a step: {step!r}")

    def _snapshot(self, step: Snapshot) -> list[Any]:
        """The reads in one MULTI; out of memory (Redis refuses a MULTI even of reads), in a plain pipeline."""
        for transaction in (True, False):
            pipe = self.client.pipeline(transaction=transaction)
            for command in step.commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            try:
                return pipe.execute()  # type: ignore[no-any-return]
            except rexc.OutOfMemoryError:
                if not transaction:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover


class AsyncClient(Protocol):
    """What ``AsyncExecutor`` needs of an asyncio client (``setqueue.aio.AsyncRedis`` has it)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any: ...
    async def evalsha_step(self, sha: str, source: str, keys: Any, args: Any) -> Any: ...
    async def snapshot(self, commands: tuple[tuple[Any, ...], ...], transaction: bool) -> list[Any]: ...
    async def on_a_cluster(self) -> bool: ...
    async def replica_call(self, step: RunScript, sha: str) -> Any: ...


async def _drive_async(steps: Steps[R], do: Callable[[Step], Awaitable[Any]]) -> R:
    """``_drive``, awaiting each step."""
    reply: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]
        try:
            reply, error = await do(step), None
        except Exception as exc:
            reply, error = None, exc


def script_sha(source: str) -> str:
    """The SHA1 Redis knows a script by."""
    return hashlib.sha1(source.encode("utf-8")).hexdigest()


class AsyncExecutor:
    """Runs operations on one asyncio client; no thread, no blocking call."""

    def __init__(self, client: AsyncClient, layout: LayoutCheck | None = None) -> None:
        self.client = client
        self.layout = layout  # the queue's layout version check, run before its first operation
        self._shas: dict[str, str] = {}

    async def run(self, steps: Steps[R], *, check_layout: bool = True) -> R:
        """The result of the operation ``steps``, having awaited each of its steps (``Executor.run``)."""
        checked = steps if self.layout is None or not check_layout else self.layout.around(steps)
        return await _drive_async(checked, self.do)

    async def do(self, step: Step) -> Any:
        """Send one step; its reply."""
        if isinstance(step, RunScript):
            sha = self._shas.get(step.source)
            if sha is None:
                sha = self._shas[step.source] = script_sha(step.source)
            if step.wait is not None:
                if await self.client.on_a_cluster():
                    raise OptionError(
                        "wait_replicas", "the asyncio client does not confirm writes on a Redis Cluster yet"
                    )
                return await self.client.replica_call(step, sha)
            return await self.client.evalsha_step(sha, step.source, step.keys, step.args)
        if isinstance(step, Send):
            return await self.client.execute_command(*step.args)
        if isinstance(step, Snapshot):
            try:
                return await self.client.snapshot(step.commands, transaction=True)
            except rexc.OutOfMemoryError:
                return await self.client.snapshot(step.commands, transaction=False)
        if isinstance(step, AskCluster):
            return await self.client.on_a_cluster()
        raise TypeError(f"not a step: {step!r}")
