"""Tasks seen from outside: a worker serving a task registry lists its tasks in the registry of live
workers and on the console's workers page, and counts its jobs and their run time by task, under a
label whose values are the declared names and ``other``, never a name from a payload."""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable

import pytest
import redis

import setqueue
from setqueue import JobFailed, MoveTo, Tasks
from setqueue.registry import MOST_TASKS_LISTED, WorkerRecord, beat, live_workers
from setqueue.runtime.metrics import OTHER_TASK
from setqueue.runtime.settings import WorkerSettings
from tests.support.console import StartConsole
from tests.support.procs import Proc, base_env
from tests.support.tasks_app import add, greet, slow, tasks
from tests.support.waits import wait_until
from worker.heartbeat import Heartbeat
from worker.service import WorkerService

StartWorker = Callable[..., Proc]
REGISTRY = "tests.support.tasks_app:tasks"
SERVED = tasks.names  # sorted
OUTCOMES = ("success", "failure")


def tasks_cell(page: str, pid: int) -> str:
    """The tasks cell of the worker of ``pid`` on a workers table."""
    row = re.search(rf'<tr data-worker="[^"]*" data-pid="{pid}">(.*?)</tr>', page, re.S)
    assert row, f"no worker of pid {pid} on the page"
    cell = re.search(r'<td class="tasks">(.*?)</td>', row[1], re.S)
    assert cell, row[1]
    return cell[1]


def test_the_registry_and_the_console_list_the_tasks_a_worker_serves(
    start_worker: StartWorker, start_console: StartConsole, client: redis.Redis, queue_name: str
) -> None:
    served = start_worker(queue_name, JOB_HANDLER=REGISTRY)
    plain = start_worker(queue_name)  # tests.support.jobs:handle, a plain handler

    def both() -> dict[int, WorkerRecord] | None:
        found = {record.pid: record for record in live_workers(client, queue_name)}
        return found if len(found) == 2 else None

    records = wait_until(both, 20, "both workers' records")
    assert records is not None
    mine, other = records[served.process.pid], records[plain.process.pid]
    assert (mine.tasks, mine.task_count, mine.handler) == (SERVED, len(SERVED), REGISTRY)
    assert (other.tasks, other.task_count) == ([], 0)

    # A registry larger than a record lists: the first names, sorted, and how many more.
    many = [f"task-{n:03}" for n in reversed(range(MOST_TASKS_LISTED + 50))]
    heartbeat = Heartbeat(client, [queue_name], 60, slots=1, snapshot=lambda: (0, []), tasks=many)
    big = heartbeat.record()
    assert big.tasks == sorted(many)[:MOST_TASKS_LISTED] and big.task_count == len(many)
    beat(client, [queue_name], dataclasses.replace(big, pid=0), 60_000)

    browser = start_console(QUEUE_NAME=queue_name).client()
    page = browser.get("/workers")
    assert page.status == 200 and "<th>tasks</th>" in page.body
    assert re.findall(r"<code>([^<]*)</code>", tasks_cell(page.body, served.process.pid)) == SERVED
    assert "plain handler" in tasks_cell(page.body, plain.process.pid)
    listed = tasks_cell(page.body, 0)
    assert re.findall(r"<code>([^<]*)</code>", listed) == big.tasks and "and 50 more" in listed
    queue_page = browser.get(f"/queues/{queue_name}")  # a queue's page lists its workers too
    assert "<code>greet</code>" in tasks_cell(queue_page.body, served.process.pid)


def task_counts(worker: Proc) -> dict[tuple[str, str], float]:
    """(task, outcome) -> jobs, over the worker's queues."""
    samples = worker.metrics()
    return {
        (task, outcome): samples.get(f'setqueue_task_jobs_total{{outcome="{outcome}",task="{task}"}}', -1)
        for task in [*SERVED, OTHER_TASK]
        for outcome in OUTCOMES
    }


def test_a_worker_counts_its_jobs_and_their_run_time_by_task(
    start_worker: StartWorker, redis_url: str, queue_name: str
) -> None:
    worker = start_worker(queue_name, JOB_HANDLER=REGISTRY, JOB_TIMEOUT_SECONDS="30", RETRY_BACKOFF_SECONDS="0")
    before = task_counts(worker)
    assert before == dict.fromkeys(before, 0.0), "every declared task's series, and other's, from the start"
    q = setqueue.open_queue(redis_url, queue_name, max_attempts=5, retry_backoff_seconds=0)
    fine = [q.send(add, n, n) for n in range(3)] + [q.send(greet, "ada")]
    failing = [
        q.send(tasks["flaky"], "boom"),  # two attempts (its own max_attempts): two failures
        q.send(slow, 5),  # past its own timeout: a failure, and no run time
        q.send("add", 1, 2, 3),  # a declared task whose call does not fit: add's failure
        q.send("charge_card", "o-1"),  # no declared task: other, not a series of its own
    ]
    assert q.enqueue({"plain-1": "not a task call"}) == 1  # other
    assert [q.result(sent, timeout=30) for sent in fine] == [0, 2, 4, "hello ada!"]
    for job in [*(sent.id for sent in failing), "plain-1"]:
        with pytest.raises(JobFailed):
            q.result(job, timeout=30)

    expected = {key: 0.0 for key in before} | {
        ("add", "success"): 3,
        ("greet", "success"): 1,
        ("flaky", "failure"): 2,
        ("slow", "failure"): 1,
        ("add", "failure"): 1,
        (OTHER_TASK, "failure"): 2,
    }
    wait_until(lambda: task_counts(worker) == expected, 10, f"the counts by task to be {expected}")
    samples = worker.metrics()
    for outcome in OUTCOMES:  # the same jobs as setqueue_jobs_completed_total, split by task
        by_task = sum(n for (_, which), n in expected.items() if which == outcome)
        assert samples[f'setqueue_jobs_completed_total{{outcome="{outcome}"}}'] == by_task
    runs = {task: samples.get(f'setqueue_task_run_seconds_count{{task="{task}"}}') for task in [*SERVED, OTHER_TASK]}
    # Runs that returned or raised, as setqueue_job_processing_seconds counts them: not the timed-out one.
    assert runs == dict.fromkeys(runs) | {"add": 4, "flaky": 2, "greet": 1, OTHER_TASK: 2}
    assert samples['setqueue_task_run_seconds_bucket{le="+Inf",task="add"}'] == 4
    assert not [key for key in samples if "charge_card" in key]
    q.close()


def test_a_plain_handler_exports_no_series_by_task(start_worker: StartWorker, redis_url: str, queue_name: str) -> None:
    worker = start_worker(queue_name)
    q = setqueue.open_queue(redis_url, queue_name)
    q.enqueue(["a", "b"])
    wait_until(lambda: worker.metric('setqueue_jobs_completed_total{outcome="success"}') == 2, 20, "both jobs done")
    assert not [key for key in worker.metrics() if key.startswith("setqueue_task_")]
    q.close()


def test_each_run_noted_is_forgotten_once_its_outcome_is_known(redis_url: str, queue_name: str) -> None:
    """Moved (a success), a result too large to keep (a failure), cancelled while it ran (not counted):
    the worker pops each run's note, so the notes do not grow."""
    registry = Tasks()
    waiting = threading.Event()

    @registry.task(name="move")
    def move() -> None:
        raise MoveTo(f"{queue_name}-elsewhere")

    @registry.task(name="huge")
    def huge() -> str:
        return "x" * 2000

    @registry.task(name="wait")
    def wait() -> None:
        waiting.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)

    env = base_env(
        REDIS_URL=redis_url, QUEUE_NAME=queue_name, METRICS_PORT=0, IDLE_WAIT_SECONDS=0.05, RESULT_MAX_BYTES=1000
    )
    service = WorkerService(WorkerSettings.from_env(env), handler=registry)
    notes = registry.note_runs()
    q = setqueue.open_queue(redis_url, queue_name)
    moved, big, cancelled = q.send(move), q.send(huge), q.send(wait)
    thread = threading.Thread(target=service.run)
    thread.start()
    try:
        assert waiting.wait(30)
        assert q.cancel(cancelled.id) is not None
        states = {sent.id: "cancelled" if sent is cancelled else "done" for sent in (moved, cancelled)}
        wait_until(lambda: all(q.inspect(i).state == s for i, s in states.items()), 20, str(states))  # type: ignore[union-attr]
        with pytest.raises(JobFailed, match="result"):
            q.result(big, timeout=30)
        wait_until(lambda: not notes, 10, "every noted run forgotten")

        def count(task: str, outcome: str) -> float | None:
            labels = {"queue": queue_name, "task": task, "outcome": outcome}
            return service.metrics.registry.get_sample_value("setqueue_task_jobs_total", labels)

        counts = {(task, outcome): count(task, outcome) for task in ("move", "huge", "wait") for outcome in OUTCOMES}
        assert counts == {
            ("move", "success"): 1,
            ("move", "failure"): 0,
            ("huge", "success"): 0,
            ("huge", "failure"): 1,
            ("wait", "success"): 0,
            ("wait", "failure"): 0,
        }
    finally:
        service.request_stop()
        thread.join(30)
        q.close()
