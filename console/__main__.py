"""``python -m console`` / ``setqueue-console``: the operator console on CONSOLE_HOST:CONSOLE_PORT.
Exit codes and signals as for the services."""

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

from console.app import Health, build_app
from console.data import Catalog, console_client
from console.security import Guard
from setqueue.client import redact_url
from setqueue.factory import open_queue
from setqueue.runtime.logs import configure_logging
from setqueue.runtime.service import EXIT_REDIS, EXIT_SETTING, load_settings, refusal, usage
from setqueue.runtime.settings import ConsoleSettings, SettingError

PROGRAM = "setqueue-console"
log = logging.getLogger("setqueue.console")


def listen(host: str, port: int) -> socket.socket:
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
    """As the services: the first SIGTERM/SIGINT stops gracefully, exit 0 (uvicorn's handlers would
    re-raise it and die by it); a second exits 128 + its number. Installed before Redis is asked."""

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
    s = load_settings(ConsoleSettings, PROGRAM, env)
    if s is None:
        return EXIT_SETTING
    configure_logging(s.log_level, s.log_format, PROGRAM)
    signals = _Signals()
    options = {k: v for k, v in s.queue_options().items() if k != "name"}
    timeout = s.console_redis_timeout_seconds
    client = console_client(s.redis_url, timeout, s.tls_options())
    try:
        refused = refusal(open_queue(s.redis_url, s.queue_names[0], shards=s.queue_shards, client=client, **options))
    except SettingError as exc:
        _say(str(exc))
        return EXIT_SETTING
    if refused is not None:
        _say(f"Redis at {redact_url(s.redis_url)} refused us: {refused}")
        return EXIT_REDIS
    try:
        sock = listen(s.console_host, s.console_port)
    except OSError as exc:
        name = "CONSOLE_PORT" if exc.errno == errno.EADDRINUSE else "CONSOLE_HOST"
        _say(f"invalid setting {name}: cannot listen on {s.console_host}:{s.console_port}: {exc}")
        return EXIT_SETTING
    guard = Guard(s.console_token)
    catalog = Catalog(client, s.redis_url, s.queue_names, s.queue_shards, options)
    app = build_app(catalog, guard, s.redis_url, Health(s.redis_url, timeout, s.tls_options()), timeout)
    log.info(
        "%s on http://%s:%d (redis=%s, %s)",
        PROGRAM,
        s.console_host,
        s.console_port,
        redact_url(s.redis_url),
        "read-only: no CONSOLE_TOKEN" if guard.read_only else "actions for those who sign in with CONSOLE_TOKEN",
    )
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", server_header=False)
    signals.server = _Server(config)
    if not signals.stopping:  # a signal came during the start
        signals.server.run(sockets=[sock])
    sock.close()
    client.close()
    log.info("%s stopped", PROGRAM)
    return 0


def _say(line: str) -> None:
    print(f"{PROGRAM}: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
