"""The console as a real process, and an HTTP client that keeps its cookie and reads the CSRF token
off the pages, as a browser does, without following redirects."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from setqueue import JobQueue
from tests.support.procs import Proc, base_env
from tests.support.redis_server import free_port
from tests.support.waits import wait_until

CSRF = re.compile(r'name="csrf" value="([0-9a-f]*)"')
STATES = ("todos", "in_progress", "done", "failed", "scheduled", "cancelled", "waiting")
FAILURE = "ValueError('no {id}')\nTraceback (most recent call last):\nValueError"


def counts(queue: JobQueue) -> dict[str, int]:
    stats = queue.stats()
    return {s: stats[s] for s in STATES}


def dead_letters(queue: JobQueue, ids: list[str], error: str = FAILURE) -> None:
    """``error`` (its {id} filled in) each, with a traceback."""
    queue.enqueue(ids)
    left = len(ids)
    while left:
        leases = queue.claim(left)
        left -= len(leases)
        for lease in leases:
            queue.fail(lease, error.format(id=lease.id), retry=False)


@dataclass
class Answer:
    status: int
    body: str
    headers: dict[str, str]

    @property
    def location(self) -> str:
        return self.headers.get("location", "")

    def error_detail(self) -> str:
        found = re.search(r'<p id="error-detail">(.*?)</p>', self.body, re.S)
        return found[1] if found else ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Browserless:
    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect())

    def _send(self, request: urllib.request.Request) -> Answer:
        try:
            with self.opener.open(request, timeout=30) as response:
                headers = {k.lower(): v for k, v in response.headers.items()}
                return Answer(response.status, response.read().decode(), headers)
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, exc.read().decode(), {k.lower(): v for k, v in exc.headers.items()})

    def get(self, path: str) -> Answer:
        return self._send(urllib.request.Request(self.base + path))

    def post(self, path: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> Answer:
        data = urllib.parse.urlencode(fields).encode()
        return self._send(urllib.request.Request(self.base + path, data=data, headers=headers or {}, method="POST"))

    def csrf(self, path: str = "/") -> str:
        """The CSRF token in a page's forms ("" when the page has none: not signed in)."""
        found = CSRF.search(self.get(path).body)
        return found[1] if found else ""

    def sign_in(self, token: str) -> Answer:
        return self.post("/login", {"token": token})


class ConsoleProc(Proc):
    @classmethod
    def start_console(cls, log_dir: Path, redis_url: str, *, name: str = "console", **settings: Any) -> ConsoleProc:
        port = settings.pop("CONSOLE_PORT", None) or free_port()
        env = base_env(REDIS_URL=redis_url, CONSOLE_PORT=port, CONSOLE_HOST="127.0.0.1", **settings)
        env.pop("JOB_HANDLER", None)
        proc = cls("console", log_dir, env, name=name)
        proc.port = int(port)
        wait_until(lambda: proc.try_get("/healthz") is not None or not proc.alive(), 20, "the console to answer")
        assert proc.alive(), f"the console exited early:\n{proc.log()}"
        return proc

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Browserless:
        return Browserless(self.url)

    def operator(self, token: str) -> Browserless:
        """A client signed in with ``token``."""
        client = self.client()
        assert client.sign_in(token).status == 303
        return client


StartConsole = Callable[..., ConsoleProc]
StartWorker = Callable[..., Proc]
