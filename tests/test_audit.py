"""The audit (setqueue.runtime.audit): what the creator, demo handler and cleaner record, and what the
auditor makes of it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from cleaner.service import CleanerService
from creator.service import CreatorService
from setqueue import Lease, Queue, Shard
from setqueue.runtime import demo
from setqueue.runtime.audit import Auditor, AuditRecorder, AuditReport, make_workflows
from setqueue.runtime.settings import CleanerSettings, CreatorSettings, WorkerSettings
from tests.support.procs import base_env
from tests.support.waits import wait_until_leases_expire


@pytest.fixture
def recorder(queue: Queue) -> AuditRecorder:
    return AuditRecorder(queue.redis, queue.keys)


def auditor(queue: Shard, *, retention: bool = False, chunk: int = 500) -> Auditor:
    return Auditor(queue.redis, queue.keys, retention=retention, chunk=chunk)


def created(queue: Queue, recorder: AuditRecorder, prefix: str, count: int) -> list[str]:
    """Enqueue <prefix>-1..<count> and record them, as the creator does."""
    ids = [f"{prefix}-{n}" for n in range(1, count + 1)]
    queue.enqueue(ids)
    recorder.created(prefix, count)
    return ids


def run_and_ack(queue: Queue, recorder: AuditRecorder, count: int) -> list[Lease]:
    """Claim, record a successful run of each, ack: as a worker would."""
    leases = queue.claim(count)
    for lease in leases:
        recorder.run(lease, succeeded=True)
    queue.ack_many(leases)
    return leases


def test_a_clean_run_finds_every_id_in_one_state(queue: Queue, recorder: AuditRecorder) -> None:
    created(queue, recorder, "a", 10)
    queue.enqueue(["a-11"], delay=3600)  # enqueued but not recorded: unaudited, not a finding
    recorder.created("b", 3)
    queue.enqueue(["b-1", "b-2", "b-3"], delay=60)
    run_and_ack(queue, recorder, 4)
    failing = queue.claim(2)
    recorder.run(failing[0], succeeded=False)
    queue.fail(failing[0], "boom", retry=False)

    report = auditor(queue).audit()

    assert report.created == 13
    assert report.states == {
        "todos": 4,
        "in_progress": 1,
        "done": 4,
        "failed": 1,
        "scheduled": 3,
        "cancelled": 0,
        "waiting": 0,
    }
    assert (report.lost, report.in_two_states, report.duplicates, report.unexplained_duplicates) == (0, 0, 0, 0)
    assert (report.successful_runs, report.failed_runs) == (4, 1)
    assert report.ok


def test_a_waiting_job_with_a_group_is_in_todos_for_the_audit(queue: Queue, recorder: AuditRecorder) -> None:
    ids = [f"g-{n}" for n in range(1, 7)]
    queue.enqueue(ids[:3], group="tenant-1")
    queue.enqueue(ids[3:], group="tenant-2")
    recorder.created("g", 6)
    run_and_ack(queue, recorder, 2)

    report = auditor(queue).audit()

    assert report.states == {
        "todos": 4,
        "in_progress": 0,
        "done": 2,
        "failed": 0,
        "scheduled": 0,
        "cancelled": 0,
        "waiting": 0,
    }
    assert (report.lost, report.in_two_states) == (0, 0)


def test_an_id_in_no_state_is_lost_and_named(queue: Queue, recorder: AuditRecorder) -> None:
    created(queue, recorder, "a", 5)
    queue.delete("a-2")
    recorder.created("a", 7)  # recorded, never enqueued: as if Redis lost the enqueue

    report = auditor(queue).audit()

    assert report.lost == 3
    assert report.lost_ids == ("a-2", "a-6", "a-7")
    assert not report.ok


def test_an_id_in_two_states_is_found(queue: Queue, recorder: AuditRecorder, client: redis.Redis) -> None:
    created(queue, recorder, "a", 3)
    client.sadd(queue.keys.done, "a-3")  # a broken transition would leave this

    report = auditor(queue).audit()

    assert (report.in_two_states, report.two_state_ids) == (1, ("a-3",))
    assert report.states["todos"] == 2
    assert not report.ok


def test_a_second_success_is_explained_only_by_a_lost_lease(
    queue: Queue, recorder: AuditRecorder, client: redis.Redis
) -> None:
    created(queue, recorder, "a", 2)
    first = queue.claim(2)
    for lease in first:
        recorder.run(lease, succeeded=True)
    # Both go back to todos behind the queue's back (no history line); only a-1's loss is recorded.
    k = queue.keys
    for lease in first:
        client.hdel(k.owners, lease.id)
        client.zadd(k.todos, {lease.id: client.zscore(k.in_progress, lease.id) or 0})
        client.zrem(k.in_progress, lease.id)
    recorder.lease_lost(["a-1"])
    run_and_ack(queue, recorder, 2)

    report = auditor(queue).audit()

    assert report.states["done"] == 2
    assert (report.duplicates, report.unexplained_duplicates) == (2, 1)
    assert report.unexplained_ids == ("a-2",)
    assert report.lease_losses == 1
    # a-1's recorded loss is missing from its history: the audit says so.
    assert (report.unrecorded_reclaims, report.unrecorded_ids, report.history_reclaims) == (1, ("a-1",), 0)


def test_a_reclaim_in_the_history_explains_a_second_success(queue: Queue, recorder: AuditRecorder) -> None:
    created(queue, recorder, "a", 1)
    first = queue.claim(1)
    recorder.run(first[0], succeeded=True)
    queue.release(first)  # handed back, as at the end of a shutdown grace: the history says so
    run_and_ack(queue, recorder, 1)

    report = auditor(queue).audit()

    assert (report.duplicates, report.unexplained_duplicates, report.history_reclaims) == (1, 0, 1)
    assert report.ok


def test_a_resent_run_record_counts_once(queue: Queue, recorder: AuditRecorder, client: redis.Redis) -> None:
    created(queue, recorder, "a", 1)
    (lease,) = queue.claim(1)
    recorder.run(lease, succeeded=True)
    recorder.run(lease, succeeded=True)  # redis-py resending after a lost reply
    queue.ack(lease)

    report = auditor(queue).audit()

    assert (report.successful_runs, report.duplicates) == (1, 0)
    assert client.pttl(queue.keys.audit_run(lease.token, lease.id)) > 0  # the marker expires


def test_a_record_of_created_ids_never_goes_down(queue: Queue, recorder: AuditRecorder, client: redis.Redis) -> None:
    recorder.created("a", 100)
    recorder.created("a", 40)  # a creator restarted with the same prefix starts again from 1
    assert client.hgetall(queue.keys.audit_created) == {"a": "100"}


@pytest.mark.parametrize(("retention", "lost_and_trimmed"), [(False, (2, 0)), (True, (1, 1))])
def test_a_trimmed_id_is_lost_unless_done_has_a_retention_and_it_succeeded(
    queue: Queue, recorder: AuditRecorder, client: redis.Redis, retention: bool, lost_and_trimmed: tuple[int, int]
) -> None:
    created(queue, recorder, "a", 2)
    run_and_ack(queue, recorder, 1)
    client.srem(queue.keys.done, "a-1")  # what the retention of done does to an old id
    queue.delete("a-2")  # never ran: no retention explains it

    report = auditor(queue, retention=retention).audit()

    assert (report.lost, report.trimmed) == lost_and_trimmed


def test_an_audit_in_small_steps_adds_up_to_a_whole_one(queue: Queue, recorder: AuditRecorder) -> None:
    created(queue, recorder, "a", 7)
    created(queue, recorder, "b", 5)
    run_and_ack(queue, recorder, 6)
    queue.delete("b-4")

    audit = auditor(queue, chunk=3).start()
    steps = 0
    while not audit.advance(2):
        steps += 1
    stepped = audit.report()
    whole = auditor(queue).audit()

    assert steps == 5  # 12 ids, 2 a step
    assert _findings(stepped) == _findings(whole)
    assert (stepped.created, stepped.lost, stepped.lost_ids) == (12, 1, ("b-4",))


def test_a_report_comes_back_from_json(queue: Queue, recorder: AuditRecorder) -> None:
    created(queue, recorder, "a", 3)
    queue.delete("a-1")
    report = auditor(queue).audit()
    assert AuditReport.from_dict(report.as_dict()) == report


def test_workflows_count_each_release_and_callback_run_once(
    queue: Queue, recorder: AuditRecorder, client: redis.Redis
) -> None:
    """A batch of one chain (3 steps) and one fan-in (20 members and a callback), made twice (a retry
    leaves it alone). The audit expects a dependent released once its dependencies ended (a chain
    step's: done), and counts a release, or a run of the callback, beyond what lost leases explain."""
    assert make_workflows(queue, recorder, 7, 1, 1) == make_workflows(queue, recorder, 7, 1, 1) == 3 + 21
    report = auditor(queue).audit()
    assert (report.created, report.states["waiting"], report.dependents_released, report.callbacks_ran) == (24, 3, 0, 0)
    first = queue.claim(1)[0]  # the chain's first step: it fails for good, the rest of the chain with it
    assert first.id == "wfchain7x0-1"
    recorder.run(first, succeeded=False)
    queue.fail(first, "boom", retry=False)
    while run_and_ack(queue, recorder, 10):
        pass
    report = auditor(queue).audit()
    assert report.states["failed"] == 3
    assert (report.dependents_expected, report.dependents_released, report.dependents_released_twice) == (1, 1, 0)
    assert (report.callbacks_expected, report.callbacks_ran, report.callbacks_ran_twice) == (1, 1, 0)
    assert report.workflows_ok

    client.hincrby(queue.keys.audit_successes, "wffanin7x0-21", 1)  # a second success, no lease lost
    client.hincrby(queue.keys.audit_failures, "wfchain7x0-3", 1)  # a run after its chain failed
    report = auditor(queue).audit()
    assert (report.dependents_expected, report.dependents_released, report.dependents_released_twice) == (1, 2, 2)
    assert (report.callbacks_ran, report.callbacks_ran_twice) == (1, 1)
    assert report.workflow_ids == ("wfchain7x0-3",)
    assert not report.workflows_ok


# -- the services


def service_env(redis_url: str, queue_name: str, **settings: object) -> dict[str, str]:
    defaults = {"REDIS_URL": redis_url, "QUEUE_NAME": queue_name, "METRICS_PORT": 0, "AUDIT": "true"}
    return base_env(**{**defaults, **settings})


def test_the_creator_records_the_ids_it_made(redis_url: str, queue_name: str, client: redis.Redis) -> None:
    env = service_env(redis_url, queue_name, CREATE_RATE=0, CREATE_TOTAL=25, CREATE_BATCH=10, CREATE_ID_PREFIX="run")
    creator = CreatorService(CreatorSettings.from_env(env))
    try:
        assert creator.run() == 0
        assert client.hgetall(creator.queue.shards[0].keys.audit_created) == {"run": "25"}
        report = auditor(creator.queue.shards[0]).audit()
        assert (report.created, report.states["todos"], report.lost) == (25, 25, 0)
    finally:
        creator.close()


@pytest.fixture
def audited_demo(recorder: AuditRecorder) -> Iterator[Callable[[float], None]]:
    """The demo handler recording its runs, at a given FAIL_RATE; restored after."""
    before = demo._settings
    yield lambda fail_rate: demo.configure(0, 0, fail_rate, audit=recorder)
    demo._settings = before


def test_the_demo_handler_records_successes_and_failures(
    queue: Queue, recorder: AuditRecorder, audited_demo: Callable[[float], None]
) -> None:
    created(queue, recorder, "a", 2)
    good, bad = queue.claim(2)
    audited_demo(0.0)
    demo.simulated_work(good)
    audited_demo(1.0)
    with pytest.raises(demo.SimulatedFailure):
        demo.simulated_work(bad)

    report = auditor(queue).audit()
    assert (report.successful_runs, report.failed_runs) == (1, 1)


def test_the_worker_hook_turns_recording_on_with_the_audit_setting(redis_url: str, queue_name: str) -> None:
    before = demo._settings
    try:
        for audit, recording in (("true", True), ("false", False)):
            env = service_env(redis_url, queue_name, AUDIT=audit)
            demo.configure_worker(WorkerSettings.from_env(env))
            assert (demo._settings.audit is not None) is recording
    finally:
        demo._settings = before


def test_the_cleaner_records_lost_leases_and_exports_its_audit(
    redis_url: str, queue_name: str, make_queue: Callable[..., Queue]
) -> None:
    no_retention = {"DONE_MAX_COUNT": 0, "DONE_MAX_AGE_SECONDS": 0}  # an id gone from done is lost
    env = service_env(redis_url, queue_name, AUDIT_INTERVAL=60, LEASE_SECONDS=0.2, **no_retention)
    cleaner = CleanerService(CleanerSettings.from_env(env))
    queue = make_queue(lease_seconds=0.2)
    recorder = AuditRecorder(queue.redis, queue.keys)
    try:
        created(queue, recorder, "a", 3)
        stalled = queue.claim(1)  # its worker stops here; the lease runs out
        recorder.run(stalled[0], succeeded=True)
        wait_until_leases_expire(queue, stalled)
        cleaner.sweep_once()
        assert queue.redis.hgetall(queue.keys.audit_lease_lost) == {"a-1": "1"}
        run_and_ack(queue, recorder, 3)  # a-1 runs again: explained

        cleaner.audit_step()
        sample = cleaner.metrics.registry.get_sample_value
        assert sample("setqueue_audit_created") == 3
        assert sample("setqueue_audit_duplicates") == 1
        for finding in ("lost", "in_two_states", "unexplained_duplicates", "trimmed"):
            assert sample(f"setqueue_audit_{finding}") == 0, finding
        assert (sample("setqueue_audit_last_timestamp_seconds") or 0) > time.time() - 60

        queue.delete("a-2")
        cleaner.audit_step()  # the next audit waits for AUDIT_INTERVAL
        assert sample("setqueue_audit_lost") == 0
        cleaner._next_audit_at = 0
        cleaner.audit_step()
        assert sample("setqueue_audit_lost") == 1
    finally:
        cleaner.close()


def test_without_the_audit_setting_nothing_is_recorded_or_exported(
    redis_url: str, queue_name: str, client: redis.Redis
) -> None:
    env = service_env(redis_url, queue_name, AUDIT="false", CREATE_RATE=0, CREATE_TOTAL=5)
    creator = CreatorService(CreatorSettings.from_env(env))
    cleaner = CleanerService(CleanerSettings.from_env(env))
    try:
        creator.run()
        cleaner.sweep_once()
        cleaner.audit_step()
        assert not client.keys(creator.queue.shards[0].keys.prefix + "audit:*")
        assert cleaner.metrics.registry.get_sample_value("setqueue_audit_lost") is None
    finally:
        creator.close()
        cleaner.close()


def _findings(report: AuditReport) -> dict[str, object]:
    return {k: v for k, v in report.as_dict().items() if k not in ("finished_at", "seconds")}
