"""The layout version (docs/reference.md#layout-versions): a queue records the key-layout version it
was written with; a client of another version refuses it with one line naming both versions, before it
writes anything: the library raises LayoutVersionError, every service and the command exit 2."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import redis

import setqueue.aio
from setqueue import LayoutVersionError, OptionError, open_queue
from setqueue.keys import LAYOUT_VERSION, QueueKeys
from setqueue.layout import check_layout
from setqueue.steps import Send
from tests.support import REPO_ROOT, free_port
from tests.support.procs import base_env, run_to_exit

OTHER = LAYOUT_VERSION + 41  # a version no setqueue of this tree writes

SERVICES = ("creator", "worker", "cleaner", "console")
# Commands that read, commands that write: each refuses before it does either.
COMMANDS = (
    ("stats",),
    ("push", "a", "b"),
    ("inspect", "a"),
    ("cancel", "a"),
    ("requeue-failed",),
    ("pause",),
    ("limit", "--rate", "5/s"),
    ("schedules",),
)


def snapshot(client: redis.Redis, name: str) -> dict[str, object]:
    """Every key of queue ``name`` with its type and contents."""
    found: dict[str, object] = {}
    for key in client.scan_iter(match=f"setqueue:{{{name}}}:*"):
        found[key] = (client.type(key), client.dump(key))
    return found


@pytest.fixture
def stamped(client: redis.Redis, queue_name: str) -> dict[str, object]:
    """The queue holds a job and records another layout version; its keys as they are."""
    keys = QueueKeys(queue_name)
    client.zadd(keys.todos, {"old-job": 0})
    client.set(keys.layout, OTHER)
    return snapshot(client, queue_name)


def test_a_new_queue_records_this_version_at_its_first_operation(
    client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    keys = QueueKeys(queue_name)
    q = open_queue(redis_url, queue_name)
    try:
        with pytest.raises(ValueError):
            q.enqueue(["bad\nid"])  # refused before anything is sent: nothing recorded either
        assert client.exists(keys.layout) == 0
        assert q.enqueue(["a"]) == 1
        assert client.get(keys.layout) == str(LAYOUT_VERSION)
    finally:
        q.close()


def test_a_queue_from_before_versions_is_version_one(client: redis.Redis, redis_url: str, queue_name: str) -> None:
    keys = QueueKeys(queue_name)
    client.zadd(keys.todos, {"old-job": 0})  # keys, no layout key: written before queues recorded it
    q = open_queue(redis_url, queue_name)
    try:
        if LAYOUT_VERSION == 1:
            assert q.stats()["todos"] == 1
            assert client.get(keys.layout) == "1"
        else:
            with pytest.raises(LayoutVersionError):
                q.stats()
    finally:
        q.close()


def test_a_version_recorded_between_the_checks_reads_is_the_queues(
    client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    """A worker and a creator starting on a new queue together: the worker's check reads no version,
    then the creator records this version and writes a job, then the worker finds the job. The queue is
    this version's, not one from before versions were recorded (the worker once exited 2 so)."""
    keys = QueueKeys(queue_name)

    def sent(step: object) -> object:
        assert isinstance(step, Send), step  # the check sends plain commands, one at a time
        return client.execute_command(*step.args)  # type: ignore[no-untyped-call]

    creator = open_queue(redis_url, queue_name)
    try:
        check = check_layout([queue_name])
        step = next(check)
        assert step == Send(("GET", keys.layout))
        reply = sent(step)
        assert reply is None
        assert creator.enqueue(["a"]) == 1  # records the version, then writes the job
        with pytest.raises(StopIteration):
            while True:
                reply = sent(check.send(reply))
        assert client.get(keys.layout) == str(LAYOUT_VERSION)
    finally:
        creator.close()


def test_the_library_refuses_another_version_and_writes_nothing(
    client: redis.Redis, redis_url: str, queue_name: str, stamped: dict[str, object]
) -> None:
    for shards in (1, 2):  # a plain queue; a sharded one whose shard ~0 is another version
        name = queue_name if shards == 1 else f"{queue_name}~0"
        if shards == 2:
            client.set(QueueKeys(name).layout, OTHER)
        q = open_queue(redis_url, queue_name, shards=shards)
        try:
            with pytest.raises(LayoutVersionError) as refused:
                q.enqueue(["new-job"])
        finally:
            q.close()
        error = refused.value
        assert isinstance(error, OptionError) and (error.found, error.version) == (str(OTHER), LAYOUT_VERSION)
        said = str(error)
        assert "\n" not in said and f"version {OTHER}" in said and f"version {LAYOUT_VERSION}" in said, said
    assert snapshot(client, queue_name) == stamped

    async def asynchronously() -> None:
        async with setqueue.aio.open_queue(redis_url, queue_name) as q:
            with pytest.raises(LayoutVersionError):
                await q.enqueue(["new-job"])

    asyncio.run(asynchronously())
    assert snapshot(client, queue_name) == stamped


@pytest.mark.parametrize("service", SERVICES)
def test_every_service_exits_2_with_one_line(
    service: str, client: redis.Redis, redis_url: str, queue_name: str, stamped: dict[str, object]
) -> None:
    env = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "SCHEDULES": "nightly=0 3 * * *"}
    if service == "console":
        env["CONSOLE_PORT"] = str(free_port())
    result = run_to_exit(service, env, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and f"version {OTHER}" in lines[0] and f"version {LAYOUT_VERSION}" in lines[0], lines
    assert snapshot(client, queue_name) == stamped


@pytest.mark.parametrize("command", COMMANDS, ids=lambda argv: argv[0])
def test_the_command_exits_2_with_one_line(
    command: tuple[str, ...], client: redis.Redis, redis_url: str, queue_name: str, stamped: dict[str, object]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "setqueue", "--redis-url", redis_url, "--queue", queue_name, *command],
        env=base_env(),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and f"version {OTHER}" in lines[0] and f"version {LAYOUT_VERSION}" in lines[0], lines
    assert snapshot(client, queue_name) == stamped
