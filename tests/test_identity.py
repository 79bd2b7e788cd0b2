"""Job identity: the same id twice is one job ("ignore"); "replace" debounces a job that still waits;
"rerun" runs an ended one again. On a real Redis, and with a real worker where jobs run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import setqueue
from setqueue import FailOutcome
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.tasks_app import add
from tests.support.waits import wait_until

REGISTRY = "tests.support.tasks_app:tasks"


def test_a_hundred_replace_sends_while_it_waits_run_once_with_the_last_arguments(
    start_worker: Callable[..., Proc], redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    debounced = add.options(id="digest", if_exists="replace")
    sent = [q.send(debounced, n, n) for n in range(100)]
    assert [s.created for s in sent] == [True] + [False] * 99
    assert q.stats()["todos"] == 1
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    assert q.result("digest", timeout=30) == 198  # the last call's arguments
    assert ExecutionLog(tmp_path / "exec.log").starts()["digest"] == 1
    info = q.inspect("digest")
    assert info is not None and [h.kind for h in info.history].count("replaced") == 10  # its last ten lines
    # Once it ran, a replace changes nothing.
    assert not q.send(debounced, 1, 1).created
    assert q.result("digest", timeout=5) == 198
    q.close()


def test_rerun_runs_an_ended_job_again_and_its_history_keeps_the_first_run(
    start_worker: Callable[..., Proc], redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    q = setqueue.open_queue(redis_url, queue_name)
    again = add.options(id="nightly", if_exists="rerun")
    assert q.send(again, 1, 2).created
    assert q.result("nightly", timeout=30) == 3
    assert q.send(add.options(id="nightly"), 5, 5).created is False  # ignore: it ran, it stays done
    second = q.send(again, 10, 20)
    assert second.created
    wait_until(lambda: ExecutionLog(tmp_path / "exec.log").starts()["nightly"] == 2, 30, "the second run")
    assert q.result("nightly", timeout=30) == 30
    info = q.inspect("nightly")
    assert info is not None and info.state == "done" and "rerun" in [h.kind for h in info.history]
    q.close()


def test_replace_moves_a_job_between_waiting_places_and_leaves_running_ones_alone(
    redis_url: str, queue_name: str
) -> None:
    q = setqueue.open_queue(redis_url, queue_name, retry_backoff_seconds=0)
    assert q.enqueue({"j": "first"}, group="g", priority=1) == 1
    assert q.enqueue({"j": "later"}, delay=3600, if_exists="replace") == 0  # to scheduled, out of its group
    info = q.inspect("j")
    assert info is not None and (info.state, info.payload, info.group) == ("scheduled", "later", None)
    assert q.stats()["grouped_waiting"] == 0 and q.groups() == []
    assert q.enqueue({"j": "now"}, priority=5, if_exists="replace") == 0  # back to todos, its new priority
    info = q.inspect("j")
    assert info is not None and (info.state, info.payload, info.priority) == ("todos", "now", 5)
    [lease] = q.claim(1)
    assert q.enqueue({"j": "while it runs"}, if_exists="replace") == 0
    assert lease.payload == "now" and q.inspect("j").payload == "now"  # type: ignore[union-attr]
    assert q.enqueue(["j"], if_exists="rerun") == 0  # running: left alone
    assert q.fail(lease, "broken", retry=False) is FailOutcome.DEAD
    assert q.enqueue({"j": "fixed"}, if_exists="replace") == 0  # ended: replace leaves it
    assert q.enqueue({"j": "fixed"}, if_exists="rerun") == 1  # rerun: a new run
    info = q.inspect("j")
    assert info is not None and (info.state, info.payload, info.attempts, info.error) == ("todos", "fixed", 0, None)
    stats = q.stats()
    assert (stats["todos"], stats["failed"], stats["scheduled"]) == (1, 0, 0)
    q.close()


def test_a_bad_mode_is_refused_before_anything_is_written(redis_url: str, queue_name: str, client: redis.Redis) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    with pytest.raises(ValueError, match="if_exists must be one of ignore, replace, rerun, got 'maybe'"):
        q.enqueue(["a"], if_exists="maybe")
    with pytest.raises(ValueError, match="if_exists"):
        add.options(if_exists="maybe")
    assert list(client.scan_iter(match=f"setqueue:{{{queue_name}*")) == []
    q.close()
