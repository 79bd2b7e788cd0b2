"""The console over HTTP, a real process on a real Redis: its pages match the queue, bad input gets a
clear page and status, and no action runs without the token, a session and a fresh CSRF token."""

from __future__ import annotations

import html
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from setqueue import JobRef, Queue, open_queue
from setqueue.client import connect
from setqueue.keys import shard_name, shard_of
from setqueue.registry import WorkerRecord, beat
from tests.support import REPO_ROOT, RedisServer
from tests.support.cluster import RedisClusterNodes
from tests.support.console import (
    STATES,
    Answer,
    Browserless,
    ConsoleProc,
    StartConsole,
    StartWorker,
    counts,
    dead_letters,
)
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc, base_env
from tests.support.waits import wait_for_redis_clock, wait_until

TOKEN = "console-test-token"
FORGED = "0" * 64


def state_counts(page: str, queue: str) -> dict[str, int]:
    body = re.search(rf'<tbody class="queue" data-queue="{re.escape(queue)}">(.*?)</tbody>', page, re.S)
    assert body, f"queue {queue} is not on the page"
    cells = re.findall(r'data-state="(\w+)"><a [^>]*>([\d,]+)</a>', body[1])
    return {state: int(n.replace(",", "")) for state, n in cells}


def page_ids(page: str) -> list[str]:
    return [html.unescape(i) for i in re.findall(r'<tr data-id="([^"]*)">', page)]


def state_of(queue: Queue, job_id: str) -> str | None:
    info = queue.inspect(job_id)
    return None if info is None else info.state


def every_page(client: Browserless, path: str, most: int, says: str = "") -> list[str]:
    """The ids of a state's pages, following rel="next" (a cursor) to the end."""
    seen: list[str] = []
    for _ in range(most):
        answer = client.get(path)
        assert answer.status == 200 and says in answer.body
        seen += page_ids(answer.body)
        following = re.search(r'<a rel="next" href="([^"]+)"', answer.body)
        if following is None:
            break
        path = html.unescape(following[1])
    return seen


def test_the_queues_page_shows_what_stats_says(start_console: StartConsole, redis_url: str, queue_name: str) -> None:
    plain = open_queue(redis_url, queue_name, retry_backoff_seconds=0)
    dead_letters(plain, ["x1", "x2"])
    plain.enqueue([f"a{i}" for i in range(30)])
    plain.enqueue([f"hi{i}" for i in range(6)], priority=7)
    plain.enqueue(["later"], delay=3600)
    plain.ack(plain.claim(1)[0])  # priority 7
    plain.claim(3)
    sharded = open_queue(redis_url, f"{queue_name}-s", shards=3)
    sharded.enqueue([f"s{i}" for i in range(40)])
    console = start_console(QUEUE_NAME=queue_name)
    page = console.client().get("/")
    assert page.status == 200
    assert state_counts(page.body, queue_name) == counts(plain)
    assert state_counts(page.body, f"{queue_name}-s") == counts(sharded)
    assert ">+7: 2<" in page.body  # todos by priority: 6, less 4 claimed
    # static/live.js swaps in what the data-live URL returns.
    partial = console.client().get("/?partial=1")
    assert partial.body.startswith('<div id="queues" data-live="/?partial=1">') and "<html" not in partial.body
    assert state_counts(partial.body, queue_name) == counts(plain)
    assert '<script src="/static/live.js" defer>' in page.body
    assert "data-live" in console.client().get("/static/live.js").body
    one = console.client().get(f"/queues/{queue_name}-s")
    assert one.status == 200 and one.body.count("shard") >= 3
    for n in range(3):
        assert f"{queue_name}-s~{n}" in one.body


def test_pages_of_jobs_follow_the_line_and_the_cursor(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    queue = Queue.from_url(redis_url, queue_name, retry_backoff_seconds=0)
    dead_letters(queue, [f"dead/{i} &<odd>" for i in range(130)])
    ids = [f"job-{i:03}" for i in range(120)]
    queue.enqueue(ids)
    client = start_console(QUEUE_NAME=queue_name).client()
    assert page_ids(client.get(f"/queues/{queue_name}/jobs/todos").body) == ids[:50]
    assert page_ids(client.get(f"/queues/{queue_name}/jobs/todos?page=3").body) == ids[100:]
    # The dead letters through their SSCAN cursor: every one exactly once.
    seen = every_page(client, f"/queues/{queue_name}/jobs/failed", 50)
    assert sorted(seen) == sorted(f"dead/{i} &<odd>" for i in range(130))
    job = client.get(f"/queues/{queue_name}/job?id={urllib.parse.quote('dead/7 &<odd>')}")
    assert job.status == 200
    assert "dead/7 &amp;&lt;odd&gt;" in job.body and "ValueError(&#39;no dead/7" in job.body
    assert "Traceback (most recent call last)" in job.body


@pytest.mark.parametrize(
    ("path", "status", "says"),
    [
        ("/queues/no-such-queue", 404, "no queue 'no-such-queue'"),
        ("/queues/no-such-queue/jobs/todos", 404, "no queue"),
        ("/queues/{bad}", 404, "no queue can be named"),
        ("/queues/Q/job?id=nobody", 404, "knows no job 'nobody'"),
        ("/queues/Q/job?id=a%0Ab", 400, "line breaks"),
        ("/queues/Q/job?id=", 400, "job id must be 1 to"),
        ("/queues/Q/job?id=%ED%A0%80", 400, "not UTF-8"),
        ("/queues/Q/job?id=%FF", 400, "not UTF-8"),
        ("/queues/Q/jobs/todos?page=-1", 400, "page must be a whole number"),
        ("/queues/Q/jobs/todos?page=1000000000000", 404, "no page 1000000000000 of todos"),
        ("/queues/Q/jobs/todos?page=99999999999999999999999", 400, "page must be a whole number"),
        ("/queues/Q/jobs/failed?cursor=-5", 400, "cursor must be"),
        ("/queues/Q/jobs/failed?cursor=99999999999999999999999", 400, "cursor must be"),
        ("/queues/Q/jobs/todos?shard=4", 404, "1 shard"),
        ("/queues/Q/jobs/everything", 404, "no state 'everything'"),
        ("/queues/Q/actions", 405, "GET"),
        ("/nothing/here", 404, "no page at /nothing/here"),
    ],
)
def test_bad_input_gives_a_clear_page_and_its_status(
    one_console: tuple[ConsoleProc, str], path: str, status: int, says: str
) -> None:
    console, queue_name = one_console
    answer = console.client().get(path.replace("/Q/", f"/{queue_name}/"))
    assert answer.status == status, answer.body
    assert says in html.unescape(answer.error_detail()), answer.error_detail()
    assert "Nothing was changed" in answer.body


@pytest.fixture(scope="module")
def one_console(
    tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer
) -> Iterator[tuple[ConsoleProc, str]]:
    name = "bad-input"
    Queue.from_url(redis_server.url, name).enqueue(["one"])
    console = ConsoleProc.start_console(tmp_path_factory.mktemp("console"), redis_server.url, QUEUE_NAME=name)
    yield console, name
    console.stop()


def actions(queue_name: str) -> list[dict[str, str]]:
    back = f"/queues/{queue_name}/jobs/failed"
    return [
        {"action": "requeue", "id": "d1", "back": back},
        {"action": "delete", "id": "d2", "back": back},
        {"action": "cancel", "id": "d3", "back": back},
        {"action": "requeue-all", "back": back},
        {"action": "delete-all", "back": back},
    ]


def test_a_read_only_console_refuses_every_action(start_console: StartConsole, redis_url: str, queue_name: str) -> None:
    queue = Queue.from_url(redis_url, queue_name)
    dead_letters(queue, ["d1", "d2", "d3"])
    before = counts(queue)
    client = start_console(QUEUE_NAME=queue_name).client()  # no CONSOLE_TOKEN
    page = client.get(f"/queues/{queue_name}/jobs/failed")
    assert "read-only" in page.body and 'data-action="requeue"' not in page.body
    for fields in actions(queue_name):
        answer = client.post(f"/queues/{queue_name}/actions", {**fields, "csrf": FORGED})
        assert answer.status == 403 and "read-only" in answer.error_detail()
    assert client.sign_in("anything").status == 403
    assert counts(queue) == before


def test_actions_need_a_session_and_its_csrf_token(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    queue = Queue.from_url(redis_url, queue_name)
    dead_letters(queue, ["d1", "d2", "d3", "d4"])
    console = start_console(QUEUE_NAME=queue_name, CONSOLE_TOKEN=TOKEN)
    url = f"/queues/{queue_name}/actions"
    before = counts(queue)

    stranger = console.client()  # never signed in
    for fields in actions(queue_name):
        answer = stranger.post(url, {**fields, "csrf": FORGED})
        assert answer.status == 403 and "sign in" in answer.error_detail()
    wrong = console.client()
    assert wrong.sign_in("not-the-token").status == 403
    assert wrong.csrf(f"/queues/{queue_name}/jobs/failed") == ""

    operator = console.operator(TOKEN)
    csrf = operator.csrf(f"/queues/{queue_name}/jobs/failed")
    assert len(csrf) == 64
    requeue = {"action": "requeue", "id": "d1", "back": f"/queues/{queue_name}/jobs/failed"}
    missing = operator.post(url, requeue)
    assert missing.status == 403 and "CSRF" in missing.error_detail()
    forged = operator.post(url, {**requeue, "csrf": "f" * 64})
    assert forged.status == 403
    elsewhere = operator.post(url, {**requeue, "csrf": csrf}, headers={"Origin": "http://evil.example"})
    assert elsewhere.status == 403 and "evil.example" in elsewhere.error_detail()
    # Another operator's CSRF token is not this session's.
    other = console.operator(TOKEN)
    assert other.post(url, {**requeue, "csrf": csrf}).status == 403
    assert counts(queue) == before, "a refused action changed something"

    done = operator.post(url, {**requeue, "csrf": csrf})
    assert done.status == 303 and "notice=requeued%3A1" in done.location
    assert state_of(queue, "d1") == "todos"
    assert "Requeued 1 dead letter." in operator.get(done.location.replace(console.url, "")).body
    deleted = operator.post(url, {"action": "delete", "id": "d2", "csrf": csrf})
    assert deleted.status == 303 and queue.inspect("d2") is None
    # Signed out (and in again), the old CSRF token is stale: refused, nothing changes.
    assert operator.post("/logout", {"csrf": csrf}).status == 303
    operator.sign_in(TOKEN)
    stale = operator.post(url, {"action": "delete", "id": "d3", "csrf": csrf})
    assert stale.status == 403 and "stale" in stale.error_detail()
    assert state_of(queue, "d3") == "failed"
    fresh = operator.csrf("/")
    assert operator.post(url, {"action": "requeue-all", "csrf": fresh}).status == 303
    assert counts(queue)["failed"] == 0
    assert operator.post(url, {"action": "nonsense", "csrf": fresh}).status == 400
    assert operator.post(url, {"action": "delete", "id": "x\ny", "csrf": fresh}).status == 400
    bad_back = operator.post(url, {"action": "requeue-all", "csrf": fresh, "back": "//evil.example/"})
    assert bad_back.status == 400
    log = console.log()
    assert "console action requeue: queue" in log and "'d1': 1 requeued" in log
    assert "console action delete: queue" in log and "'d2' was failed" in log
    assert "console action refused" in log


def test_cancelled_jobs_have_their_count_and_their_pages(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    """Left out of done's pages (done_log holds both, for one retention)."""
    queue = Queue.from_url(redis_url, queue_name)
    queue.enqueue(["ok-1", "ok-2"])
    queue.ack_many(queue.claim(2))
    cancelled = [f"c{i:03}" for i in range(70)]
    queue.enqueue(cancelled)
    queue.enqueue(["later"], delay=3600)
    for job_id in [*cancelled, "later"]:
        assert queue.cancel(job_id) in ("todos", "scheduled")
    client = start_console(QUEUE_NAME=queue_name).client()
    shown = state_counts(client.get("/").body, queue_name)
    assert shown == counts(queue) and shown["cancelled"] == 71 and shown["done"] == 2
    assert f'href="/queues/{queue_name}/jobs/cancelled"' in client.get(f"/queues/{queue_name}").body
    done = client.get(f"/queues/{queue_name}/jobs/done")
    assert sorted(page_ids(done.body)) == ["ok-1", "ok-2"] and '<span id="total">2</span>' in done.body
    seen = every_page(client, f"/queues/{queue_name}/jobs/cancelled", 20, "Cancelled jobs of")
    assert sorted(seen) == sorted([*cancelled, "later"])
    first = client.get(f"/queues/{queue_name}/jobs/cancelled").body
    assert "<th>cancelled while</th>" in first and '<td class="dim">in todos</td>' in first
    job = client.get(f"/queues/{queue_name}/job?id=later")
    assert 'id="job-state">cancelled<' in job.body
    assert '<tr data-kind="cancelled">' in job.body and "in scheduled" in job.body


def test_cancel_needs_the_token_and_stops_a_running_job(
    start_console: StartConsole, start_worker: StartWorker, tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    """A running job's page shows its progress; Cancel is refused without a session and its CSRF
    token, then cancels it: the page and history say so, naming the worker, which stops running it."""
    queue = Queue.from_url(redis_url, queue_name)
    queue.enqueue(["wait-1"], delay=3600)
    queue.enqueue(["progress-1"])  # reports 0.5 "halfway", then runs 30 s
    start_worker(queue_name)
    wait_until(lambda: getattr(queue.inspect("progress-1"), "progress", None) is not None, 20, "the progress")
    console = start_console(QUEUE_NAME=queue_name, CONSOLE_TOKEN=TOKEN)
    url, job = f"/queues/{queue_name}/actions", f"/queues/{queue_name}/job?id=progress-1"
    cancel = {"action": "cancel", "id": "progress-1", "back": job}

    stranger = console.client()
    page = stranger.get(job)
    assert '<progress max="1" value="0.5">' in page.body and "50 %" in page.body and "halfway" in page.body
    assert 'data-action="cancel"' not in page.body and "to requeue, cancel or delete" in page.body
    assert stranger.post(url, {**cancel, "csrf": FORGED}).status == 403
    operator = console.operator(TOKEN)
    assert 'data-action="cancel"' in operator.get(job).body
    csrf = operator.csrf(job)
    assert operator.post(url, cancel).status == 403  # no CSRF token
    assert operator.post(url, {**cancel, "csrf": "f" * 64}).status == 403
    assert state_of(queue, "progress-1") == "in_progress"

    answer = operator.post(url, {**cancel, "csrf": csrf})
    assert answer.status == 303 and "notice=cancelled%3A1" in answer.location

    def cancels(job_id: str) -> Answer:
        return operator.post(url, {"action": "cancel", "id": job_id, "csrf": csrf})

    page = operator.get(answer.location.replace(console.url, ""))
    assert 'id="job-state">cancelled<' in page.body and "Cancelled 1 job" in page.body
    assert '<tr data-kind="cancelled">' in page.body and "in in_progress; held by" in page.body
    assert 'data-action="cancel"' not in page.body and "none: a cancelled job has no result" in page.body
    runs = ExecutionLog(tmp_path / "exec.log")
    wait_until(lambda: any(e[:2] == ("cancelled", "progress-1") for e in runs.events()), 15, "the worker to stop it")

    assert cancels("wait-1").status == 303 and state_of(queue, "wait-1") == "cancelled"
    again = cancels("wait-1")
    assert again.status == 303 and "notice=not-cancelled" in again.location
    assert cancels("nobody").status == 404
    log = console.log()
    assert "console action cancel: queue" in log and "'progress-1' was in_progress" in log
    assert "'wait-1' was scheduled" in log and "'wait-1' was cancelled" in log


def test_a_job_page_shows_its_result_or_why_there_is_none(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    kept = Queue.from_url(redis_url, queue_name, retry_backoff_seconds=0)
    kept.enqueue(["json-1", "bytes-1", "none-1", "fail-1", "waits-1"])
    json_1, bytes_1, none_1, fail_1 = kept.claim(4)
    kept.ack_many([json_1, bytes_1, none_1], results=[{"total": 42, "to": "ann <a@x>"}, b"\x00raw", None])
    kept.fail(fail_1, "ValueError('no')", retry=True)
    short = Queue.from_url(redis_url, f"{queue_name}-ttl", result_ttl_seconds=0.2)
    short.enqueue(["gone-1"])
    short.ack(short.claim(1)[0], {"n": 1})
    wait_for_redis_clock(short.redis, 0.3)
    short.sweep()  # drops results past their time
    client = start_console(QUEUE_NAME=queue_name).client()

    def result(job_id: str, queue: str = queue_name) -> tuple[str, str]:
        body = client.get(f"/queues/{queue}/job?id={job_id}").body
        section = re.search(r'<section id="job-result" data-result="(\w+)">(.*?)</section>', body, re.S)
        assert section, body
        return section[1], html.unescape(section[2])

    kind, shown = result("json-1")
    assert kind == "json" and '"total": 42' in shown and '"to": "ann <a@x>"' in shown
    assert result("bytes-1") == ("bytes", "<h2>Result</h2>\n<pre class=\"result\">4 bytes: b'\\x00raw'</pre>\n")
    assert result("none-1")[0] == "none" and "returned None" in result("none-1")[1]
    assert result("gone-1", f"{queue_name}-ttl")[0] == "gone"
    assert result("waits-1") == ("pending", '<h2>Result</h2>\n<p class="dim">none yet: the job has not ended</p>\n')
    retried = client.get(f"/queues/{queue_name}/job?id=fail-1").body
    assert '<tr data-kind="failed">' in retried and "ValueError(&#39;no&#39;); retried in" in retried
    assert "none reported" in retried  # no progress


def test_delete_all_takes_every_dead_letter_of_every_shard(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    queue = open_queue(redis_url, queue_name, shards=3, retry_backoff_seconds=0)
    dead_letters(queue, [f"d{i}" for i in range(25)])
    queue.enqueue(["alive"])
    operator = start_console(QUEUE_NAME=queue_name, QUEUE_SHARDS=3, CONSOLE_TOKEN=TOKEN).operator(TOKEN)
    answer = operator.post(f"/queues/{queue_name}/actions", {"action": "delete-all", "csrf": operator.csrf()})
    assert answer.status == 303 and "deleted%3A25" in answer.location
    assert counts(queue) == {**dict.fromkeys(STATES, 0), "todos": 1}


def test_on_a_redis_cluster_the_console_finds_every_queue_and_worker(tmp_path: Path, procs: list[Proc]) -> None:
    """One SCAN pass per master, from one node's URL."""
    nodes = RedisClusterNodes().start()
    try:
        url = nodes.url()
        wide = open_queue(url, "wide", shards=6)
        assert wide.ping(record=True)  # as a service starts: records the 6 shards
        wide.enqueue([f"w{i}" for i in range(60)])
        plain = open_queue(url, "plain")
        plain.enqueue(["p1", "p2"])
        client = connect(url)
        record = WorkerRecord("w-1", "h", 7, ["wide"], 4, 1, [["wide", "w3"]], 1, time.time(), time.time())
        beat(client, ["wide"], record, ttl_ms=60_000)
        console = ConsoleProc.start_console(tmp_path, url, QUEUE_NAME="plain")
        procs.append(console)
        browser = console.client()
        page = browser.get("/")
        assert state_counts(page.body, "wide") == counts(wide)
        assert state_counts(page.body, "plain") == counts(plain)
        assert page.body.index('data-queue="plain"') < page.body.index('data-queue="wide"'), "QUEUE_NAME's first"
        assert "(6 shards)" in page.body
        shard = browser.get("/queues/wide/jobs/todos?shard=5")
        assert shard.status == 200 and len(page_ids(shard.body)) == wide.shards[5].stats()["todos"]
        assert 'data-worker="w-1"' in browser.get("/workers").body
        client.close()
    finally:
        nodes.cleanup()


@pytest.mark.slow
def test_a_queue_of_a_million_jobs_pages_from_redis_ranges(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    """The times are printed (for docs/console.md), never asserted."""
    queue = Queue.from_url(redis_url, queue_name)
    dead_letters(queue, [f"dead-{n}" for n in range(1000)])
    for start in range(0, 1_000_000, 500):
        queue.enqueue([f"job-{n}" for n in range(start, start + 500)])
    client = start_console(QUEUE_NAME=queue_name).client()
    client.get("/")  # warms the templates
    pages = {
        "queues": "/",
        "queue": f"/queues/{queue_name}",
        "todos, first page": f"/queues/{queue_name}/jobs/todos",
        "todos, last page": f"/queues/{queue_name}/jobs/todos?page=20000",
        "dead letters": f"/queues/{queue_name}/jobs/failed",
        "a job": f"/queues/{queue_name}/job?id=job-999999",
    }
    for what, path in pages.items():
        started = time.perf_counter()
        answer = client.get(path)
        seconds = time.perf_counter() - started
        assert answer.status == 200, (what, answer.error_detail())
        print(f"1M-job queue: {what} ({path}) rendered in {seconds * 1000:.1f} ms")
    assert state_counts(client.get("/").body, queue_name)["todos"] == 1_000_000
    assert page_ids(client.get(f"/queues/{queue_name}/jobs/todos?page=20000").body) == [
        f"job-{n}" for n in range(999_950, 1_000_000)
    ]


def test_the_console_starts_and_stops_as_the_services_do(
    start_console: StartConsole, tmp_path: Path, redis_url: str
) -> None:
    console = start_console()
    console.signal(signal.SIGTERM)
    assert console.wait(20) == 0
    assert "SIGTERM received: stopping" in console.log() and "setqueue-console stopped" in console.log()
    env = base_env(REDIS_URL=redis_url)

    def run(*argv: str, **settings: object) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "console", *argv]
        return subprocess.run(command, check=False, env={**env, **{k: str(v) for k, v in settings.items()}}, **RUN)

    help_text = run("--help")
    assert help_text.returncode == 0 and "CONSOLE_TOKEN" in help_text.stdout and "JOB_HANDLER" not in help_text.stdout
    bad = run(CONSOLE_PORT="eighty")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "setqueue-console: invalid setting CONSOLE_PORT: 'eighty' is not a whole number"
    ]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run(CONSOLE_PORT=taken.getsockname()[1])
    assert busy.returncode == 2 and "invalid setting CONSOLE_PORT: cannot listen on" in busy.stderr


RUN: dict[str, Any] = {"capture_output": True, "text": True, "timeout": 60, "cwd": REPO_ROOT}


def test_limits_show_on_the_queue_page_and_act_with_the_token(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    """The queue page shows limits; pause, resume, rate and group limits act only with a
    session and its CSRF token; a bad rate or concurrency gets 400 and changes nothing."""
    queue = Queue.from_url(redis_url, queue_name)
    queue.enqueue([f"a{i}" for i in range(5)], group="tenant-a")
    queue.enqueue([f"b{i}" for i in range(3)], group="tenant-b")
    queue.set_group_limits("tenant-a", concurrency=1)
    queue.ack_many(queue.claim(2))
    console = start_console(QUEUE_NAME=queue_name, CONSOLE_TOKEN=TOKEN)
    page_path, url = f"/queues/{queue_name}", f"/queues/{queue_name}/actions"

    stranger = console.client()
    page = stranger.get(page_path).body
    assert '<td id="limits-state">running</td>' in page and '<td id="limits-rate">none</td>' in page
    groups = dict(re.findall(r'<tr data-group="([^"]+)"><td>[^<]*</td><td[^>]*>(\w+)</td>', page))
    assert set(groups) == {"tenant-a", "tenant-b"} and groups["tenant-a"] in ("ready", "full")
    assert "concurrency 1 <span" in page and 'data-action="pause"' not in page and "to pause, resume" in page
    assert stranger.post(url, {"action": "pause", "csrf": FORGED}).status == 403
    assert queue.limits().paused is False

    operator = console.operator(TOKEN)
    csrf = operator.csrf(page_path)

    def act(action: str, **fields: str) -> Answer:
        return operator.post(url, {"action": action, "csrf": csrf, **fields})

    assert operator.post(url, {"action": "pause"}).status == 403  # no CSRF token
    assert queue.limits().paused is False
    paused = act("pause", back=page_path)
    assert paused.status == 303 and "notice=paused%3A1" in paused.location
    assert queue.limits().paused and queue.claim(10) == []
    shown = operator.get(paused.location.replace(console.url, "")).body
    assert '<strong class="bad">paused</strong>' in shown and 'data-action="resume"' in shown
    assert 'class="bad paused">paused<' in operator.get("/").body
    assert "notice=was-paused" in act("pause", back=page_path).location
    assert "notice=resumed%3A1" in act("resume").location
    assert not queue.limits().paused

    assert act("rate", rate="50/s", burst="5").status == 303
    rate = queue.limits().rate
    assert rate is not None and (rate.count, rate.period_ms, rate.burst) == (50, 1000, 5)
    assert "50/s (burst 5)" in operator.get(page_path).body
    before = queue.limits()
    for bad in ({"rate": "fast"}, {"rate": "50/s", "burst": "-1"}, {"rate": "10/fortnight"}, {"burst": "5"}):
        answer = act("rate", **bad)
        assert answer.status == 400 and "rate" in answer.error_detail()
    for bad in ({"concurrency": "0"}, {"concurrency": "two"}, {"group": "x\ny", "concurrency": "2"}):
        assert act("group-limits", **bad).status == 400
    assert queue.limits() == before

    assert act("group-limits", group="tenant-b", concurrency="2", rate="10/min").status == 303
    own = queue.limits().groups["tenant-b"]
    assert own.concurrency == 2 and own.rate is not None and own.rate.count == 10
    assert act("group-limits", concurrency="3").status == 303 and queue.limits().group_default.concurrency == 3
    assert act("group-limits", group="tenant-b").status == 303 and "tenant-b" not in queue.limits().groups
    assert act("rate", rate="").status == 303
    assert queue.limits().rate is None
    queue.set_rate("5/s")
    assert act("rate", rate="off").status == 303
    assert queue.limits().rate is None
    log = console.log()
    assert f"console action pause: queue {queue_name}: done" in log and "no change" in log
    assert "console action rate: queue" in log and "group 'tenant-b': concurrency 2" in log


def test_a_job_page_links_its_dependencies_and_dependents(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    plain = Queue.from_url(redis_url, queue_name, retry_backoff_seconds=0)
    sharded = open_queue(redis_url, f"{queue_name}-s", shards=3)
    sharded.enqueue(["s1"])
    plain.enqueue(["a", "b"])
    plain.ack(plain.claim(1)[0])  # a: done
    plain.enqueue(["cb"], depends_on=["a", "b", JobRef(f"{queue_name}-s", "s1")], if_dependency_fails="run", priority=3)
    plain.enqueue(["next"], depends_on=["cb"])
    client = start_console(QUEUE_NAME=queue_name).client()
    page = client.get(f"/queues/{queue_name}/job?id=cb").body
    assert 'id="job-state">waiting<' in page
    assert re.search(r'<strong class="ended">1 of 3</strong> ended\s*<span class="dim">\(1 done, 0 failed', page)
    assert "this job runs once all ended" in page
    listed = re.search(r'<table class="grid links" id="job-depends-on-list">(.*?)</table>', page, re.S)
    assert listed, page
    rows = re.findall(r'<tr data-id="([^"]*)" data-state="(\w*)">\s*<td><a class="job" href="([^"]+)">', listed[1])
    shard = shard_name(f"{queue_name}-s", shard_of("s1", 3))
    assert rows == [
        ("a", "done", f"/queues/{queue_name}/job?id=a"),
        ("b", "todos", f"/queues/{queue_name}/job?id=b"),
        ("s1", "todos", f"/queues/{queue_name}-s/job?id=s1"),  # the shard's queue, not the shard
    ]
    assert f"({shard})" in listed[1]
    dependents = re.search(r'id="job-dependents-list">(.*?)</table>', page, re.S)
    assert dependents and f'href="/queues/{queue_name}/job?id=next"' in dependents[1]
    # Each link leads to the job's page, which lists the job that waits for it.
    s1 = client.get(f"/queues/{queue_name}-s/job?id=s1").body
    assert re.search(rf'id="job-dependents-list">.*href="/queues/{queue_name}/job\?id=cb"', s1, re.S)
    # The queue's pages count and list waiting jobs.
    assert state_counts(client.get("/").body, queue_name)["waiting"] == 2
    waiting = client.get(f"/queues/{queue_name}/jobs/waiting").body
    assert page_ids(waiting) == ["cb", "next"] and '<td class="n">3</td>' in waiting
