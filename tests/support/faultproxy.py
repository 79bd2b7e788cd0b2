"""A TCP proxy between a client and a redis-server on loopback that a test turns bad at run time:
latency with jitter, a bandwidth limit, a blackhole (bytes dropped silently, no FIN or RST: the
half-open connection of a NAT timeout or a vanished host), reset connections, refused connections.

    with FaultProxy(server.port) as proxy:
        q = Queue.from_url(proxy.url(), name="q")
        proxy.blackhole()            # every byte from now on vanishes, both ways
        proxy.heal()                 # new connections work again; the poisoned ones stay dead

It runs an asyncio loop in a daemon thread; every method is called from the test's thread and takes
effect at once. A connection that lost a byte to the blackhole is *poisoned*: it stays dead after
``heal`` (a real half-open connection never comes back, and a RESP stream with a hole in it could
not be read anyway), so a client must notice and reconnect by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

T = TypeVar("T")

CHUNK_BYTES = 65536
UP, DOWN = "up", "down"  # client -> server, server -> client


@dataclass
class Faults:
    """What the proxy does to bytes now (read by the pumps on every chunk)."""

    latency: float = 0.0  # one way, seconds: a round trip is twice this
    jitter: float = 0.0  # each chunk's delay is latency * (1 ± jitter), order kept
    bytes_per_second: float | None = None  # each direction's limit (None: unlimited)
    blackholed: set[str] = field(default_factory=set)  # UP and/or DOWN: bytes dropped, nothing said
    refusing: bool = False  # new connections are reset at once


@dataclass
class Link:
    """One client connection and its connection to the server."""

    number: int
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    poisoned: bool = False  # lost bytes to a blackhole: dead for good
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    """Listens on 127.0.0.1 (a free port) and forwards each connection to ``target_host:target_port``."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1", *, seed: int = 0) -> None:
        self.target = (target_host, target_port)
        self.faults = Faults()
        self.port = 0
        self.accepted = 0  # connections accepted (refused ones too)
        self.dropped_bytes = 0  # bytes the blackhole swallowed
        self._random = random.Random(seed)
        self._links: dict[int, Link] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None

    # -- life

    def start(self) -> Self:
        self._thread.start()
        self._server = self._call(self._listen())
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    # -- faults, switched at run time

    def set_latency(self, round_trip: float, jitter: float = 0.0) -> None:
        """Each chunk waits ``round_trip / 2`` each way, times 1 ± ``jitter`` (0.1: ±10%)."""
        self.faults.latency, self.faults.jitter = round_trip / 2, jitter

    def set_bandwidth(self, bytes_per_second: float | None) -> None:
        self.faults.bytes_per_second = bytes_per_second

    def blackhole(self, *, up: bool = True, down: bool = True) -> None:
        """From now on drop the bytes going up (client -> server) and/or down, silently."""
        self.faults.blackholed = {d for d, on in ((UP, up), (DOWN, down)) if on}

    def refuse(self, refusing: bool = True) -> None:
        """New connections are reset as soon as accepted (existing ones go on)."""
        self.faults.refusing = refusing

    def heal(self) -> None:
        """No latency, limit, blackhole or refusal from now on; poisoned connections stay dead."""
        self.faults = Faults()

    def reset_all(self) -> int:
        """Reset (RST) every open connection on the client's side, and close it to the server; how many."""
        return self._call(self._reset_all())

    def open_connections(self) -> int:
        """Connections that still carry bytes (not poisoned)."""
        return sum(1 for link in list(self._links.values()) if not link.poisoned)

    def poisoned_connections(self) -> int:
        return sum(1 for link in list(self._links.values()) if link.poisoned)

    # -- inside the loop

    def _call(self, coroutine: Awaitable[T]) -> T:
        async def run() -> T:
            return await coroutine

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    async def _listen(self) -> asyncio.Server:
        return await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links.values()):
            self._drop(link, reset=False)
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _reset_all(self) -> int:
        links = list(self._links.values())
        for link in links:
            self._drop(link, reset=True)
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.faults.refusing:
            _reset(writer)
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        link = Link(self.accepted, writer, server_writer)
        self._links[link.number] = link
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, server_writer, UP)),
            asyncio.create_task(self._pump(link, server_reader, writer, DOWN)),
        ]

    async def _pump(self, link: Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: str) -> None:
        """Copy one direction, chunk by chunk: each delivered at its due time, in order."""
        due = 0.0
        pending: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        deliver = asyncio.create_task(self._deliver(link, pending, writer))
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    break
                faults = self.faults
                if link.poisoned or way in faults.blackholed:
                    link.poisoned = True
                    self.dropped_bytes += len(data)
                    continue
                delay = faults.latency * (1 + faults.jitter * (2 * self._random.random() - 1))
                due = max(due, time.monotonic() + delay)  # jitter never reorders a stream
                pending.put_nowait((due, data))
        except (ConnectionError, OSError):
            pass
        finally:
            pending.put_nowait(None)
            with contextlib.suppress(Exception):
                await deliver
            if not link.poisoned:  # a clean end goes through; a poisoned link says nothing
                self._drop(link, reset=False)

    async def _deliver(
        self, link: Link, pending: asyncio.Queue[tuple[float, bytes] | None], writer: asyncio.StreamWriter
    ) -> None:
        while (item := await pending.get()) is not None:
            due, data = item
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            if link.poisoned:
                continue
            writer.write(data)
            await writer.drain()
            if (rate := self.faults.bytes_per_second) is not None:
                await asyncio.sleep(len(data) / rate)

    def _drop(self, link: Link, *, reset: bool) -> None:
        if self._links.pop(link.number, None) is None:
            return
        if reset:
            _reset(link.client)
        else:
            link.client.close()
        link.server.close()
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0), as a refusing or crashing peer does."""
    sock: Any = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
