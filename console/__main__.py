"""``python -m console`` / ``setqueue-console``: the operator console on CONSOLE_HOST:CONSOLE_PORT.

It reads REDIS_URL (one Redis or any node of a Redis Cluster) and shows every queue it finds there;
QUEUE_NAME's queues come first. A bad setting is one line on stderr and exit code 2, a Redis that
refuses the URL's password exit code 3, as for the services; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from types import FrameType

import uvicorn

from console.app import build_app
from console.data import Catalog
from console.security import Guard
from setqueue.client import connect, redact_url
from setqueue.factory import open_queue
from setqueue.runtime.logs import configure_logging
from setqueue.runtime.service import EXIT_REDIS, EXIT_SETTING, load_settings, refusal, usage
from setqueue.runtime.settings import ConsoleSettings, SettingError

PROGRAM = "setqueue-console"
log = logging.getLogger("setqueue.console")


def listen(host: str, port: int) -> socket.socket:
    """A listening socket, or OSError (the caller names the setting at fault)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _Signals:
    """The services' signals: the first SIGTERM or SIGINT stops the console gracefully and it exits 0
    (uvicorn's own handlers would raise the signal again, and the process would die by it); a second
    exits at once with 128 + its number. Installed first thing, before Redis is asked."""

    def __init__(self) -> None:
        self.server: uvicorn.Server | None = None
        self.stopping = False
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            os._exit(128 + signum)
        log.info("%s received: stopping (send it again to exit at once)", signal.Signals(signum).name)
        self.stopping = True
        if self.server is not None:
            self.server.should_exit = True


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # ours (_Signals) are installed already


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    code = usage(PROGRAM, "The operator console: queues, jobs, dead letters and workers in a browser.", argv)
    if code is not None:
        return code
    settings = load_settings(ConsoleSettings, PROGRAM, env)
    if settings is None:
        return EXIT_SETTING
    configure_logging(settings.log_level, settings.log_format, PROGRAM)
    signals = _Signals()
    options = {k: v for k, v in settings.queue_options().items() if k != "name"}
    client = connect(settings.redis_url)
    try:
        refused = refusal(open_queue(settings.redis_url, settings.queue_names[0], client=client, **options))
    except SettingError as exc:
        print(f"{PROGRAM}: {exc}", file=sys.stderr, flush=True)
        return EXIT_SETTING
    if refused is not None:
        where = redact_url(settings.redis_url)
        print(f"{PROGRAM}: Redis at {where} refused us: {refused}", file=sys.stderr, flush=True)
        return EXIT_REDIS
    try:
        sock = listen(settings.console_host, settings.console_port)
    except OSError as exc:
        name = "CONSOLE_PORT" if exc.errno == errno.EADDRINUSE else "CONSOLE_HOST"
        where = f"{settings.console_host}:{settings.console_port}"
        print(f"{PROGRAM}: invalid setting {name}: cannot listen on {where}: {exc}", file=sys.stderr, flush=True)
        return EXIT_SETTING
    catalog = Catalog(client, settings.redis_url, settings.queue_names, settings.queue_shards, options)
    guard = Guard(settings.console_token)
    app = build_app(catalog, guard, settings.redis_url)
    log.info(
        "%s on http://%s:%d (redis=%s, %s)",
        PROGRAM,
        settings.console_host,
        settings.console_port,
        redact_url(settings.redis_url),
        "read-only: no CONSOLE_TOKEN" if guard.read_only else "actions for those who sign in with CONSOLE_TOKEN",
    )
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", server_header=False)
    signals.server = _Server(config)
    if not signals.stopping:  # (a signal during the start: stop before serving)
        signals.server.run(sockets=[sock])
    sock.close()
    client.close()
    log.info("%s stopped", PROGRAM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
