"""What every measurement shares. Importing it puts this checkout's shared/ and root first on sys.path: the
bench measures the code it sits beside even if the venv has another checkout installed editable."""

import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path[:0] = [str(REPO / "shared"), str(REPO)]
from tests.support import RedisServer  # noqa: E402  (the tests' real redis-server, from this checkout)

WORKERS_DIR = BENCH / "workers"
QUEUE = "bench"
COUNTER = "bench:counter"  # every job INCRs it once: counter == jobs means each ran exactly once
LATENCY = "bench:latency"  # a latency job's start time, by job id


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_until(done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def git(*args: str, cwd: Path = REPO) -> str:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


@dataclass(frozen=True)
class CodeTree:
    """The project copy a system runs: this checkout, or a --baseline worktree in bench/.baseline/<sha>."""

    root: Path
    label: str = ""  # the baseline's short sha; "" for this checkout
    ref: str = ""
    sha: str = ""

    @property
    def is_current(self) -> bool:
        return self.root == REPO

    def suffix(self) -> str:  # setqueue@762146c
        return f"@{self.label}" if self.label else ""

    def env(self, extra_path: Iterable[str] = ()) -> dict[str, str]:
        paths = [*extra_path, str(self.root / "shared"), str(self.root), os.environ.get("PYTHONPATH", "")]
        return {**os.environ, "PYTHONPATH": os.pathsep.join(paths).rstrip(os.pathsep)}


CURRENT = CodeTree(REPO)


def worktree(ref: str) -> CodeTree:
    """``ref`` in bench/.baseline/<sha>, made or reused if clean, checked to be what a worker there imports."""
    sha = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    path = BENCH / ".baseline" / sha
    if not path.exists():  # --force: a worktree whose directory was deleted can be made again
        git("worktree", "add", "--detach", "--force", "--quiet", str(path), sha)
    if git("rev-parse", "HEAD", cwd=path) != sha or git("status", "--porcelain", cwd=path):
        raise SystemExit(f"{path} is not a clean worktree at {sha}: remove it and run again")
    tree = CodeTree(path, label=git("rev-parse", "--short", sha), ref=ref, sha=sha)
    probe = "import json, setqueue, worker; print(json.dumps([setqueue.__file__, worker.__file__]))"
    # From the tree's root, as a worker starts: the working directory comes first on sys.path.
    proc = subprocess.run([sys.executable, "-c", probe], env=tree.env(), cwd=path, capture_output=True, check=False)
    if proc.returncode != 0 or not all(Path(f).resolve().is_relative_to(path) for f in json.loads(proc.stdout)):
        raise SystemExit(f"{path}: a worker there would not run that tree's code:\n{proc.stdout!r}{proc.stderr!r}")
    return tree


@dataclass
class Context:
    out: Path  # bench/out/<date-time>/
    baseline: CodeTree | None

    def logs(self, name: str) -> Path:
        path = self.out / "logs" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


class Server(RedisServer):
    """A redis-server of the bench's own (loopback, persistence off)."""

    def __init__(self) -> None:
        super().__init__()
        self.start()
        self.r = redis.Redis(port=self.port, decode_responses=True)
        self.version = str(self.r.info("server")["redis_version"])

    def counter(self) -> int:
        return int(self.r.get(COUNTER) or 0)

    def close(self) -> None:
        self.r.close()
        self.cleanup()


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]
    cwd: Path = REPO  # `python -m worker` imports worker/ from here


class Workers:
    """Worker processes, each in a session of its own so that stop() ends their children."""

    def __init__(self, commands: list[Command], logdir: Path, label: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        for i, cmd in enumerate(commands):
            with open(logdir / f"{label}-{i}.log", "ab") as logf:
                how: dict[str, Any] = {"stdout": logf, "stderr": subprocess.STDOUT, "start_new_session": True}
                self.procs.append(subprocess.Popen(cmd.argv, env=cmd.env, cwd=cmd.cwd, **how))

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # KILL: whatever is left of each group after 5 s
            for p in self.procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
            deadline = time.monotonic() + 5
            for p in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(max(0.1, deadline - time.monotonic()))


def machine() -> dict[str, Any]:
    """Load average and CPU ticks (steal: time the hypervisor gave to others)."""
    ticks = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "platform": f"{platform.machine()}, Linux {platform.release()}, Python {platform.python_version()}",
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "cpu_ticks": dict(zip(names, (int(f) for f in ticks), strict=False)),
    }


def evalsha_ceiling(requests: int = 100_000) -> dict[str, float] | None:
    """What this host's Redis does with the least a script can be: ``EVALSHA`` of ``return 1`` from
    redis-benchmark on a bare redis-server of the bench's own, calls/s one at a time ("1") and 32
    pipelined ("32"). Beside a run's figures it says which host they had: a slower host lowers every
    script's rate alike. None without redis-benchmark."""
    if not shutil.which("redis-benchmark"):
        return None
    server = Server()
    try:
        sha = server.r.script_load("return 1")
        rates: dict[str, float] = {}
        for pipeline in ("1", "32"):
            argv = ["redis-benchmark", "-p", str(server.port), "-n", str(requests), "-P", pipeline, "-q"]
            out = subprocess.run([*argv, "EVALSHA", sha, "0"], capture_output=True, text=True, timeout=120, check=True)
            # "EVALSHA ...: 94339.62 requests per second, p50=0.271 msec" (the last of its \r-separated lines)
            line = out.stdout.replace("\r", "\n").strip().splitlines()[-1]
            rates[pipeline] = float(line.split(": ", 1)[1].split(" requests per second")[0])
        return rates
    finally:
        server.close()


def median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"
