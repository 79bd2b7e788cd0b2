"""PROCESSES=N>1: ``python -m worker`` supervises N single-process workers (docs/guide.md, "Using every
core"). A child is ``sys.executable -m worker`` with PROCESSES=1, not a ``multiprocessing`` spawn: a
fresh interpreter inherits nothing from a fork (signals, connections, threads), Popen gives the exit
code or signal straight, nothing is pickled. Each serves /metrics on a 127.0.0.1 socket we bound for
it, so no other process can take the port in between.
"""

from __future__ import annotations

import json
import logging
import operator
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.samples import Sample

from setqueue.client import OptionError, redact_url
from setqueue.factory import open_queue
from setqueue.runtime.httpd import MetricsServer
from setqueue.runtime.logs import flush_logs
from setqueue.runtime.metrics import SupervisorMetrics
from setqueue.runtime.service import EXIT_REDIS, EXIT_SETTING, cannot_listen, refusal
from setqueue.runtime.settings import SettingError, WorkerSettings
from worker.restart import RESTART_WINDOW_SECONDS, restart_delay

# "<index> <metrics socket fd> <supervisor pid>", set by the supervisor in a child's environment.
CHILD_ENV = "SETQUEUE_WORKER_CHILD"

TICK_SECONDS = 0.1
SCRAPE_TIMEOUT_SECONDS = 5.0
PARENT_CHECK_SECONDS = 1.0
FATAL = {EXIT_SETTING: "a bad setting", EXIT_REDIS: "Redis refuses us"}  # it would only do it again

# Samples of several processes are summed, except these (why: docs/reference.md, "One /metrics").
LEAST = {"setqueue_redis_up", "process_start_time_seconds", "process_max_fds"}
MOST = {"setqueue_seconds_since_sweep"}
ACCUMULATING = ("counter", "histogram", "summary")  # what a child's successor carries on from


@dataclass(frozen=True)
class ChildRole:
    """What a child learns from its supervisor (``CHILD_ENV``)."""

    index: int
    metrics_fd: int
    parent: int

    def to_env(self) -> str:
        return f"{self.index} {self.metrics_fd} {self.parent}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ChildRole | None:
        raw = (os.environ if env is None else env).get(CHILD_ENV)
        if not raw:
            return None
        index, fd, parent = (int(part) for part in raw.split())
        return cls(index, fd, parent)

    def metrics_socket(self) -> socket.socket:
        return socket.socket(fileno=self.metrics_fd)

    def watch_parent(self) -> None:
        """SIGTERM this process once its supervisor is gone: a SIGKILLed one leaves no workers behind."""

        def watch() -> None:
            while os.getppid() == self.parent:
                time.sleep(PARENT_CHECK_SECONDS)
            logging.getLogger("setqueue.worker").warning("the supervisor (pid %d) is gone: stopping", self.parent)
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()


@dataclass
class Child:
    """One of the N places; ``process`` is None between a crash and its restart."""

    index: int
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    restart_at: float | None = None
    restarts: list[float] = field(default_factory=list)  # monotonic times of its recent restarts
    told: int = 0  # how many of the stop signals its process was given

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Supervisor:
    def __init__(self, settings: WorkerSettings, program: str) -> None:
        self.settings = settings
        self.program = program
        self.log = logging.getLogger("setqueue.worker.supervisor")
        self.children = [Child(i) for i in range(settings.processes)]
        self.metrics = SupervisorMetrics(CollectorRegistry())
        self.metrics.registry.register(self)  # a collector: the children's samples, combined when scraped
        self._own = ProcessCollector(registry=None)
        self._lock = threading.Lock()  # the children's samples: read by the HTTP threads
        self._scraped: dict[int, list[Metric]] = {}  # child index -> what it last served
        self._retired: list[Metric] = []  # exited children's counters, as last scraped
        self._signals = 0
        self._asked: list[int] = []  # signals to pass on to every child: a drain, then an exit at once
        self._exit_code = 0

    def run(self) -> int:
        s = self.settings
        server: MetricsServer | None = None
        if s.metrics_port:
            try:
                server = MetricsServer(s.metrics_port, self.metrics.registry, self.health, host=s.metrics_host)
            except OSError as exc:
                self._say(cannot_listen(s, exc))
                return EXIT_SETTING
            server.start()
        try:
            # Once before any child starts: one line and exit 2 or 3, not N. Children check again.
            code = self._check_redis()
            if code is not None:
                return code
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            self.log.info(
                "%s supervising %d worker processes: queue=%s redis=%s metrics=%s",
                self.program,
                len(self.children),
                s.queue_name,
                redact_url(s.redis_url),
                f"{s.metrics_host}:{s.metrics_port}" if s.metrics_port else "off",
            )
            for child in self.children:
                if not self.stopping:  # a signal may come while they start
                    self._start(child)
            started = [str(c.process.pid) for c in self.children if c.process is not None]
            self.log.info("started %d worker processes: pids %s", len(started), " ".join(started))
            code = self._supervise()
        finally:
            for child in self.children:  # after an unexpected error: never leave one running
                if child.running() and child.process is not None:
                    child.process.send_signal(signal.SIGTERM)
            if server is not None:
                server.stop()
        self.log.info("%s stopped (exit code %d)", self.program, code)
        return code

    def _supervise(self) -> int:
        while True:
            now = time.monotonic()
            for child in self.children:
                process = child.process
                if process is not None and process.poll() is not None:
                    self._exited(child, process, now)
                if child.process is None and child.restart_at is not None and now >= child.restart_at:
                    if self.stopping:
                        child.restart_at = None
                    else:
                        self._start(child)
                        self.metrics.restarts.inc()
            self._pass_on()  # to a child that started as a signal came, too
            self.metrics.processes.set(sum(c.running() for c in self.children))
            if self.stopping and all(c.process is None for c in self.children):
                return self._exit_code
            time.sleep(TICK_SECONDS)

    @property
    def stopping(self) -> bool:
        return bool(self._asked)

    def _start(self, child: Child) -> None:
        # Bound here, listened on there: the port is the child's from now.
        listener = socket.create_server(("127.0.0.1", 0))
        child.port = listener.getsockname()[1]
        role = ChildRole(child.index, listener.fileno(), os.getpid())
        env = {
            **os.environ,
            "PROCESSES": "1",
            "METRICS_HOST": "127.0.0.1",
            "METRICS_PORT": str(child.port),
            CHILD_ENV: role.to_env(),
        }
        child.told = 0
        try:
            child.process = subprocess.Popen(
                [sys.executable, "-m", "worker"],
                env=env,
                stdin=subprocess.DEVNULL,
                pass_fds=(listener.fileno(),),
                process_group=0,  # a terminal's Ctrl-C reaches the children through us only
            )
        finally:
            listener.close()
        child.restart_at = None

    def _exited(self, child: Child, process: subprocess.Popen[bytes], now: float) -> None:
        code = process.returncode
        with self._lock:  # its counters carry on in its successor's sum
            child.process = None
            last = self._scraped.pop(child.index, [])
            self._retired = combine([self._retired, [f for f in last if _accumulates(f)]])
        how = f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"
        who = f"worker process {child.index} (pid {process.pid}) {how}"
        if self.stopping:
            # A clean drain: 0, or dying of the signal passed on before its handlers were installed
            # (nothing claimed yet). After a second signal they exit 128 + its number, as asked.
            if code not in (0, -signal.SIGTERM, -signal.SIGINT) and len(self._asked) < 2 and self._exit_code == 0:
                self.log.error("%s while stopping", who)
                self._exit_code = code if code > 0 else 1
            return
        if code in FATAL:
            self.log.error("%s (%s): not restarting it; stopping the others", who, FATAL[code])
            self._stop_all(code)
            return
        # The rule a worker alone restarts itself by (worker.restart).
        child.restarts, delay = restart_delay(child.restarts, now)
        if delay is None:
            self.log.error(
                "%s after %d restarts within %gs: giving up; stopping the others",
                who,
                len(child.restarts),
                RESTART_WINDOW_SECONDS,
            )
            self._stop_all(1)
            return
        child.restart_at = now + delay
        self.log.warning("%s: restarting it in %.2fs", who, delay)

    def _stop_all(self, code: int) -> None:
        """Every child drains as on SIGTERM, then the supervisor exits with ``code``."""
        self._exit_code = code
        if not self._asked:
            self._asked.append(signal.SIGTERM)
        self._pass_on()

    def _pass_on(self) -> None:
        for child in self.children:
            process = child.process
            if process is None or process.poll() is not None:
                continue
            # Counted before sending: a signal handler running meanwhile sends only what is newer.
            pending, child.told = self._asked[child.told :], len(self._asked)
            for signum in pending:
                process.send_signal(signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self._signals += 1
        if self._signals == 1 and not self._asked:
            self.log.info(
                "%s received: passing it on to the worker processes, which finish their jobs "
                "(send it again to make them exit at once)",
                name,
            )
            self._asked.append(signum)
        elif self._signals == 1:  # they drain already (a child could not be kept running)
            self.log.info("%s received: already stopping (send it again to make them exit at once)", name)
        elif len(self._asked) < 2:
            self.log.warning("second %s received: passing it on; the worker processes exit at once", name)
            self._asked.append(signum)
            self._exit_code = self._exit_code or 128 + signum
        flush_logs()
        self._pass_on()

    def _check_redis(self) -> int | None:
        s = self.settings
        options = {k: v for k, v in s.queue_options().items() if k != "name"}
        try:
            queue = open_queue(s.redis_url, s.queue_names, shards=s.queue_shards, **options)
        except OptionError as exc:
            self._say(str(SettingError.of(exc)))
            return EXIT_SETTING
        try:
            refused = refusal(queue)
        except SettingError as exc:
            self._say(str(exc))
            return EXIT_SETTING
        finally:
            queue.close()
        if refused is not None:
            self._say(f"Redis at {redact_url(s.redis_url)} refused us: {refused}")
            return EXIT_REDIS
        return None

    def _say(self, line: str) -> None:
        print(f"{self.program}: {line}", file=sys.stderr, flush=True)

    def collect(self) -> list[Metric]:
        live: list[list[Metric]] = []
        for child in self.children:
            process = child.process
            if process is None or process.poll() is not None:
                continue
            got = _get(child.port, "/metrics")
            with self._lock:
                if child.process is not process:  # it exited meanwhile: its counters are retired
                    continue
                if got is not None and got[0] == 200:
                    self._scraped[child.index] = list(text_string_to_metric_families(got[1]))
                # No answer this time: as it last did, so no sum goes down.
                live.append(self._scraped.get(child.index, []))
        with self._lock:
            retired = self._retired
        return combine([list(self._own.collect()), *live, retired])

    def health(self) -> tuple[bool, dict[str, Any]]:
        children: list[dict[str, Any]] = []
        for child in self.children:
            process = child.process
            entry: dict[str, Any] = {"index": child.index}
            if process is None or process.poll() is not None:
                entry["status"] = "restarting" if child.restart_at is not None else "exited"
            else:
                entry["pid"] = process.pid
                entry["status"] = _status(_get(child.port, "/healthz"))
            children.append(entry)
        ok = all(entry["status"] == "ok" for entry in children)
        body = {
            "status": "ok" if ok else "degraded",
            "service": "worker",
            "queue": self.settings.queue_name,
            "processes": len(self.children),
            "running": sum(c.running() for c in self.children),
            "stopping": self.stopping,
            "children": children,
        }
        return ok, body


def _get(port: int, path: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=SCRAPE_TIMEOUT_SECONDS) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:  # /healthz's 503 still has its body
        return exc.code, exc.read().decode()
    except (OSError, ValueError):  # refused, reset, timed out; a body that is not text
        return None


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name
        return f"signal {signum}"


def _status(got: tuple[int, str] | None) -> str:
    if got is None:
        return "unreachable"
    try:
        return str(json.loads(got[1]).get("status", "?"))
    except (ValueError, AttributeError):
        return f"HTTP {got[0]}"


def _accumulates(family: Metric) -> bool:
    return family.type in ACCUMULATING or family.name.endswith("_created")


def _rule(sample: str) -> Callable[[float, float], float]:
    if sample in LEAST or sample.endswith("_created"):  # _created: when the series began, the earliest
        return min
    if sample in MOST:
        return max
    return operator.add


def combine(sources: Sequence[Iterable[Metric]]) -> list[Metric]:
    """Several processes' families as one, each sample combined by ``_rule``, in the order first seen."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for source in sources:
        for family in source:
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            seen = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                seen[key] = sample.value if key not in seen else _rule(sample.name)(seen[key], sample.value)
    for name, family in families.items():
        family.samples = [Sample(sample, dict(labels), value) for (sample, labels), value in values[name].items()]
    return list(families.values())
