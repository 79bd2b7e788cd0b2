"""The console in a real Chromium, with real workers: what an operator sees and does. Screenshots go
to tests/.screenshots/ (docs/console.md shows copies)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from setqueue import JobQueue, Queue, open_queue
from tests.support import RedisServer
from tests.support.browser import chromium, screenshot
from tests.support.console import STATES, ConsoleProc, StartConsole, StartWorker, counts, dead_letters
from tests.support.jobs import ExecutionLog
from tests.support.waits import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TOKEN = "browser-test-token"


def by_css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By  # noqa: PLC0415 - only where a browser runs

    return driver.find_element(By.CSS_SELECTOR, selector)


def click(driver: Any, selector: str) -> None:
    """Click the first match, found afresh while live.js replaces it between the find and the click (a
    stale element), for up to 10 s."""
    from selenium.common.exceptions import StaleElementReferenceException  # noqa: PLC0415

    deadline = time.monotonic() + 10
    while True:
        try:
            by_css(driver, selector).click()
            return
        except StaleElementReferenceException:
            if time.monotonic() > deadline:
                raise


def shown(driver: Any, selector: str) -> str:
    """The first match's text, or "" while there is none (loading, or live.js replacing it): for waits."""
    from selenium.common.exceptions import WebDriverException  # noqa: PLC0415

    try:
        found = all_css(driver, selector)
        return str(found[0].text) if found else ""
    except WebDriverException:
        return ""


def all_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def shown_counts(driver: Any, queue: str) -> dict[str, int]:
    row = f'tbody.queue[data-queue="{queue}"]'
    return {s: int(by_css(driver, f'{row} td[data-state="{s}"]').text.replace(",", "")) for s in STATES}


def ids_on_page(driver: Any, selector: str, attribute: str) -> set[str]:
    return {row.get_attribute(attribute) for row in all_css(driver, selector)}


def card_declined(queue: JobQueue, ids: list[str]) -> None:
    trace = 'Traceback (most recent call last):\n  File "shop/charge.py", line 12, in charge\nValueError: card'
    dead_letters(queue, ids, "ValueError('card declined for {id}')\n" + trace)


def sign_in(driver: Any, console: ConsoleProc, token: str) -> None:
    driver.get(console.url + "/login")
    by_css(driver, 'input[name="token"]').send_keys(token)
    click(driver, "form.login button")
    # page_source, not an element: the page is replaced under us while it loads.
    wait_until(lambda: "Signed in: actions are enabled." in driver.page_source, 10, "the sign-in")


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    """The screenshots must show these tests' queues only, not those others left in the shared Redis."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(own_redis: RedisServer) -> str:
    return own_redis.url


def test_the_queues_page_shows_the_counts_of_stats(
    start_console: StartConsole, redis_url: str, queue_name: str
) -> None:
    queue = open_queue(redis_url, queue_name, retry_backoff_seconds=0)
    card_declined(queue, ["charge-17", "charge-23"])
    queue.enqueue([f"mail-{n}" for n in range(240)])
    queue.enqueue({f"report-{n}": {"month": n} for n in range(1, 13)}, priority=5)
    queue.enqueue(["year-report"], depends_on=[f"report-{n}" for n in range(1, 13)], priority=5)
    queue.enqueue(["reminder-1", "reminder-2"], delay=3600)
    queue.cancel("reminder-2")
    queue.ack_many(queue.claim(8))
    queue.claim(3)
    for tenant, jobs in (("acme", 6), ("globex", 3), ("initech", 1)):
        queue.enqueue([f"sync-{tenant}-{n}" for n in range(jobs)], group=tenant)
    queue.set_rate("200/s")
    queue.set_group_limits(concurrency=2)
    queue.set_group_limits("acme", concurrency=1, rate="30/min")
    sharded = open_queue(redis_url, f"{queue_name}-wide", shards=4)
    sharded.enqueue([f"thumb-{n}" for n in range(90)])
    console = start_console(QUEUE_NAME=queue_name)
    with chromium() as driver:
        driver.get(console.url + "/")
        assert shown_counts(driver, queue_name) == counts(queue)
        assert shown_counts(driver, f"{queue_name}-wide") == counts(sharded)
        screenshot(driver, "queues")
        click(driver, f'tbody.queue[data-queue="{queue_name}"] td a')
        wait_until(lambda: shown(driver, "h1") == f"Queue {queue_name}", 10, "the queue page")
        assert shown(driver, "#limits-rate").startswith("200/s") and shown(driver, "#limits-state") == "running"
        assert ids_on_page(driver, "#groups tr[data-group]", "data-group") == {"acme", "globex", "initech"}
        screenshot(driver, "queue")
        by_css(driver, 'input[name="id"]').send_keys("report-10")
        click(driver, "form.search button")
        wait_until(lambda: shown(driver, "#job-id") == "report-10", 10, "the job page")
        assert by_css(driver, "#job-state").text == "in progress"
        assert '"month":10' in by_css(driver, "pre.payload").text
        # The job that waits for it is linked from its page, and links back to it.
        click(driver, '#job-dependents-list a.job[href$="id=year-report"]')
        wait_until(lambda: shown(driver, "#job-id") == "year-report", 10, "the waiting job's page")
        assert by_css(driver, "#job-state").text == "waiting"
        assert by_css(driver, "#job-waiting-on strong.ended").text == "8 of 12"  # 8 acked above
        assert (
            by_css(driver, '#job-depends-on-list tr[data-id="report-10"]').get_attribute("data-state") == "in_progress"
        )
        screenshot(driver, "job-dependencies")
        click(driver, '#job-depends-on-list a.job[href$="id=report-10"]')
        wait_until(lambda: shown(driver, "#job-id") == "report-10", 10, "the dependency's page")
        driver.get(console.url + f"/queues/{queue_name}/jobs/todos?page=-1")
        assert "400" in by_css(driver, "section.error h1").text


def test_requeue_a_dead_letter_and_watch_it_reach_done(
    start_console: StartConsole, start_worker: StartWorker, redis_url: str, queue_name: str
) -> None:
    from opentelemetry import trace  # noqa: PLC0415

    from tests.support.otel import sdk_spans  # noqa: PLC0415

    sdk_spans()  # spans with real ids
    queue = Queue.from_url(redis_url, queue_name)
    with trace.get_tracer("shop").start_as_current_span("POST /checkout") as checkout:
        card_declined(queue, ["charge-17", "charge-23", "charge-42"])
    console = start_console(QUEUE_NAME=queue_name, CONSOLE_TOKEN=TOKEN)
    start_worker(queue_name)
    with chromium() as driver:
        sign_in(driver, console, TOKEN)
        # Its error, traceback and the trace id of the span that enqueued it.
        driver.get(console.url + f"/queues/{queue_name}/job?id=charge-23")
        assert by_css(driver, "#job-state").text == "failed"
        assert by_css(driver, "#trace-id code").text == f"{checkout.get_span_context().trace_id:032x}"
        assert "ValueError: card" in by_css(driver, "pre.traceback").text
        screenshot(driver, "dead-letter")
        driver.get(console.url + f"/queues/{queue_name}/jobs/failed")
        assert ids_on_page(driver, "tr[data-id]", "data-id") == {"charge-17", "charge-23", "charge-42"}
        screenshot(driver, "dead-letters")
        click(driver, 'tr[data-id="charge-23"] button[data-action="requeue"]')
        wait_until(lambda: "Requeued 1 dead letter." in driver.page_source, 10, "the notice")
        job = console.url + f"/queues/{queue_name}/job?id=charge-23"

        def state() -> str:
            driver.get(job)
            return shown(driver, "#job-state")

        wait_until(lambda: state() == "done", 30, "charge-23 to reach done", interval=0.3)
    info = queue.inspect("charge-23")
    assert info is not None and info.state == "done"
    assert counts(queue)["failed"] == 2


def test_cancel_a_running_job_and_see_it_in_its_history(
    start_console: StartConsole, start_worker: StartWorker, tmp_path: Path, redis_url: str, queue_name: str
) -> None:
    """A running job's progress shows; Cancel (confirmed) stops it; its history names the worker."""
    queue = Queue.from_url(redis_url, queue_name)
    queue.enqueue(["progress-7"])  # 0.5 "halfway", then 30 s
    console = start_console(QUEUE_NAME=queue_name, CONSOLE_TOKEN=TOKEN)
    worker = start_worker(queue_name)
    wait_until(lambda: getattr(queue.inspect("progress-7"), "progress", None) is not None, 20, "its progress")
    with chromium() as driver:
        sign_in(driver, console, TOKEN)
        driver.get(console.url + f"/queues/{queue_name}/job?id=progress-7")
        assert by_css(driver, "#job-state").text == "in progress"
        assert "50 %" in by_css(driver, "#job-progress").text and "halfway" in by_css(driver, "#job-progress").text
        assert "not ended" in by_css(driver, "#job-result").text
        click(driver, 'button[data-action="cancel"]')
        driver.switch_to.alert.accept()
        wait_until(lambda: "Cancelled 1 job" in driver.page_source, 10, "the notice")
        assert by_css(driver, "#job-state").text == "cancelled"
        line = by_css(driver, '#job-history tr[data-kind="cancelled"]').text
        assert "in in_progress; held by" in line and str(worker.process.pid) in line
        assert not all_css(driver, 'button[data-action="cancel"]')
        screenshot(driver, "job")
    runs = ExecutionLog(tmp_path / "exec.log")
    wait_until(lambda: any(e[:2] == ("cancelled", "progress-7") for e in runs.events()), 15, "the worker to stop it")
    assert counts(queue) == {**dict.fromkeys(STATES, 0), "cancelled": 1}


def test_without_the_token_no_action_runs(start_console: StartConsole, redis_url: str, queue_name: str) -> None:
    queue = Queue.from_url(redis_url, queue_name)
    card_declined(queue, ["charge-17", "charge-23"])
    before = counts(queue)
    forge = """const form = document.createElement('form'); form.method = 'post'; form.action = arguments[0];
        for (const [name, value] of Object.entries(arguments[1])) {
            const input = document.createElement('input'); input.name = name; input.value = value;
            form.appendChild(input);
        }
        document.body.appendChild(form); form.submit();"""
    action = f"/queues/{queue_name}/actions"
    read_only = start_console(QUEUE_NAME=queue_name)
    guarded = start_console(QUEUE_NAME=queue_name, CONSOLE_TOKEN=TOKEN)
    with chromium() as driver:
        for console, says in ((read_only, "read-only"), (guarded, "sign in")):
            driver.get(console.url + f"/queues/{queue_name}/jobs/failed")
            assert not all_css(driver, "button[data-action]"), "action buttons shown to someone who may not act"
            for fields in ({"action": "requeue", "id": "charge-17"}, {"action": "delete-all"}):
                driver.execute_script(forge, console.url + action, {**fields, "csrf": "0" * 64})
                wait_until(lambda: all_css(driver, "section.error"), 10, "the refusal page")
                assert "403" in by_css(driver, "section.error h1").text
                assert says in by_css(driver, "#error-detail").text
        # Signed in, a form with an earlier session's CSRF token is refused too.
        sign_in(driver, guarded, TOKEN)
        driver.get(guarded.url + f"/queues/{queue_name}/jobs/failed")
        stale = by_css(driver, 'input[name="csrf"]').get_attribute("value")
        click(driver, "header .who button")  # sign out
        wait_until(lambda: "Signed out." in driver.page_source, 10, "the sign-out")
        sign_in(driver, guarded, TOKEN)
        driver.get(guarded.url + f"/queues/{queue_name}/jobs/failed")
        driver.execute_script(
            "document.querySelectorAll('input[name=csrf]').forEach(i => { i.value = arguments[0]; });", stale
        )
        click(driver, 'tr[data-id="charge-17"] button[data-action="requeue"]')
        wait_until(lambda: all_css(driver, "section.error"), 10, "the refusal page")
        assert "stale" in by_css(driver, "#error-detail").text
        screenshot(driver, "refused")
    assert counts(queue) == before


def test_the_workers_page_lists_live_workers_and_drops_a_killed_one(
    start_console: StartConsole, start_worker: StartWorker, redis_url: str, queue_name: str
) -> None:
    queue = Queue.from_url(redis_url, queue_name)
    queue.enqueue([f"sleep-60-{n}" for n in range(4)])
    console = start_console(QUEUE_NAME=queue_name)
    workers = [start_worker(queue_name, CONCURRENCY=2, CLAIM_BATCH=2) for _ in range(2)]
    pids = {str(w.process.pid) for w in workers}
    with chromium() as driver:
        driver.get(console.url + "/workers")

        def rows() -> dict[str, dict[str, Any]]:
            """In one script: live.js replaces the table every 2 s, so elements found one by one go stale."""
            found = driver.execute_script(
                "return Array.from(document.querySelectorAll('tr[data-worker]')).map(r => ({"
                "pid: r.dataset.pid, text: r.innerText,"
                "jobs: Array.from(r.querySelectorAll('a.job')).map(a => a.textContent)}))"
            )
            return {row["pid"]: row for row in found}

        def each_holds_two() -> bool:
            found = rows()
            return set(found) == pids and all(len(r["jobs"]) == 2 and "2 / 2" in r["text"] for r in found.values())

        # Never reloaded by hand.
        wait_until(each_holds_two, 30, "both workers, each holding two jobs, on the workers page", interval=0.3)
        held = {job for row in rows().values() for job in row["jobs"]}
        assert held == {f"sleep-60-{n}" for n in range(4)}
        screenshot(driver, "workers")
        killed = workers[0]
        killed.signal(signal.SIGKILL)
        killed.wait(10)
        # Gone once its record expires (three beats of 0.5 s), still without a reload.
        wait_until(lambda: set(rows()) == pids - {str(killed.process.pid)}, 30, "the killed worker to drop off", 0.3)
