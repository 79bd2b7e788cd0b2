"""Dependencies between jobs (docs/guide.md#dependencies): a job that waits for others, chains and
fan-in callbacks, across queues, on real worker processes; refusals that write nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import setqueue
import setqueue.aio
from setqueue import JobFailed, JobRef, UnknownJob, WaitProgress
from setqueue.keys import LINKS_PER_CALL
from setqueue.steps import RunScript, Step
from setqueue.workflows import Workflows
from tests.support.jobs import ExecutionLog
from tests.support.procs import Proc
from tests.support.tasks_app import report, square, step

StartWorker = Callable[..., Proc]
REGISTRY = "tests.support.tasks_app:tasks"


def keys_and_values(client: redis.Redis, name: str) -> dict[str, Any]:
    """Every key of the queue with its dump: what a refused enqueue must leave unchanged."""
    return {key: client.dump(key) for key in client.scan_iter(match=f"setqueue:{{{name}*")}


def test_a_chain_of_three_runs_in_order(
    start_worker: StartWorker, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    # Sent before a worker runs, so each step registers while the one before still waits: the links
    # then show both ways. (Sent to a running worker, a step that already ended when the next one
    # registers counts for it at once, and lists no dependents: docs/guide.md#dependencies.)
    sent = q.chain([step.call(1), step.call(2), step.call(3)])
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    assert q.result(sent[-1], timeout=30) == [1, 2, 3]
    log = ExecutionLog(tmp_path / "exec.log")
    assert [job_id for event, job_id, _, _ in log.events() if event == "start"] == [s.id for s in sent]
    ends = {job_id: at for event, job_id, _, at in log.events() if event == "end"}
    starts = {job_id: at for event, job_id, _, at in log.events() if event == "start"}
    assert ends[sent[0].id] <= starts[sent[1].id] and ends[sent[1].id] <= starts[sent[2].id]
    assert [link.id for link in q.inspect(sent[2].id).depends_on] == [sent[1].id]  # type: ignore[union-attr]
    assert [link.id for link in q.inspect(sent[0].id).dependents] == [sent[1].id]  # type: ignore[union-attr]


def test_a_callback_after_thirty_members_runs_once_after_all_of_them(
    start_worker: StartWorker, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    fan = q.fan_in([square.call(x) for x in range(30)], report.call(), id="batch-1")
    assert q.inspect(fan.callback.id).state == "waiting"  # type: ignore[union-attr]
    assert q.stats()["waiting"] == 1
    start_worker(queue_name, JOB_HANDLER=REGISTRY, WORKER_CONCURRENCY="4")
    assert q.result(fan.callback, timeout=60) == {"sum": sum(x * x for x in range(30)), "outcomes": {"done": 30}}
    log = ExecutionLog(tmp_path / "exec.log")
    assert log.starts()[fan.callback.id] == 1
    callback_start = min(at for event, job_id, _, at in log.events() if event == "start" and job_id == fan.callback.id)
    last_member_end = max(at for event, job_id, _, at in log.events() if event == "end" and job_id != fan.callback.id)
    assert last_member_end <= callback_start
    info = q.inspect(fan.callback.id)
    assert info is not None and info.waiting_on == WaitProgress(total=30, done=30)
    # Sent again with the same id (a producer that lost the reply): nothing new.
    again = q.fan_in([square.call(x) for x in range(30)], report.call(), id="batch-1")
    assert again.callback.id == fan.callback.id and not again.callback.created
    assert q.stats()["todos"] + q.stats()["waiting"] == 0


def test_a_failed_member_fails_the_callback_naming_it_or_with_run_releases_it(
    start_worker: StartWorker, redis_url: str, queue_name: str
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    start_worker(queue_name, JOB_HANDLER=REGISTRY)
    failing = q.fan_in([square.call(2), square.call(-1)], report.call(), if_member_fails="fail")
    with pytest.raises(JobFailed) as failed:
        q.result(failing.callback, timeout=30)
    bad = failing.members[1].id
    assert (
        f"dependency {bad!r}"[:11] in str(failed.value)
        and bad in str(failed.value)
        and "ended failed" in str(failed.value)
    )
    running = q.fan_in([square.call(2), square.call(-1), square.call(3)], report.call(), if_member_fails="run")
    assert q.result(running.callback, timeout=30) == {"sum": 13, "outcomes": {"done": 2, "failed": 1}}


def test_by_hand_the_dependent_is_claimable_as_soon_as_ack_returns(redis_url: str, queue_name: str) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    q.enqueue(["a", "b"])
    assert q.enqueue(["c"], depends_on=["a", "b"]) == 1
    assert q.enqueue(["d"], depends_on=["c"], delay=3600) == 1  # released to scheduled
    first = q.claim(5)
    assert sorted(lease.id for lease in first) == ["a", "b"]  # c waits: never claimed
    q.ack(first[0])
    assert q.claim(1) == [] and q.inspect("c").state == "waiting"  # type: ignore[union-attr]
    q.ack(first[1])
    (c,) = q.claim(1)
    assert c.id == "c" and [d.outcome for d in c.dependencies()] == ["done", "done"]
    q.ack(c)
    assert q.inspect("d").state == "scheduled"  # type: ignore[union-attr]
    # Already done dependencies hold nothing.
    assert q.enqueue(["e"], depends_on=["a", "c"]) == 1
    assert q.inspect("e").state == "todos"  # type: ignore[union-attr]


def test_an_ack_releases_a_sole_dependent_it_names_only_while_that_run_still_waits(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    """A job whose only dependent waits in its queue names it in linked ("<generation> <id>"), and its
    ack releases it from that alone; a second dependent makes it "*". Whatever that dependent became
    meanwhile (cancelled, deleted and sent again without the dependency, given a priority or a
    delay), the ack does what the general way does."""
    q = setqueue.open_queue(redis_url, queue_name)
    linked = q.core.keys.linked
    q.enqueue(["a", "b", "c", "d", "e", "f"])
    q.enqueue(["after-a"], depends_on=["a"])
    q.enqueue(["after-b"], depends_on=["b"])
    q.enqueue(["after-c"], depends_on=["c"])
    q.enqueue(["after-d-1", "after-d-2"], depends_on=["d"])
    q.enqueue(["after-e"], depends_on=["e"], priority=5)
    q.enqueue(["after-f"], depends_on=["f"], delay=3600)
    sole = client.hget(linked, "a")
    assert isinstance(sole, str) and sole.endswith(" after-a") and sole != "*"
    assert client.hget(linked, "d") == "*"  # two dependents: read from dependents
    assert q.enqueue(["after-a"], depends_on=["a"]) == 0  # sent again: the same job, still sole
    assert client.hget(linked, "a") == sole
    # b's dependent is cancelled, c's deleted and sent again with no dependency: neither is b's or c's.
    assert q.cancel("after-b") == "waiting"
    assert q.delete("after-c") == "waiting"
    assert q.enqueue(["after-c"], depends_on=["a"]) == 1  # a new run, waiting for a instead
    assert client.hget(linked, "a") == "*"  # two runs of after-c and after-a: no longer sole
    leases = q.claim(6)
    assert sorted(lease.id for lease in leases) == ["a", "b", "c", "d", "e", "f"]
    q.ack_many(leases)
    states = {i: q.inspect(i).state for i in ("after-a", "after-b", "after-c", "after-d-1", "after-d-2")}  # type: ignore[union-attr]
    assert states == {
        "after-a": "todos",
        "after-b": "cancelled",
        "after-c": "todos",  # released by a, its one dependency now
        "after-d-1": "todos",
        "after-d-2": "todos",
    }
    assert q.inspect("after-e").state == "todos" and q.inspect("after-f").state == "scheduled"  # type: ignore[union-attr]
    released = q.claim(10)
    assert released[0].id == "after-e"  # its priority kept
    assert sorted(lease.id for lease in released) == ["after-a", "after-c", "after-d-1", "after-d-2", "after-e"]
    for lease in released:  # after-c's new run waited for a
        expected = "a" if lease.id == "after-c" else lease.id[len("after-")]
        assert [(d.id, d.outcome) for d in lease.dependencies()] == [(expected, "done")]
    assert q.stats()["waiting"] == 0
    q.close()


def test_a_release_an_ack_recorded_is_moved_to_the_line_by_whoever_comes_next(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    """An ack records the release of a sole dependent in released and reads nothing more; the next
    claim, sweep, stats or inspect moves it from waiting to the line, if it still waits in the run the
    ack named: one cancelled, or deleted and sent again waiting for another job, in between is left
    as it is."""
    q = setqueue.open_queue(redis_url, queue_name)
    k = q.core.keys
    q.enqueue(["a", "b", "c", "d", "other"])
    for dependency in "abcd":
        q.enqueue([f"after-{dependency}"], depends_on=[dependency])
    leases = q.claim(4)
    assert sorted(lease.id for lease in leases) == ["a", "b", "c", "d"]
    assert all(q.ack_many(leases))
    assert client.llen(k.released) == 8 and client.zcard(k.waiting) == 4  # recorded: all four still wait
    assert q.cancel("after-b") == "waiting"
    assert q.delete("after-c") == "waiting"
    assert q.enqueue(["after-c"], depends_on=["other"]) == 1  # a new run, waiting for another job
    claimed = q.claim(10)  # the claim moves the others first, behind "other" already in line
    assert [lease.id for lease in claimed] == ["other", "after-a", "after-d"]
    assert client.llen(k.released) == 0
    assert [(d.id, d.outcome) for d in claimed[1].dependencies()] == [("a", "done")]  # its arrival written
    assert q.inspect("after-b").state == "cancelled" and q.inspect("after-c").state == "waiting"  # type: ignore[union-attr]
    # A sweep, stats and inspect each move what an ack recorded, where no claim came since.
    for reader in ("sweep", "stats", "inspect"):
        q.enqueue([f"{reader}-first"])
        q.enqueue([f"{reader}-then"], depends_on=[f"{reader}-first"])
        (lease,) = q.claim(1)
        assert q.ack(lease) and client.llen(k.released) == 2
        if reader == "sweep":
            q.sweep()
        elif reader == "stats":
            assert q.stats()["todos"] == 1
        else:
            assert q.inspect(f"{reader}-then").state == "todos"  # type: ignore[union-attr]
        assert client.llen(k.released) == 0 and client.zscore(k.todos, f"{reader}-then") is not None
        (then,) = q.claim(1)
        assert then.id == f"{reader}-then" and q.ack(then)
    q.close()


def test_a_claim_moves_no_more_than_a_page_of_recorded_releases() -> None:
    source = (Path(setqueue.__file__).parent / "lua" / "includes" / "released.lua").read_text()
    assert f"local DRAIN_MOST = {LINKS_PER_CALL}\n" in source


def test_cancel_and_delete_of_a_dependency_fail_or_release_its_dependents(redis_url: str, queue_name: str) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    q.enqueue(["x", "y"])
    q.enqueue(["fails-on-cancel"], depends_on=["x"])
    q.enqueue(["runs-on-cancel"], depends_on=["x"], if_dependency_fails="run")
    q.enqueue(["then"], depends_on=["fails-on-cancel"])  # fails in turn
    q.enqueue(["fails-on-delete"], depends_on=["y"])
    q.enqueue(["runs-on-delete"], depends_on=["y"], if_dependency_fails="run")
    assert q.cancel("x") == "todos" and q.delete("y") == "todos"
    states = {
        i: q.inspect(i) for i in ("fails-on-cancel", "runs-on-cancel", "then", "fails-on-delete", "runs-on-delete")
    }
    assert {i: info.state for i, info in states.items() if info} == {
        "fails-on-cancel": "failed",
        "runs-on-cancel": "todos",
        "then": "failed",
        "fails-on-delete": "failed",
        "runs-on-delete": "todos",
    }
    assert "dependency x (queue" in (states["fails-on-cancel"].error or "")  # type: ignore[union-attr]
    assert "ended cancelled" in (states["fails-on-cancel"].error or "")  # type: ignore[union-attr]
    assert "dependency fails-on-cancel" in (states["then"].error or "")  # type: ignore[union-attr]
    assert "ended deleted" in (states["fails-on-delete"].error or "")  # type: ignore[union-attr]
    # A waiting job can be cancelled and deleted like any other.
    q.enqueue(["z"])
    q.enqueue(["w1", "w2"], depends_on=["z"])
    assert q.cancel("w1") == "waiting" and q.delete("w2") == "waiting"
    assert q.stats()["waiting"] == 0
    leases = q.claim(10)
    assert sorted(lease.id for lease in leases) == ["runs-on-cancel", "runs-on-delete", "z"]
    assert all(result.acked for result in q.ack_many(leases)) and q.stats()["todos"] == 0


def test_an_unknown_dependency_is_refused_with_nothing_written(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    q.enqueue(["known"])
    before = keys_and_values(client, queue_name)
    with pytest.raises(UnknownJob, match="'missing'"):
        q.enqueue(["new"], depends_on=["known", "missing"])
    with pytest.raises(UnknownJob, match="other-queue"):
        q.enqueue(["new"], depends_on=[JobRef("other-queue", "known")])
    with pytest.raises(TypeError, match="dependency"):
        q.enqueue(["new"], depends_on=[42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="if_dependency_fails"):
        q.enqueue(["new"], depends_on=["known"], if_dependency_fails="maybe")
    assert keys_and_values(client, queue_name) == before


def test_a_dependency_across_two_queues_served_by_one_worker(
    start_worker: StartWorker, redis_url: str, queue_name: str
) -> None:
    payments, emails = f"{queue_name}-payments", f"{queue_name}-emails"
    pay = setqueue.open_queue(redis_url, payments)
    mail = setqueue.open_queue(redis_url, emails)
    charge = pay.send(square, 7)
    receipt = mail.send(report.options(depends_on=[charge]))
    assert mail.inspect(receipt.id).state == "waiting"  # type: ignore[union-attr]
    start_worker(f"{payments},{emails}", JOB_HANDLER=REGISTRY)
    assert mail.result(receipt, timeout=30) == {"sum": 49, "outcomes": {"done": 1}}
    links = mail.inspect(receipt.id).depends_on  # type: ignore[union-attr]
    assert [(link.queue, link.id, link.state) for link in links] == [(payments, charge.id, "done")]
    assert [link.id for link in pay.inspect(charge.id).dependents] == [receipt.id]  # type: ignore[union-attr]


def test_many_dependents_and_dependencies_are_told_in_pages(redis_url: str, queue_name: str) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    other = setqueue.open_queue(redis_url, f"{queue_name}-other")
    many = 2 * LINKS_PER_CALL + 7
    q.enqueue(["root"])
    q.enqueue([f"here-{n}" for n in range(many)], depends_on=["root"])
    other.enqueue([f"there-{n}" for n in range(many)], depends_on=[JobRef(queue_name, "root")])
    (root,) = q.claim(1)
    assert q.ack(root)
    assert q.stats()["todos"] == many and other.stats()["todos"] == many
    members = [f"m-{n}" for n in range(many)]
    q.enqueue(members)
    q.enqueue(["callback"], depends_on=members)
    while leases := q.claim(500):
        q.ack_many([lease for lease in leases if lease.id != "callback"])
        if any(lease.id == "callback" for lease in leases):
            break
    info = q.inspect("callback")
    assert info is not None and info.waiting_on == WaitProgress(total=many, done=many)


def test_a_release_a_dead_worker_left_is_finished_by_a_sweep(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    other = setqueue.open_queue(redis_url, f"{queue_name}-other")
    q.enqueue(["first"])
    q.enqueue(["near"], depends_on=["first"])
    other.enqueue(["second"], depends_on=[JobRef(queue_name, "first")])
    (lease,) = q.claim(1)
    # The ack script alone: the worker died before it told the dependents of another queue. The
    # script released the one of its own queue itself, and recorded the job for the other.
    core = q.core
    ack = core.commands.ack(
        [lease], [None], request_ttl_ms=60_000, done_max_count=0, payload_keep_bytes=0, result_ttl_ms=0, wake_cap=1
    )
    list(_drive(q, ack))
    assert q.inspect("near").state == "todos"  # type: ignore[union-attr]
    assert other.inspect("second").state == "waiting"  # type: ignore[union-attr]
    assert client.zcard(core.keys.releasing) == 1
    q.sweep()  # too fresh: the worker could still be at it
    assert client.zcard(core.keys.releasing) == 1
    client.zadd(core.keys.releasing, {"first": 0})  # as if it were left long ago
    q.sweep()
    assert q.inspect("near").state == "todos"  # type: ignore[union-attr]
    assert other.inspect("second").state == "todos" and client.zcard(core.keys.releasing) == 0  # type: ignore[union-attr]


def _scripts_called(q: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the scripts ``q`` calls from now on, in order, as it calls them."""
    scripts: list[str] = []
    do = q.executor.do

    def recorder(step: Step) -> Any:
        if isinstance(step, RunScript):
            scripts.append(step.name)
        return do(step)

    monkeypatch.setattr(q.executor, "do", recorder)
    return scripts


def test_a_batch_of_acks_tells_another_queues_dependents_in_one_call(
    redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    other = setqueue.open_queue(redis_url, f"{queue_name}-other")
    firsts = [f"first-{n}" for n in range(50)]
    q.enqueue(firsts)
    for first in firsts:
        other.enqueue([f"then-{first}"], depends_on=[JobRef(queue_name, first)])
    leases = q.claim(50)
    scripts = _scripts_called(q, monkeypatch)
    assert all(result.acked for result in q.ack_many(leases))
    # The ack reads the dependents; one arrive.lua there for all 50; one release.lua to finish.
    assert scripts == ["ack", "arrive", "release"]
    assert other.stats()["todos"] == 50 and other.stats()["waiting"] == 0


def test_a_step_whose_dependencies_live_in_its_queue_is_enqueued_and_registered_in_one_call(
    redis_url: str, queue_name: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    other = setqueue.open_queue(redis_url, f"{queue_name}-other")
    q.enqueue(["first", "second", "gone"])
    leases = {lease.id: lease for lease in q.claim(3)}
    q.fail(leases["gone"], "no", retry=False)
    other.enqueue(["elsewhere"])
    scripts = _scripts_called(q, monkeypatch)
    # The chain step: one enqueue.lua, which checks its dependency and registers it; nothing staged.
    q.enqueue(["then"], depends_on=["first"])
    assert scripts == ["enqueue"]
    assert client.zcard(q.core.keys.registering) == 0 and not client.keys(f"*{queue_name}*staging*")
    assert [(d.id, d.outcome) for d in q.dependencies("then")] == [("first", None)]
    # A dependency that ended counts in the same call: failed, with "fail", the job fails naming it.
    scripts.clear()
    q.enqueue(["doomed"], depends_on=["second", "gone"])
    assert scripts == ["enqueue"]
    doomed = q.inspect("doomed")
    assert doomed is not None and doomed.state == "failed" and "gone" in (doomed.error or "")
    # A dependency in another queue: looked up there first, the list staged, registered after.
    scripts.clear()
    q.enqueue(["mixed"], depends_on=["first", JobRef(f"{queue_name}-other", "elsewhere")])
    assert scripts == ["lookup", "lookup", "enqueue", "register", "depend", "register"]
    assert client.zcard(q.core.keys.registering) == 0 and not client.keys(f"*{queue_name}*staging*")
    # Links given to the script with another if_exists: refused before anything is written.
    before = keys_and_values(client, queue_name)
    call = q.core.commands.enqueue(
        [("again", None)],
        with_payloads=False,
        request_ttl_ms=60_000,
        wake_cap=1,
        if_exists="rerun",
        dependencies=(1, "fail"),
        links=[f"{queue_name} first"],
    )
    with pytest.raises(redis.ResponseError, match="ignore"):
        list(_drive(q, call))
    assert keys_and_values(client, queue_name) == before
    # Acked, the dependency releases the chain step.
    assert q.ack(leases["first"])
    assert q.inspect("then").state == "todos"  # type: ignore[union-attr]


def test_a_job_whose_dependency_list_was_lost_before_it_registered_fails_saying_so(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    q.enqueue(["first"])
    core = q.core
    # An enqueuer that died between its enqueue call and the job's registration, and a staging list
    # gone before any sweep came (a day without a cleaner, or evicted by a volatile maxmemory policy).
    generation = "lost-list"
    links = q.operations.links
    assert isinstance(links, Workflows)
    list(_drive(q, links.stage(core, [f"{queue_name} first"], generation)))
    enqueue = core.commands.enqueue(
        [("late", None)],
        with_payloads=False,
        request_ttl_ms=60_000,
        wake_cap=1,
        dependencies=(1, "fail"),
        request_id=generation,
    )
    list(_drive(q, enqueue))
    assert q.inspect("late").state == "waiting"  # type: ignore[union-attr]
    client.delete(core.keys.staging(generation))
    client.zadd(core.keys.registering, {"late": 0})  # left long ago
    q.sweep()
    info = q.inspect("late")
    assert info is not None and info.state == "failed"
    assert info.error is not None and "dependency list was lost" in info.error and "0 of 1" in info.error
    assert client.zcard(core.keys.registering) == 0
    # A job registered whole is left alone by a late registration (a sweep that raced its enqueuer)
    # once its staging list went.
    q.enqueue(["kept"], depends_on=["first"])
    list(_drive(q, q.operations.links.register(core, "kept")))
    assert q.inspect("kept").state == "waiting"  # type: ignore[union-attr]


def _entries_of(client: redis.Redis, q: Any, job_id: str) -> tuple[int, int]:
    """How many dep_lines entries and arrived fields ``job_id`` has."""
    k = q.core.keys
    lines = client.zlexcount(k.dep_lines, f"[{job_id}\0", f"({job_id}\1")
    fields = sum(1 for field in client.hkeys(k.arrived) if str(field).startswith(f"{job_id}\0"))
    return lines, fields


def test_a_callback_with_many_dependencies_is_forgotten_a_page_a_call(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    many = 2 * LINKS_PER_CALL + 7
    members = [f"m-{n}" for n in range(many)]
    q.enqueue(members)
    q.enqueue(["cb"], depends_on=members)
    first = q.claim(10)
    q.ack_many(first)
    assert _entries_of(client, q, "cb") == (many, 10)
    calls = int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))
    assert q.delete("cb") == "waiting"
    # Dropped before delete returns, in one delete.lua call and a forget.lua call per page.
    assert _entries_of(client, q, "cb") == (0, 0) and client.zcard(q.core.keys.forgetting) == 0
    made = int(client.info("commandstats")["cmdstat_evalsha"]["calls"]) - calls
    assert made >= many // LINKS_PER_CALL + 1
    # A callback with few goes at once, in the delete itself.
    q.enqueue(["small"], depends_on=members[-3:])
    assert q.delete("small") == "waiting" and _entries_of(client, q, "small") == (0, 0)


def test_a_new_run_of_an_id_still_being_forgotten_registers_after_the_old_entries_went(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    many = LINKS_PER_CALL + 20
    old = [f"old-{n}" for n in range(many)]
    q.enqueue(old)
    q.enqueue(["cb"], depends_on=old)
    q.ack_many(q.claim(5))
    core = q.core
    # delete.lua alone: the caller died before it dropped the long list (or a retention trim left it).
    list(_drive(q, core.commands.delete("cb", None, request_ttl_ms=60_000, wake_cap=1)))
    assert client.zscore(core.keys.forgetting, "cb") is not None
    assert _entries_of(client, q, "cb") == (many, 5)
    # A new run of the id with other dependencies: it drops the old entries first, then registers its own.
    new = ["new-a", "new-b"]
    q.enqueue(new)
    q.enqueue(["cb"], depends_on=new)
    assert client.zscore(core.keys.forgetting, "cb") is None
    assert _entries_of(client, q, "cb") == (2, 0)
    assert [d.id for d in q.dependencies("cb")] == new
    claimed: list[str] = []
    while leases := q.claim(500):
        claimed += [lease.id for lease in leases]
        q.ack_many([lease for lease in leases if lease.id != "cb"])
    assert "cb" in claimed  # released by its new dependencies alone
    assert [(d.id, d.outcome) for d in q.dependencies("cb")] == [("new-a", "done"), ("new-b", "done")]


def test_a_sweep_drops_what_a_forgetting_caller_left(redis_url: str, queue_name: str, client: redis.Redis) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    many = LINKS_PER_CALL + 1
    members = [f"m-{n}" for n in range(many)]
    q.enqueue(members)
    q.enqueue(["cb"], depends_on=members)
    core = q.core
    list(_drive(q, core.commands.delete("cb", None, request_ttl_ms=60_000, wake_cap=1)))
    assert _entries_of(client, q, "cb")[0] == many
    # A new run of the id meanwhile, without dependencies: the old entries are not shown as its own.
    q.enqueue(["cb"])
    info = q.inspect("cb")
    assert info is not None and info.depends_on == () and info.waiting_on is None
    assert q.dependencies("cb") == []
    q.sweep()
    assert _entries_of(client, q, "cb") == (0, 0) and client.zcard(core.keys.forgetting) == 0


def _dependents_of(client: redis.Redis, q: Any, job_id: str) -> int:
    return client.zlexcount(q.core.keys.dependents, f"[{job_id}\0", f"({job_id}\1")


def test_a_job_with_many_dependents_is_forgotten_a_page_a_call(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    many = LINKS_PER_CALL + 30
    q.enqueue(["root"])
    q.enqueue([f"d-{n}" for n in range(many)], depends_on=["root"])
    assert _dependents_of(client, q, "root") == many
    assert q.delete("root") == "todos"
    # Told it was deleted (each fails, naming it), then its entries dropped before delete returns.
    assert q.stats()["failed"] == many
    assert _dependents_of(client, q, "root") == 0 and client.zcard(q.core.keys.forgetting) == 0
    assert not client.hexists(q.core.keys.linked, "root")


def test_a_new_dependent_of_an_id_whose_earlier_run_is_still_being_forgotten_waits_for_that(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    q = setqueue.open_queue(redis_url, queue_name)
    other = setqueue.open_queue(redis_url, f"{queue_name}-other")
    many = LINKS_PER_CALL + 30
    q.enqueue(["root"])
    q.enqueue([f"d-{n}" for n in range(many)], depends_on=["root"])
    core = q.core
    # delete.lua alone: the caller died before it told the dependents and dropped their entries.
    list(_drive(q, core.commands.delete("root", None, request_ttl_ms=60_000, wake_cap=1)))
    assert q.stats()["waiting"] == many and _dependents_of(client, q, "root") == many
    # A new run of the id, and new dependents of it, in its queue and in another: each registers
    # only once the old entries are gone (the old dependents told first), so that none of theirs is
    # dropped, or told, with them.
    q.enqueue(["root"])
    q.enqueue(["near"], depends_on=["root"])
    other.enqueue(["far"], depends_on=[JobRef(queue_name, "root")])
    assert q.stats()["failed"] == many  # the old dependents, told "deleted"
    assert _dependents_of(client, q, "root") == 2 and client.zcard(core.keys.forgetting) == 0
    assert q.inspect("near").state == "waiting" and other.inspect("far").state == "waiting"  # type: ignore[union-attr]
    (lease,) = [lease for lease in q.claim(10) if lease.id == "root"]
    assert q.ack(lease)
    assert q.inspect("near").state == "todos" and other.inspect("far").state == "todos"  # type: ignore[union-attr]


def test_the_scripts_forget_inline_no_more_than_a_page() -> None:
    source = (Path(setqueue.__file__).parent / "lua" / "includes" / "links.lua").read_text()
    assert f"local FORGET_INLINE = {LINKS_PER_CALL}\n" in source


def _drive(q: Any, steps: Any) -> Any:
    yield q.executor.run(steps)


def test_the_asyncio_twin(redis_url: str, queue_name: str) -> None:
    async def main() -> None:
        async with setqueue.aio.open_queue(redis_url, queue_name) as q:
            sent = await q.chain([step.call(1), step.call(2)])
            assert (await q.inspect(sent[1].id)).state == "waiting"  # type: ignore[union-attr]
            (first,) = await q.claim(2)
            await q.ack(first, result=[1])
            (second,) = await q.claim(1)
            assert second.id == sent[1].id
            deps = await q.dependencies(second.id)
            assert [(d.id, d.outcome, d.result) for d in deps] == [(sent[0].id, "done", [1])]

    asyncio.run(main())


def test_a_known_id_in_a_later_call_keeps_its_own_dependencies(redis_url: str, queue_name: str) -> None:
    """A later enqueue naming a known id (left alone: if_exists "ignore") with other dependencies
    registers only the jobs it made: the known one keeps its list and is not failed by the others."""
    q = setqueue.open_queue(redis_url, queue_name)
    q.enqueue(["a", "b"])
    assert q.enqueue(["known"], depends_on=["a"]) == 1
    assert q.enqueue(["known", "new"], depends_on=["b"]) == 1
    assert [link.id for link in q.inspect("known").depends_on] == ["a"]  # type: ignore[union-attr]
    leases = {lease.id: lease for lease in q.claim(2)}
    assert q.fail(leases["b"], "no", retry=False).value == "dead"
    assert q.inspect("new").state == "failed" and q.inspect("known").state == "waiting"  # type: ignore[union-attr]
    assert q.ack(leases["a"]) and q.inspect("known").state == "todos"  # type: ignore[union-attr]
