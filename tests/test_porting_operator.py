"""What a newcomer porting a real app still trips on (issue 35: queue names, schedules, a shadowing
folder), each as it happened, on real processes and a real redis-server."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import setqueue
import setqueue.aio
from setqueue import Queue
from setqueue.registry import live_workers
from setqueue.runtime.cli import main as cli_main
from setqueue.runtime.periodic import iso, next_slot, redis_now
from tests.support import REPO_ROOT, RedisServer, queue_members
from tests.support.procs import Proc, base_env
from tests.support.waits import wait_until


def cli(redis_url: str, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return cli_main(["--redis-url", redis_url, *argv], out=out), out.getvalue()


# -- a comma in a library queue name


@pytest.mark.parametrize("opener", [setqueue.open_queue, setqueue.aio.open_queue], ids=["blocking", "asyncio"])
def test_a_comma_in_a_library_queue_name_is_refused_with_the_list_to_pass(
    opener: Callable[..., Any], redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    """It used to open a group of queues and put the job in the first."""
    charges, emails = f"{queue_name}-charges", f"{queue_name}-emails"
    with pytest.raises(ValueError, match="has a comma") as refused:
        opener(redis_url, f"{charges},{emails}").enqueue(["zz-1"])
    assert str(refused.value).endswith(f"several queues are a list, open_queue(url, {[charges, emails]!r})")
    assert client.keys(f"setqueue:{{{queue_name}*") == []
    both = setqueue.open_queue(redis_url, [charges, emails])  # the list still opens both, as one
    assert both.enqueue(["zz-1"]) == 1 and [q.name for q in both.queues] == [charges, emails]
    both.close()


# -- `schedules add` says the next run that happens


def test_changing_a_schedule_prints_the_run_the_cleaner_then_creates(
    redis_url: str, queue_name: str, queue: Queue, tmp_path: Path, procs: list[Proc]
) -> None:
    """Changed to a time whose slot today has passed (this very minute), it runs that slot at once: the
    command used to print the next slot, tomorrow's, while the cleaner created today's."""
    cleaner = Proc.start("cleaner", tmp_path, REDIS_URL=redis_url, QUEUE_NAME=queue_name, SWEEP_INTERVAL=0.1)
    procs.append(cleaner)
    cleaner.wait_ready()
    code, out = cli(redis_url, "--queue", queue_name, "schedules", "add", "nightly", "0 0 1 1 *")
    assert code == 0 and out.startswith("nightly: 0 0 1 1 * (UTC), next run ")
    wait_until(lambda: queue.redis.hexists(queue.keys.periodic, "nightly"), 15, "the cleaner to see it first")

    now = time.gmtime(redis_now(queue.redis))
    this_minute = f"{now.tm_min} {now.tm_hour} * * *"  # its latest slot is today's, whatever the time
    code, out = cli(redis_url, "--queue", queue_name, "schedules", "add", "nightly", this_minute)
    said = re.fullmatch(rf"nightly: {re.escape(this_minute)} \(UTC\), next run (\S+)( \(due now: .*\))?\n", out)
    assert code == 0 and said is not None, out
    runs = wait_until(lambda: sorted(queue_members(queue.redis, queue.keys)["todos"]), 15, "the cleaner's run")
    assert runs == [f"nightly@{said[1]}"] and said[2] is not None

    code, out = cli(redis_url, "--queue", queue_name, "schedules", "--json")
    [row] = [json.loads(line) for line in out.splitlines()]
    tomorrow = iso(next_slot(this_minute, redis_now(queue.redis)))
    assert (row["last_slot"], row["next_run"]) == (said[1], tomorrow)
    code, out = cli(redis_url, "--queue", queue_name, "schedules", "add", "nightly", this_minute)
    assert out == f"nightly: {this_minute} (UTC), next run {tomorrow}\n"  # unchanged: nothing due


# -- a folder named setqueue in the current directory


def run_in(folder: Path, *command: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=folder, env={**base_env(), **env}, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_setqueue_folder_that_shadows_the_package_is_named_in_one_line(tmp_path: Path) -> None:
    """A deployment repo with a setqueue/ folder of its own scripts, no __init__.py: run from there, Python
    took it for the package (python -m and -c put the current directory first on sys.path, PYTHONPATH=.
    does for the command too) and the import failed deep inside: cannot import name 'QueueCommands' from
    'setqueue.scripts' (unknown location)."""
    (tmp_path / "setqueue" / "scripts").mkdir(parents=True)
    (tmp_path / "setqueue" / "scripts" / "deploy.sh").write_text("#!/bin/sh\n")
    probe = run_in(tmp_path, sys.executable, "-c", "import setqueue; print(setqueue.__file__)")
    if probe.stdout.strip() != "None":
        pytest.skip(f"setqueue is installed where a folder cannot shadow it ({probe.stdout.strip()})")
    installed = REPO_ROOT / "shared" / "setqueue"
    said = (
        f"setqueue: the folder {tmp_path / 'setqueue'} (no __init__.py) shadows the installed setqueue package at "
        f"{installed}: run from another directory, or rename that folder"
    )
    command = Path(sys.executable).parent / "setqueue"
    for argv, env in (
        ([sys.executable, "-m", "worker", "--help"], {}),
        ([sys.executable, "-m", "cleaner", "--help"], {}),
        ([sys.executable, "-m", "setqueue", "--help"], {}),
        ([str(command), "--help"], {"PYTHONPATH": "."}),
    ):
        run = run_in(tmp_path, *argv, **env)
        assert (run.returncode, run.stderr, run.stdout) == (2, said + "\n", ""), argv
    alone = run_in(tmp_path, str(command), "--help")  # the command alone does not look in the current directory
    assert alone.returncode == 0 and alone.stdout.startswith("usage: setqueue")


# -- a typo in a queue name strands jobs in silence


def live(redis_url: str, name: str) -> int:
    with redis.Redis.from_url(redis_url) as client:
        return len(live_workers(client, name))


UNSERVED = "its jobs wait until one does (a typo? setqueue doctor lists the queues with work and no worker)"


def test_push_warns_when_no_live_worker_serves_the_queue(
    start_worker: Callable[..., Proc], redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--queue chrages push` printed `1 new` and nothing else: it still does, exit 0, and says on stderr
    that no worker serves that queue. A worker of QUEUE_NAME=charges,emails serves both."""
    charges, emails, typo = f"{queue_name}-charges", f"{queue_name}-emails", f"{queue_name}-chrages"
    worker = start_worker(f"{charges},{emails}")
    wait_until(lambda: live(redis_url, charges) and live(redis_url, emails), 15, "the worker in the registry")
    capsys.readouterr()
    assert cli(redis_url, "--queue", typo, "push", "charge-o5") == (0, "1 new, 0 already known\n")
    assert capsys.readouterr().err == f"setqueue: warning: no live worker serves queue '{typo}': {UNSERVED}\n"
    for name in (charges, emails, f"{emails},{typo}"):  # push fills the first queue named
        assert cli(redis_url, "--queue", name, "push", f"mail-{name}") == (0, "1 new, 0 already known\n")
        assert capsys.readouterr().err == ""
    served = setqueue.open_queue(redis_url, [charges, emails])
    wait_until(lambda: served.stats()["done"] == 3, 30, "the served queues' jobs done")
    served.close()
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0  # a clean stop leaves the registry at once
    assert cli(redis_url, "--queue", charges, "push", "charge-o6") == (0, "1 new, 0 already known\n")
    assert capsys.readouterr().err == f"setqueue: warning: no live worker serves queue '{charges}': {UNSERVED}\n"


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """Doctor looks at every queue of its Redis: none of the other tests' queues here."""
    server = RedisServer().start()
    yield server
    server.cleanup()


def test_doctor_lists_the_queues_with_work_and_no_worker(
    own_redis: RedisServer, tmp_path: Path, procs: list[Proc], queue_name: str
) -> None:
    url = own_redis.url
    charges, typo, later = f"{queue_name}-charges", f"{queue_name}-chrages", f"{queue_name}-later"
    worker = Proc.start("worker", tmp_path, REDIS_URL=url, QUEUE_NAME=charges, WORKER_HEARTBEAT_SECONDS=0.5)
    procs.append(worker)
    worker.wait_ready()
    wait_until(lambda: live(url, charges), 15, "the worker in the registry")
    setqueue.open_queue(url, typo).enqueue(["charge-o5"])
    setqueue.open_queue(url, later).enqueue(["report-1"], delay=3600)
    setqueue.open_queue(url, f"{queue_name}-wide", shards=3).enqueue(["a", "b", "c", "d"])
    setqueue.open_queue(url, charges).enqueue(["charge-o4"])

    def workers_line() -> str:
        _, out = cli(url, "--queue", charges, "doctor")
        [line] = [line for line in out.splitlines() if line.split()[1:2] == ["workers:"]]
        return line

    assert workers_line() == (
        f"WARN  workers: no live worker serves {typo} (1 waiting), {later} (1 scheduled), {queue_name}-wide "
        f"(4 waiting): their jobs wait until one does (a typo in a queue name?); live workers serve {charges}"
    )
    for name, job in ((typo, "charge-o5"), (later, "report-1")):
        assert cli(url, "--queue", name, "delete", job)[0] == 0
    wide = Proc.start("worker", tmp_path, name="wide", REDIS_URL=url, QUEUE_NAME=f"{queue_name}-wide", QUEUE_SHARDS=3)
    procs.append(wide)
    wide.wait_ready()
    wait_until(lambda: live(url, f"{queue_name}-wide"), 15, "the sharded queue's worker in the registry")
    assert workers_line() == (
        f"ok    workers: live workers serve {charges}, {queue_name}-wide; no queue with jobs lacks one"
    )


def test_the_cleaner_counts_each_queues_live_workers(
    start_worker: Callable[..., Proc], redis_url: str, queue_name: str, tmp_path: Path, procs: list[Proc]
) -> None:
    """setqueue_queue_workers{queue}: what SetqueueQueueWithoutWorkers reads, with the todos depth."""
    charges, typo = f"{queue_name}-charges", f"{queue_name}-chrages"
    cleaner = Proc.start(
        "cleaner", tmp_path, name="cleaner", REDIS_URL=redis_url, QUEUE_NAME=f"{charges},{typo}", SWEEP_INTERVAL=0.1
    )
    procs.append(cleaner)
    cleaner.wait_ready()
    worker = start_worker(charges)
    setqueue.open_queue(redis_url, typo).enqueue(["charge-o5"])

    def gauges() -> tuple[float, float, float]:
        got = cleaner.metrics()
        return (
            got[f'setqueue_queue_workers{{queue="{charges}"}}'],
            got[f'setqueue_queue_workers{{queue="{typo}"}}'],
            got[f'setqueue_queue_depth{{queue="{typo}",state="todos"}}'],
        )

    wait_until(lambda: gauges() == (1, 0, 1), 15, "one worker of charges, none of the typo with its job")
    worker.signal(signal.SIGTERM)
    worker.wait(30)
    wait_until(lambda: gauges() == (0, 0, 1), 15, "no worker of charges once it stopped")
