"""The shop's tasks tested as they run in production: sent through a real queue, run by a real worker
process, their results and failures read back, with the real scripts deciding retries and dead letters.

    pytest examples/shop
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from examples.shop.tasks import charge_card, resize_image, send_email, tasks
from setqueue import JobFailed, Queue
from setqueue.testing import WorkerProcess

StartWorker = Callable[..., WorkerProcess]


def test_an_email_is_sent_and_its_result_read_back(setqueue_queue: Queue, setqueue_worker: StartWorker) -> None:
    setqueue_worker(tasks)  # or "examples.shop.tasks:tasks", as JOB_HANDLER takes it
    sent = setqueue_queue.send(send_email, "ada@example.com", "Welcome")
    assert setqueue_queue.result(sent, timeout=30) == {"to": "ada@example.com", "subject": "Welcome", "status": "sent"}


def test_a_bad_address_is_dead_lettered_at_once_not_retried(
    setqueue_queue: Queue, setqueue_worker: StartWorker
) -> None:
    setqueue_worker(tasks)
    sent = setqueue_queue.send(send_email, "not-an-address", "Welcome")
    with pytest.raises(JobFailed, match="not an email address"):
        setqueue_queue.result(sent, timeout=30)
    info = setqueue_queue.inspect(sent.id)
    assert info is not None and (info.state, info.attempts) == ("failed", 1)  # max_attempts=3, yet one run


def test_an_order_sent_twice_is_charged_once(setqueue_queue: Queue, setqueue_worker: StartWorker) -> None:
    first = setqueue_queue.send(charge_card.options(id="order-7"), "order-7", 1250)
    again = setqueue_queue.send(charge_card.options(id="order-7"), "order-7", 1250)
    assert (first.created, again.created) == (True, False)
    setqueue_worker(tasks)  # started after the sends: the jobs waited in the queue
    charged = setqueue_queue.result(first, timeout=30)
    assert (charged["charged_cents"], charged["job"]) == (1250, "order-7")


def test_an_async_task_runs_on_the_workers_event_loop(setqueue_queue: Queue, setqueue_worker: StartWorker) -> None:
    setqueue_worker(tasks, CONCURRENCY=4)  # worker settings as keywords
    sent = [setqueue_queue.send(resize_image, f"img/{n}.jpg", 320) for n in range(4)]
    paths = [setqueue_queue.result(job, timeout=30)["path"] for job in sent]
    assert paths == [f"img/{n}-320w.jpg" for n in range(4)]
