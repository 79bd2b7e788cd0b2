"""The console never blocks its own event loop on Redis: a Redis that stops answering gives 503 pages
within their bound and a /healthz that answers at once, even while every thread of the pool waits;
and no route reads Redis synchronously on the event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlencode

import pytest
import redis
import redis.connection
from starlette.applications import Starlette
from starlette.routing import Match, Mount, Route

from console.app import HEALTH_SECONDS, Health, build_app
from console.data import LIST_STATES, Catalog, console_client
from console.security import COOKIE, Guard
from setqueue import open_queue
from tests.support import RedisServer, need
from tests.support.console import ConsoleProc, dead_letters
from tests.support.procs import Proc
from tests.support.waits import wait_until

TOKEN = "blocking-test-token"
# Starlette runs a plain ``def`` route on anyio's default thread limiter: 40 threads.
POOL_THREADS = 40


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop (SIGSTOP) without stopping anyone else's."""
    server = RedisServer().start()
    yield server
    if server.process is not None:
        os.kill(server.process.pid, signal.SIGCONT)  # a stopped process would not see its SIGTERM
    server.cleanup()


def reads_waiting(port: int) -> int:
    """Connections to the Redis on ``port`` holding sent bytes it has not read: commands it owes a reply."""
    table = Path("/proc/net/tcp")
    if not table.exists():
        need("/proc/net/tcp", "this test counts a stopped Redis's unread commands in Linux's socket table")
    waiting = 0
    for line in table.read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if int(local.rsplit(":", 1)[1], 16) == port and state == "01" and int(queues.split(":")[1], 16) > 0:
            waiting += 1
    return waiting


def process_of(server: RedisServer) -> int:
    assert server.process is not None
    return server.process.pid


def timed_get(console: ConsoleProc, path: str) -> tuple[int, str, float]:
    started = time.monotonic()
    answer = console.client().get(path)
    return answer.status, answer.error_detail(), time.monotonic() - started


def test_a_stopped_redis_gives_quick_503_pages_and_healthz_at_once(
    tmp_path: Path, procs: list[Proc], own_redis: RedisServer, queue_name: str
) -> None:
    queue = open_queue(own_redis.url, queue_name)
    queue.enqueue(["a", "b"])
    # The pages' bound: longer than /healthz's (HEALTH_SECONDS) by more than it takes a loaded machine
    # to start the last of the pool's waits after the first one, so that /healthz is asked and answered
    # while they all still wait (with 2 s, under the other suites' load, a page once answered first).
    timeout = 5.0
    settings: dict[str, Any] = {
        "QUEUE_NAME": queue_name,
        "CONSOLE_TOKEN": TOKEN,
        "CONSOLE_REDIS_TIMEOUT_SECONDS": timeout,
    }
    console = ConsoleProc.start_console(tmp_path, own_redis.url, **settings)
    procs.append(console)
    operator = console.operator(TOKEN)
    csrf = operator.csrf(f"/queues/{queue_name}")
    page = f"/queues/{queue_name}"
    pages = ("/", page, f"{page}/jobs/todos", f"{page}/job?id=a", "/workers")
    for path in pages:
        assert console.client().get(path).status == 200, path
    pid = process_of(own_redis)
    requests = POOL_THREADS + 10  # more than the pool has threads: some wait for one
    os.kill(pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(requests) as senders:
            answers = [senders.submit(timed_get, console, page) for _ in range(requests)]
            wait_until(
                lambda: reads_waiting(own_redis.port) >= POOL_THREADS,
                10,
                "every thread of the console's pool to wait on the stopped Redis",
                interval=0.01,
            )
            started = time.monotonic()
            status, body = console.get("/healthz")
            healthz_seconds = time.monotonic() - started
            # No page had its answer yet: every thread of the pool was busy all the while.
            assert not any(answer.done() for answer in answers), "a page answered before /healthz did"
            assert status == 503 and '"redis_unreachable"' in body
            assert HEALTH_SECONDS < 2 and healthz_seconds < 2, f"/healthz took {healthz_seconds:.2f} s, Redis stopped"
            done = [answer.result(60) for answer in answers]
        print(f"\n/healthz: 503 in {healthz_seconds:.3f} s with every pool thread waiting on a stopped Redis")
        # A page waits for one reply at most the timeout; past the pool's threads a request first waits
        # for a thread: a second round.
        one_page = timeout + 1
        times = sorted(seconds for _, _, seconds in done)
        print(
            f"{requests} page requests: 503 in {times[0]:.2f} s to {times[-1]:.2f} s (one page's bound {one_page:g} s)"
        )
        for status, detail, _ in done:
            assert status == 503, detail
            assert "is not answering" in detail and f"within {timeout:g} s" in detail, detail
        assert times[POOL_THREADS - 1] < one_page
        assert times[-1] < 2 * one_page
        # Still stopped: a page asked now is refused within one page's bound too; an action may have
        # been done or not, and its page says so.
        status, detail, seconds = timed_get(console, page)
        assert status == 503 and "is not answering" in detail and seconds < one_page, (status, seconds)
        acted = operator.post(f"{page}/actions", {"action": "pause", "csrf": csrf})
        assert acted.status == 503 and "may have been done, or not" in acted.body
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: console.healthz() == (200, {"status": "ok"}), 10, "/healthz to answer 200 again")
    for path in pages:
        assert console.client().get(path).status == 200, path
    assert console.alive()


# -- no synchronous Redis call on the event loop


class LoopGuard:
    """Records every synchronous redis-py socket call (send or read) made on a thread running an event
    loop, with where it came from; counts those made elsewhere (on the pool's threads)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on_loop: list[str] = []
        self.off_loop = 0
        self._lock = threading.Lock()
        cls = redis.connection.AbstractConnection
        for name in ("send_packed_command", "read_response"):
            monkeypatch.setattr(cls, name, self._guarded(getattr(cls, name)))

    def _guarded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                with self._lock:
                    self.off_loop += 1
            else:
                self.on_loop.append("".join(traceback.format_stack(limit=20)))
            return method(*args, **kwargs)

        return guarded


class Asgi:
    """Requests straight to the ASGI app, on one event loop, a cookie kept as a browser would."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.cookie = ""
        self.driven: list[dict[str, Any]] = []

    async def request(self, method: str, target: str, form: dict[str, str] | None = None) -> tuple[int, str]:
        path, _, query = target.partition("?")
        body = urlencode(form).encode() if form is not None else b""
        headers = [(b"host", b"console.test")]
        if form is not None:
            headers += [(b"content-type", b"application/x-www-form-urlencoded"), (b"content-length", b"%d" % len(body))]
        if self.cookie:
            headers.append((b"cookie", f"{COOKIE}={self.cookie}".encode()))
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": unquote(path),
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 50000),
            "server": ("console.test", 80),
        }
        self.driven.append(dict(scope))
        sent = [{"type": "http.request", "body": body, "more_body": False}]
        status, chunks = 0, []

        async def receive() -> dict[str, Any]:
            if sent:
                return sent.pop()
            await asyncio.Event().wait()  # no disconnect: the client waits for its answer
            raise AssertionError("unreachable")

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message["headers"]:
                    if name == b"set-cookie" and value.startswith(f"{COOKIE}=".encode()):
                        self.cookie = value.decode().split(";")[0].split("=", 1)[1].strip('"')
            else:
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return status, b"".join(chunks).decode()


def test_no_route_reads_redis_synchronously_on_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, queue_name: str
) -> None:
    queue = open_queue(redis_url, queue_name)
    dead_letters(queue, ["f1", "f2", "f3", "f4"])
    queue.enqueue(["t1", "t2", "c1", "g1"])
    queue.enqueue(["later"], delay=3600)
    queue.ack(queue.claim(1)[0])
    queue.claim(1)
    catalog = Catalog(console_client(redis_url, 5), redis_url, [queue_name], 1)
    guard = Guard(TOKEN)
    health = Health(redis_url, 5)
    app = build_app(catalog, guard, redis_url, health, 5)
    loop_guard = LoopGuard(monkeypatch)
    client = Asgi(app)
    q = f"/queues/{queue_name}"

    async def drive() -> list[tuple[str, int]]:
        answered: list[tuple[str, int]] = []
        catalog.client.ping()  # first, the guard sees what it is there for
        assert loop_guard.on_loop, "a PING on the event loop went unseen"
        loop_guard.on_loop.clear()

        async def go(method: str, target: str, form: dict[str, str] | None = None) -> None:
            status, _ = await client.request(method, target, form)
            answered.append((f"{method} {target}", status))

        for target in ("/", "/?partial=1", "/workers", "/workers?partial=1", "/healthz", q, f"{q}?partial=1"):
            await go("GET", target)
        for state in LIST_STATES:
            await go("GET", f"{q}/jobs/{state}")
        await go("GET", f"{q}/job?id=f1")
        await go("GET", "/queues/no-such-queue")
        await go("GET", "/static/console.css")
        await go("GET", "/login")
        await go("POST", "/login", {"token": TOKEN})
        csrf = guard.csrf(guard.session(client.cookie))
        back = f"{q}/jobs/failed"
        for action in (
            {"action": "requeue", "id": "f1"},
            {"action": "cancel", "id": "c1"},
            {"action": "delete", "id": "f2"},
            {"action": "requeue-all"},
            {"action": "delete-all"},
            {"action": "pause"},
            {"action": "resume"},
            {"action": "rate", "rate": "100/s"},
            {"action": "group-limits", "group": "g", "concurrency": "2"},
        ):
            await go("POST", f"{q}/actions", {**action, "csrf": csrf, "back": back})
        await go("GET", f"{q}/actions")
        await go("POST", "/logout", {"csrf": csrf})

        await health.aclose()
        return answered

    answered = asyncio.run(drive())
    assert not loop_guard.on_loop, f"a synchronous Redis call on the event loop:\n{loop_guard.on_loop[0]}"
    assert loop_guard.off_loop > 50, "the pages read Redis (on the pool's threads)"
    expected_redirects = {f"POST {q}/actions", "POST /login", "POST /logout"}
    for what, status in answered:
        if what.split("?")[0] in expected_redirects:
            assert status == 303, (what, status)
        elif "no-such-queue" in what:
            assert status == 404
        elif what.endswith("/actions"):
            assert status == 405
        else:
            assert status == 200, (what, status)
    # Every route was driven: one added later is driven here too, or this fails.
    for route in app.routes:
        assert isinstance(route, Route | Mount)
        hit = any(route.matches(scope)[0] == Match.FULL for scope in client.driven)
        assert hit, f"no request of this test reaches {route.path}: drive it"
