"""One queue over N shards: every id in its shard for good, claims visiting every shard, the API summed."""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest
import redis

from setqueue import FailOutcome, OptionError, Queue, open_queue
from setqueue.factory import ShardedQueue
from setqueue.runtime.cli import main
from setqueue.sharded import shard_of
from tests.support.procs import run_to_exit
from tests.support.waits import wait_until_leases_expire


@pytest.fixture
def sharded(redis_url: str, queue_name: str) -> ShardedQueue:
    q = open_queue(redis_url, queue_name, shards=4, lease_seconds=30, max_attempts=2, retry_backoff_seconds=0)
    assert isinstance(q, ShardedQueue)
    return q


def test_one_shard_is_a_plain_queue_with_todays_keys(redis_url: str, queue_name: str) -> None:
    q = open_queue(redis_url, queue_name, shards=1)
    assert isinstance(q, Queue) and q.keys.todos == f"setqueue:{{{queue_name}}}:todos"


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.5, "4", True])
def test_a_bad_shard_count_is_refused(redis_url: str, queue_name: str, bad: object) -> None:
    with pytest.raises(ValueError, match="shards"):
        open_queue(redis_url, queue_name, shards=bad)  # type: ignore[arg-type]


def test_an_id_lives_in_one_shard_for_good(sharded: ShardedQueue, client: redis.Redis) -> None:
    ids = [f"job-{n}" for n in range(400)]
    assert sharded.enqueue(ids) == 400
    assert sharded.enqueue(ids[:50]) == 0  # each id is looked up in its own shard
    for shard, q in enumerate(sharded.shards):
        mine = {i for i in ids if shard_of(i, 4) == shard}
        assert set(client.zrange(q.keys.todos, 0, -1)) == mine  # type: ignore[arg-type]
        assert 60 <= len(mine) <= 140  # a fair share of 400 over 4
    assert sharded.stats()["todos"] == 400
    assert [s["todos"] for s in sharded.stats()["shards"]] == [
        sum(1 for i in ids if shard_of(i, 4) == s) for s in range(4)
    ]


def test_claims_visit_every_shard_and_the_api_routes_by_id(sharded: ShardedQueue) -> None:
    sharded.enqueue({f"job-{n}": f"p{n}" for n in range(40)})
    first = sharded.claim(3)
    assert len(first) == 3 and first[0].payload == "p" + first[0].id.split("-")[1]
    # Each claim starts one shard further.
    singles = [sharded.claim(1)[0] for _ in range(8)]
    assert Counter(shard_of(lease.id, 4) for lease in singles) == {0: 2, 1: 2, 2: 2, 3: 2}
    leases = first + singles
    assert all(sharded.renew_many(leases))
    assert [r.acked for r in sharded.ack_many(leases[:5])] == [True] * 5
    assert sharded.fail(leases[5], "boom", retry=False) is FailOutcome.DEAD
    assert sharded.release(leases[6:]) == [FailOutcome.RELEASED] * 5
    info = sharded.inspect(leases[5].id)
    assert info is not None and info.state == "failed"
    assert sharded.requeue_failed() == 1
    assert sharded.delete(leases[0].id) == "done"
    stats = sharded.stats()  # 40 - 11 claimed + 1 requeued + 5 released in todos
    assert (stats["todos"], stats["in_progress"], stats["done"], stats["failed"]) == (35, 0, 4, 0)
    drained = []
    while batch := sharded.claim(7):
        drained += batch
    assert len({lease.id for lease in drained}) == 35
    assert sum(r.acked for r in sharded.ack_many(drained)) == 35


def test_an_idle_worker_wakes_for_an_enqueue_to_any_shard(
    sharded: ShardedQueue, redis_url: str, queue_name: str
) -> None:
    other = open_queue(redis_url, queue_name, shards=4)
    for shard in range(4):
        job_id = next(f"wake-{n}" for n in range(1000) if shard_of(f"wake-{n}", 4) == shard)
        other.enqueue([job_id])
        assert sharded.wait_for_work(5)
    other.close()


def test_the_sweep_covers_every_shard(redis_url: str, queue_name: str) -> None:
    q = open_queue(redis_url, queue_name, shards=3, lease_seconds=0.1, max_attempts=5)
    assert isinstance(q, ShardedQueue)
    q.enqueue([f"j{n}" for n in range(30)])
    held = []
    while batch := q.claim(10):
        held += batch
    assert len(held) == 30
    wait_until_leases_expire(q, held)
    assert sorted(q.sweep().requeued) == sorted(lease.id for lease in held)
    q.close()


def test_the_cli_reaches_a_sharded_queue_as_one(
    redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def cli(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(["--redis-url", redis_url, "--queue", queue_name, "--shards", "4", *argv], out=out)
        return code, out.getvalue()

    assert cli("push", *[f"job-{n}" for n in range(40)]) == (0, "40 new, 0 already known\n")
    code, out = cli("stats", "--json")
    stats = json.loads(out)
    assert (
        code == 0
        and stats["todos"] == 40
        and [s["todos"] for s in stats["shards"]]
        == [sum(1 for n in range(40) if shard_of(f"job-{n}", 4) == shard) for shard in range(4)]
    )
    code, out = cli("inspect", "job-7")
    assert code == 0 and json.loads(out)["state"] == "todos"
    assert cli("delete", "job-7") == (0, "deleted job-7 (was in todos)\n")
    assert cli("inspect", "job-7")[0] == 1
    assert cli("schedules")[0] == 2
    capsys.readouterr()  # the two lines above said why
    for bad in ("0", "-1", "5000", "many"):
        argv = ["--redis-url", redis_url, "--queue", queue_name, "--shards", bad, "stats"]
        assert main(argv, out=io.StringIO()) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "--shards" in err, err


def test_a_queue_keeps_the_number_of_shards_it_was_opened_with(redis_url: str, queue_name: str) -> None:
    four = open_queue(redis_url, queue_name, shards=4)
    assert four.ping(record=True)  # a service's start: records 4
    for other in (open_queue(redis_url, queue_name, shards=3), open_queue(redis_url, queue_name)):
        with pytest.raises(OptionError, match=r"shards.*4 shards"):
            other.ping()
    plain = Queue.from_url(redis_url, f"{queue_name}-plain")
    plain.enqueue(["waiting"])
    with pytest.raises(OptionError, match="holds jobs unsharded"):
        open_queue(redis_url, f"{queue_name}-plain", shards=2).ping()


def test_a_worker_with_another_number_of_shards_is_refused_with_one_line(redis_url: str, queue_name: str) -> None:
    assert open_queue(redis_url, queue_name, shards=4).ping(record=True)
    result = run_to_exit("worker", {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "QUEUE_SHARDS": 3})
    assert result.returncode == 2, result.stderr
    assert [line for line in result.stderr.splitlines() if "QUEUE_SHARDS" in line] == [
        f"setqueue-worker: invalid setting QUEUE_SHARDS: queue {queue_name} has 4 shards, not 3: "
        "drain it (or use a new name) before changing that"
    ]


@pytest.mark.parametrize("shards", [1, 4])
def test_every_kind_of_queue_refuses_the_same_bad_arguments(redis_url: str, queue_name: str, shards: int) -> None:
    q = open_queue(redis_url, queue_name, shards=shards)
    q.enqueue(["a"])
    with pytest.raises(ValueError, match="timeout must be a finite number of seconds >= 0"):
        q.results(["a"], timeout=-1)
    with pytest.raises(ValueError, match="limit must be a whole number >= 1"):
        q.requeue_failed(limit=0)
