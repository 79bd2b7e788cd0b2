"""The queue's operations, each written once, sans-I/O (``setqueue.steps``), over a router.

``QueueCore`` (``setqueue.core``) is one plain queue in one Redis slot (a shard). A *router*
(``setqueue.routing``) says how a queue of one or more cores routes: where a new id goes, which core
holds an id or a lease, the order claims visit cores, and how per-core answers add up. ``Operations``
implements every operation of ``setqueue.JobQueue`` once over any router; ``setqueue.Queue`` runs it
on redis-py's blocking client and ``setqueue.aio.Queue`` on ``redis.asyncio``. The model:
docs/guide.md#the-model."""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import redis

from setqueue.client import TRANSIENT_REDIS_ERRORS, OptionError
from setqueue.core import QueueCore
from setqueue.jobs import (
    AckResult,
    DependencyResult,
    FailOutcome,
    HistoryEntry,
    JobFailed,
    JobInfo,
    Lease,
    RenewOutcome,
    ResultGone,
    SweepResult,
    UnknownJob,
    decode_result,
    encode_result,
    job_options,
    parse_job_options,
    parse_retry_timeouts,
    parse_trace_parent,
)
from setqueue.keys import (
    IF_DEPENDENCY_FAILS,
    MAX_IDS_PER_CALL,
    QueueKeys,
    check_seconds,
    check_whole,
    validate_group,
    validate_job_id,
    validate_priority,
)
from setqueue.layout import check_layout
from setqueue.limits import GROUP_STATES, GroupInfo, GroupLimits, Limits, Rate, parse_concurrency
from setqueue.records import (
    chunks,
    job_info,
    job_items,
    numbered,
    parse_finished,
    parse_history,
    read_job,
    retry_delay,
    split_error,
)
from setqueue.routing import Router
from setqueue.scripts import EnqueueCall, LinkPlan, QueueCommands
from setqueue.steps import AskCluster, Send, Snapshot, Steps, text
from setqueue.tasks import IF_EXISTS, Call, Dependency, FanIn, Sent, Task, check_dependencies, new_job_id, prepare_send
from setqueue.tracing import current_trace_parent

log = logging.getLogger("setqueue.queue")
R = TypeVar("R")

# The sweep stamp's TTL (sweep.lua sets it): seconds_since_sweep counts down from it.
SWEPT_STAMP_MS = 86_400_000

# How long claims pass over a core (shard) whose Redis failed a claim with a transient error: with
# one Cluster node cut off, each claim would otherwise wait out the client's timeouts on it before
# serving the others. A claim that applied but whose reply was lost leaves leases nobody holds: they
# run out, and the sweep hands the jobs on (a lost lease in their history).
UNREACHABLE_SKIP_SECONDS = 5.0


class PartlyAcked(redis.ConnectionError):
    """``ack_many`` of several cores (shards) could not reach one: ``results`` has each lease's
    ``AckResult``, None where its core was not reached. A transient error: resending the whole call
    with the same request id is right too (the reached parts answer as before)."""

    def __init__(self, message: str, results: list[AckResult | None]) -> None:
        super().__init__(message)
        self.results = results


# renew.lua's answer per lease.
_RENEWALS = {1: RenewOutcome.RENEWED, 0: RenewOutcome.LOST, 2: RenewOutcome.CANCELLED}


class DependencySteps(Protocol):
    """The dependency steps ``Operations`` calls (``setqueue.workflows.Workflows``, which the queue
    classes give it: they sit above both, so neither module imports the other)."""

    def plan_links(
        self, by_core: Mapping[QueueCore, Any], dependencies: list[Any], one_call: bool
    ) -> Steps[LinkPlan]: ...
    def enqueue_linked(
        self, core: QueueCore, enqueue: EnqueueCall, plan: LinkPlan, job_ids: list[str], generation: str
    ) -> Steps[int]: ...
    def new_generation(self) -> str: ...
    def register(self, core: QueueCore, job_id: str, generation: str | None = None) -> Steps[None]: ...
    def tell(
        self, core: QueueCore, told: Sequence[str], read: Mapping[str, Sequence[str]] | None = None
    ) -> Steps[None]: ...
    def count(self, released: int, failed: int, queue: str) -> None: ...
    def finish_links(self, core: QueueCore, limit: int) -> Steps[int]: ...
    def forget(self, queue: str, job_ids: Sequence[str]) -> Steps[None]: ...
    def shown(self, core: QueueCore, job_id: str, r: Mapping[str, Any]) -> Steps[dict[str, Any]]: ...
    def dependencies(self, job_id: str) -> Steps[list[DependencyResult]]: ...
    def chain(self, steps: Sequence[Call[Any]], *, id: str | None = None) -> Steps[list[Sent[Any]]]: ...
    def fan_in(
        self, members: Sequence[Call[Any]], then: Call[R], *, if_member_fails: str = "run", id: str | None = None
    ) -> Steps[FanIn[R]]: ...


class Operations:
    """Every operation of ``JobQueue``, sans-I/O, over ``router``. Each public method returns the
    operation's ``Steps``; an executor runs them. ``links``: makes its dependency steps from it
    (``setqueue.workflows.Workflows``); ``reporter``: what leases report progress through; ``linker``:
    what they read their dependencies through."""

    def __init__(
        self,
        router: Router[QueueCore],
        links: Callable[[Operations], DependencySteps],
        reporter: Callable[[Lease, float, str], bool] | None = None,
        linker: Callable[[str], list[DependencyResult]] | None = None,
    ) -> None:
        self.router = router
        self.reporter = reporter
        self.linker = linker
        self.first = router.cores[0]  # whose options a queue of several cores reports as its own
        self._on_a_cluster: bool | None = None
        # Cores (shards, queues) whose Redis failed a claim with a transient error -> until when
        # (monotonic) claims pass them over: see UNREACHABLE_SKIP_SECONDS.
        self._unreachable: dict[QueueCore, float] = {}
        # Whether this sharded queue recorded its shard count (its shards key), so that another queue's
        # dependency on one of its jobs finds the shard: once, at its first enqueue.
        self._shards_recorded = not router.shard_counts()
        self.links = links(self)  # the dependency steps

    def on_a_cluster(self) -> Steps[bool]:
        """Whether the client runs on a Redis Cluster (asked once)."""
        if self._on_a_cluster is None:
            self._on_a_cluster = bool((yield AskCluster()))
        return self._on_a_cluster

    def made_claimable(self, counts: Mapping[QueueCore, int]) -> Steps[None]:
        """After jobs became claimable again in some cores (their scripts woke those cores' workers),
        wake what else the router says, up to wake_cap tokens a list. Outside the scripts: a lost
        wake-up delays a pick-up by at most the idle wait, never loses a job."""
        # Only a router with lists of its own (a sharded queue's, on a Cluster) needs more: no Redis call else.
        if not any(n > 0 and self.router.extra_wake(core, True) is not None for core, n in counts.items()):
            return
        on_a_cluster = yield from self.on_a_cluster()
        pushes: dict[str, int] = defaultdict(int)
        for core, n in counts.items():
            key = self.router.extra_wake(core, on_a_cluster)
            if key is not None and n > 0:
                pushes[key] = min(pushes[key] + n, core.wake_cap)
        yield from self.push_wakes(pushes)

    def push_wakes(self, pushes: Mapping[str, int]) -> Steps[None]:
        """Push ``n`` wake tokens on each wake list ``key`` of ``pushes`` (key -> n), each list kept to
        wake_cap tokens. Out of memory refuses a push: only a hint is lost."""
        for key, n in pushes.items():
            try:
                yield Send(("LPUSH", key, *["1"] * n))
                yield Send(("LTRIM", key, 0, self.first.wake_cap - 1))
            except redis.OutOfMemoryError:
                pass

    def _wake_all(self) -> Steps[None]:
        """After limits changed: wake up to wake_cap idle workers of every core."""
        return self.made_claimable({core: core.wake_cap for core in self.router.cores})

    # -- producers

    def enqueue(
        self,
        ids: Iterable[str] | Mapping[str, Any],
        *,
        delay: float | None = None,
        at: float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        timeout: float | None = None,
        group: str | None = None,
        retry_timeouts: bool | None = None,
        if_exists: str = "ignore",
        depends_on: Iterable[Dependency] | None = None,
        if_dependency_fails: str = "fail",
        request_id: str | None = None,
    ) -> Steps[int]:
        """Add job ids, or a mapping id -> payload, at the back of the line in order; returns how many
        were new (an id the queue knows, in any state but trimmed from done, is not added again).

        ``depends_on``: jobs each of these waits for (docs/guide.md#dependencies): ids of this queue,
        what ``send`` returned, or ``JobRef(queue, id)`` for a job of any queue of the same Redis or
        Cluster. The new jobs wait (state "waiting", never claimed) until all of them ended, then join
        the line (or scheduled, with ``delay``/``at``). ``if_dependency_fails``: "fail" (the default)
        dead-letters a job as soon as one of its dependencies ends other than done (failed, cancelled,
        deleted), naming it; "run" releases it once all ended, however. A dependency already ended
        counts at once. UnknownJob for a dependency no queue knows, with nothing written; a job that
        waits for dependencies is not replaced (``if_exists="replace"`` leaves it).

        A payload is a str (kept as is), bytes (UTF-8 text) or anything JSON can encode (kept as compact
        JSON), at most ``payload_max_bytes``. ``priority`` (-10..10): higher is claimed first.
        ``delay`` (seconds) or ``at`` (Unix seconds), not both, holds the jobs in scheduled until then
        (the past means now). ``max_attempts``, ``timeout`` (seconds, 0 = none) and ``retry_timeouts``
        (a timeout is retried like any failure, or dead-letters the job at once) are the jobs' own,
        overriding the workers'. ``group``: jobs of different groups take turns (job groups,
        docs/guide.md#limits). ``if_exists``: what a known id does: "ignore" (the default) leaves
        its job as it is; "replace", while its job still waits (todos or scheduled), makes it this
        call's (payload, priority, due time, options: debounce, many calls and one run with the last
        arguments), and leaves a running or ended one alone; "rerun" runs an ended job (done, failed,
        cancelled) again as a new job, its history keeping the earlier run, and leaves a waiting or
        running one alone. A replaced job is not counted as new; a rerun is. ``request_id``: the same
        id retries a call whose reply was lost, and returns the first call's count (docs/guide.md,
        "Resends"). Everything is checked before anything is sent: TypeError or ValueError name the
        bad argument, and nothing is written."""
        validate_priority(priority)
        if group is not None:
            validate_group(group)
        if if_exists not in IF_EXISTS:
            raise ValueError(f"if_exists must be one of {', '.join(IF_EXISTS)}, got {if_exists!r}")
        if delay is not None and at is not None:
            raise ValueError("give delay or at, not both")
        if if_dependency_fails not in IF_DEPENDENCY_FAILS:
            choices = ", ".join(IF_DEPENDENCY_FAILS)
            raise ValueError(f"if_dependency_fails must be one of {choices}, got {if_dependency_fails!r}")
        dependencies = None if depends_on is None else list(depends_on)
        if dependencies is not None:
            check_dependencies(dependencies)
        delay_ms = 0 if delay is None else round(check_seconds("delay", delay) * 1000)
        at_ms = None if at is None else round(check_seconds("at", at) * 1000)
        own = job_options(max_attempts, timeout, current_trace_parent(), retry_timeouts)
        by_core: dict[QueueCore, list[tuple[str, str | None]]] = defaultdict(list)
        for item in job_items(ids, self.first.payload_max_bytes):
            by_core[self.router.home(item[0])].append(item)
        with_payloads = isinstance(ids, Mapping)
        plan = None  # each dependency known, or nothing is written (checked there, or by the call)
        if dependencies:
            plan = yield from self.links.plan_links(by_core, dependencies, one_call=if_exists == "ignore")
        if not self._shards_recorded:
            for name, shards in self.router.shard_counts():
                yield from self.check_shards(name, shards, record=True)
            self._shards_recorded = True
        added: dict[QueueCore, int] = defaultdict(int)
        for core, items in by_core.items():
            core_request = self.router.part(request_id, core)
            for number, chunk in enumerate(chunks(items)):
                call_request = numbered(core_request, number)
                # With links, the call's request id is the generation of its links (and names its staged
                # list, if staged: the one each new job of the chunk registers); "" without.
                generation = "" if plan is None else call_request or self.links.new_generation()
                enqueue_call = functools.partial(
                    core.commands.enqueue,
                    chunk,
                    with_payloads=with_payloads,
                    request_ttl_ms=core.request_ttl_ms,
                    wake_cap=core.wake_cap,
                    delay_ms=delay_ms,
                    at_ms=at_ms,
                    priority=priority,
                    job_options=own,
                    group=group or "",
                    if_exists=if_exists,
                    dependencies=None if plan is None else (len(plan.links), if_dependency_fails),
                    request_id=generation or call_request,
                )
                if plan is None:
                    added[core] += (yield from enqueue_call()).added
                else:
                    job_ids = [job_id for job_id, _payload in chunk]
                    added[core] += yield from self.links.enqueue_linked(core, enqueue_call, plan, job_ids, generation)
        if plan is not None:
            return sum(added.values())  # released jobs woke their queue's workers
        # As enqueue.lua: jobs due later wake one worker.
        yield from self.made_claimable(
            {core: n if delay is None and at is None else min(n, 1) for core, n in added.items()}
        )
        return sum(added.values())

    def send(self, task: Task[Any, Any] | str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Steps[Sent[Any]]:
        """Enqueue a call of ``task`` (a ``Task``, or a task's name) with ``args`` and ``kwargs`` as one
        job whose payload is the task envelope (``setqueue.tasks``). Its job options are the send's
        (``task.options(...)``), else the task's, else the queue's and worker's. Returns the job's id
        (generated, sortable by time, unless given) and whether it was created (False: the id was known
        and nothing changed). TypeError naming the task and the argument for a call that does not bind
        (a ``Task``) or a value JSON cannot carry; ValueError for a bad option or a payload over
        payload_max_bytes; nothing is written then."""
        name, options, payload = prepare_send(task, args, kwargs)
        job_id = options.id or new_job_id()
        added = yield from self.enqueue(
            {job_id: payload},
            delay=options.delay,
            at=options.at,
            priority=options.priority or 0,
            max_attempts=options.max_attempts,
            timeout=options.timeout,
            group=options.group,
            retry_timeouts=options.retry_timeouts,
            if_exists=options.if_exists,
            depends_on=options.depends_on,
            if_dependency_fails=options.if_dependency_fails or "fail",
        )
        return Sent(job_id, added == 1, name, self.router.queue_name(self.router.home(job_id)))

    def dependencies(self, job_id: str) -> Steps[list[DependencyResult]]:
        """``Workflows.dependencies``: the job's dependencies, how each ended and what it returned."""
        return (yield from self.links.dependencies(job_id))

    def chain(self, steps: Sequence[Call[Any]], *, id: str | None = None) -> Steps[list[Sent[Any]]]:
        """``Workflows.chain``: send ``steps`` as a chain, each waiting for the one before."""
        return (yield from self.links.chain(steps, id=id))

    def fan_in(
        self, members: Sequence[Call[Any]], then: Call[R], *, if_member_fails: str = "run", id: str | None = None
    ) -> Steps[FanIn[R]]:
        """``Workflows.fan_in``: send ``members``, then ``then``, which waits for all of them."""
        return (yield from self.links.fan_in(members, then, if_member_fails=if_member_fails, id=id))

    # -- workers

    def _passed_over(self, core: QueueCore) -> bool:
        """Whether this call passes ``core`` over: it failed with a transient error within
        UNREACHABLE_SKIP_SECONDS, and there are other cores to serve. Once that time is up one call
        tries it again (the probe) while the others go on passing it over until it answers."""
        until = self._unreachable.get(core)
        if until is None or len(self.router.cores) == 1:
            return False
        now = time.monotonic()
        if until > now:
            return True
        self._unreachable[core] = now + UNREACHABLE_SKIP_SECONDS  # this call probes; the others skip it
        return False

    def _reached(self, core: QueueCore) -> None:
        self._unreachable.pop(core, None)

    def _unreached(self, core: QueueCore) -> None:
        if len(self.router.cores) > 1:
            self._unreachable[core] = time.monotonic() + UNREACHABLE_SKIP_SECONDS

    def claim(self, count: int = 1, *, request_id: str | None = None) -> Steps[list[Lease]]:
        """Claim up to ``count`` jobs from the front of the line (priority, then first in first out), one
        script call per core visited; one lease (one lock) covers a call's jobs until each ends. Due
        scheduled jobs join the line first. The same ``request_id`` retries a call whose reply was lost
        and returns the same leases. Raises ValueError for ``count`` < 1."""
        if count < 1:
            raise ValueError("count must be at least 1")
        leases: list[Lease] = []
        order = list(self.router.claim_order(request_id))
        reachable = [(core, part) for core, part in order if not self._passed_over(core)]
        if not reachable:
            raise redis.ConnectionError("every core of the queue is unreachable (passed over for now)")
        failed: Exception | None = None
        for core, part in reachable:
            try:
                leases += yield from self._claim_core(core, count - len(leases), part)
            except TRANSIENT_REDIS_ERRORS as exc:
                if len(order) == 1:
                    raise
                self._unreached(core)  # one unreachable core (a cut Cluster node) must not hold up the others
                failed = exc
                continue
            self._reached(core)
            if len(leases) == count:
                break
        if failed is not None and not leases:
            raise failed
        return leases

    def _claim_core(self, core: QueueCore, count: int, request_id: str | None) -> Steps[list[Lease]]:
        queue = self.router.queue_name(core)

        def make(  # noqa: PLR0917 - the fields of one job of claim.lua's reply, in its order
            job_id: str,
            token: str,
            attempt: int,
            payload: str | None,
            enqueued_at: float | None,
            claimed_at: float,
            priority: int,
            own: str | None,
        ) -> Lease:
            max_attempts, timeout = parse_job_options(own)
            return Lease(
                job_id,
                token,
                attempt,
                payload,
                enqueued_at,
                claimed_at,
                priority,
                queue,
                max_attempts,
                timeout,
                trace_parent=parse_trace_parent(own),
                retry_timeouts=parse_retry_timeouts(own),
                reporter=self.reporter,
                linker=self.linker,
            )

        leases, header = yield from core.commands.claim(
            min(count, MAX_IDS_PER_CALL),
            make,
            request_ttl_ms=core.request_ttl_ms,
            lease_ms=core.lease_ms,
            promote=MAX_IDS_PER_CALL,
            wake_cap=core.wake_cap,
            token=request_id,
        )
        core.next_due = None if header.next_at is None else max(0.0, header.next_at - header.now)
        core.next_due_seen = time.monotonic()
        core.limited = header.limited
        if header.held is not None and core.on_held is not None:
            core.on_held(core.name, header.held)
        return leases

    def due_in(self) -> float | None:
        """Seconds until more could be claimed in any core, as their last short claims saw it (None: not known)."""
        due = [d for core in self.router.cores if (d := core.due_in()) is not None]
        return min(due) if due else None

    def wake_keys(self) -> Steps[list[str]]:
        """The lists an idle worker blocks on (BLPOP) to be woken by new work."""
        on_a_cluster = yield from self.on_a_cluster()
        return self.router.wake_keys(on_a_cluster)

    def _by_core(self, leases: Sequence[Lease]) -> dict[QueueCore, list[int]]:
        """The positions in ``leases`` of each core's leases."""
        positions: dict[QueueCore, list[int]] = defaultdict(list)
        for n, lease in enumerate(leases):
            positions[self.router.of_lease(lease)].append(n)
        return positions

    def renew(self, lease: Lease) -> Steps[bool]:
        """Extend the lease while its claim still owns the job; a lost lock is never re-created."""
        return (yield from self.renew_outcomes([lease]))[0] is RenewOutcome.RENEWED

    def renew_many(self, leases: Sequence[Lease]) -> Steps[list[bool]]:
        """``renew`` for each lease, in one script call per core (and per MAX_IDS_PER_CALL)."""
        return [outcome is RenewOutcome.RENEWED for outcome in (yield from self.renew_outcomes(leases))]

    def renew_outcomes(self, leases: Sequence[Lease]) -> Steps[list[RenewOutcome]]:
        """As ``renew_many``, telling a lost lease (LOST) from a cancelled job (CANCELLED)."""
        outcomes: list[RenewOutcome] = [RenewOutcome.LOST] * len(leases)
        failed: Exception | None = None
        for core, positions in self._by_core(leases).items():
            if self._passed_over(core):
                failed = failed or redis.ConnectionError(f"queue {core.name}: unreachable, passed over for now")
                continue
            try:
                for chunk in chunks(positions):
                    replies = yield from core.commands.renew([leases[n] for n in chunk], lease_ms=core.lease_ms)
                    for n, reply in zip(chunk, replies, strict=True):
                        outcomes[n] = _RENEWALS[reply]
                self._reached(core)
            except TRANSIENT_REDIS_ERRORS as exc:  # the other cores' leases are renewed all the same
                self._unreached(core)
                failed = failed or exc
        if failed is not None:
            raise failed
        return outcomes

    def ack(self, lease: Lease, result: Any = None) -> Steps[bool]:
        """Move the job to done keeping ``result`` (see ``ack_many``); False (nothing changed) if stale."""
        return (yield from self.ack_many([lease], results=[result]))[0].acked

    def ack_many(
        self, leases: Sequence[Lease], *, results: Sequence[Any] | None = None, request_id: str | None = None
    ) -> Steps[list[AckResult]]:
        """Ack a batch: one script call per core and per MAX_IDS_PER_CALL leases. ``results`` (None:
        nothing), what the handlers returned, are kept for ``result()`` for result_ttl_seconds: each must
        be JSON, or bytes, of at most result_max_bytes (TypeError/ValueError, all checked before anything
        is sent). ``request_id`` retries a call whose reply was lost. Out of memory, the jobs are acked
        without their results (``result()`` then raises ResultGone). Returns per lease whether it was
        acked (False: stale, nothing changed) and how long its job waited in the queue. When a core
        (shard) of several cannot be reached, raises PartlyAcked (a ConnectionError) with what the
        others said."""
        given = list(results) if results is not None else [None] * len(leases)
        if len(given) != len(leases):
            raise ValueError(f"{len(given)} results for {len(leases)} leases")
        by_core = self._by_core(leases)  # each lease routed once
        encoded: list[str | None] = [None] * len(leases)
        for core, positions in by_core.items():  # every result checked before anything is sent
            if core.result_ttl_seconds > 0:
                for n in positions:
                    encoded[n] = encode_result(given[n], core.result_max_bytes)
        out: list[AckResult | None] = [None] * len(leases)
        failed: Exception | None = None
        for core, positions in by_core.items():
            if self._passed_over(core):
                failed = failed or redis.ConnectionError(f"queue {core.name}: unreachable, passed over for now")
                continue
            try:
                core_request = self.router.part(request_id, core)
                for number, chunk in enumerate(chunks(positions)):
                    reply = yield from core.commands.ack(
                        [leases[n] for n in chunk],
                        [encoded[n] for n in chunk],
                        request_ttl_ms=core.request_ttl_ms,
                        done_max_count=core.done_max_count,
                        payload_keep_bytes=core.payload_keep_bytes,
                        result_ttl_ms=round(core.result_ttl_seconds * 1000),
                        wake_cap=core.wake_cap,
                        request_id=numbered(core_request, number),
                    )
                    now, acked, dropped = reply.now, reply.acked, reply.dropped
                    self.links.count(reply.released, reply.failed, core.name)
                    if dropped:
                        lost = sum(1 for n, ok in zip(chunk, acked, strict=True) if ok and encoded[n])
                        log.warning(
                            "queue %s: Redis is full (out of memory): %d jobs done without keeping what their "
                            "handlers returned (result() says it is gone)",
                            core.name,
                            lost,
                        )
                    for n, ok in zip(chunk, acked, strict=True):
                        enqueued_at = leases[n].enqueued_at
                        waited = None if not ok or enqueued_at is None else max(0.0, now - enqueued_at)
                        out[n] = AckResult(ok, waited)
                    yield from self.links.tell(core, reply.told, reply.read)
                self._reached(core)
            except TRANSIENT_REDIS_ERRORS as exc:  # the other cores' jobs are acked all the same
                self._unreached(core)
                failed = failed or exc
        if failed is not None:
            if len(self.router.cores) > 1:  # the caller may ack the other cores' jobs and come back for these
                raise PartlyAcked(str(failed), out) from failed
            raise failed
        return [result or AckResult(False, None) for result in out]

    def fail(
        self,
        lease: Lease,
        reason: str = "",
        *,
        retry: bool = True,
        delay: float | None = None,
        request_id: str | None = None,
    ) -> Steps[FailOutcome]:
        """Give up on this attempt: retried (``RETRIED``) after ``delay`` seconds or ``backoff_delay``
        while attempts remain, else (or with ``retry=False``) dead-lettered to failed (``DEAD``) with
        ``reason``. A stale or already failed lease changes nothing: ``STALE``. ``request_id`` as for
        ``ack_many``. Raises ValueError for a negative or infinite delay."""
        seconds = self.backoff_delay(lease.attempt) if delay is None else check_seconds("delay", delay)
        mode = "retry" if retry else "dead"
        return (yield from self._end_attempts([(lease, mode, reason, round(seconds * 1000))], request_id))[0]

    def backoff_delay(self, attempt: int) -> float:
        """The retry delay after ``attempt`` (``setqueue.records.retry_delay``)."""
        return retry_delay(attempt, self.first.retry_backoff_seconds, self.first.retry_backoff_max_seconds)

    def release(self, leases: Sequence[Lease], *, request_id: str | None = None) -> Steps[list[FailOutcome]]:
        """Hand jobs back unprocessed to their old place in the line, no attempt used (a worker shutting
        down). Per lease RELEASED, or STALE. ``request_id`` as for ``ack_many``."""
        return (yield from self._end_attempts([(lease, "release", "", 0) for lease in leases], request_id))

    def _end_attempts(
        self, items: Sequence[tuple[Lease, str, str, int]], request_id: str | None
    ) -> Steps[list[FailOutcome]]:
        """fail.lua for each (lease, mode, reason, delay ms), then wake for the jobs made claimable."""
        outcomes: list[FailOutcome] = [FailOutcome.STALE] * len(items)
        claimable: dict[QueueCore, int] = defaultdict(int)
        for core, positions in self._by_core([item[0] for item in items]).items():
            core_request = self.router.part(request_id, core)
            for number, chunk in enumerate(chunks(positions)):
                replied, told = yield from core.commands.fail(
                    [items[n] for n in chunk],
                    request_ttl_ms=core.request_ttl_ms,
                    max_attempts=core.max_attempts,
                    wake_cap=core.wake_cap,
                    request_id=numbered(core_request, number),
                )
                for n, reply in zip(chunk, replied, strict=True):
                    outcomes[n] = FailOutcome(reply)
                    claimable[core] += outcomes[n] in (FailOutcome.RETRIED, FailOutcome.RELEASED)
                yield from self.links.tell(core, told)
        yield from self.made_claimable(claimable)
        return outcomes

    # -- the cleaner

    def sweep(self, limit: int = 1000) -> Steps[SweepResult]:
        """In each core, requeue (or dead-letter, past max attempts) in_progress ids whose lock is gone,
        examining up to ``limit`` ids from where the last call's ZSCAN stopped; also applies done's
        age retention. Returns the ids requeued, dead-lettered, and how many were trimmed from done."""
        requeued: list[str] = []
        dead: list[str] = []
        trimmed = 0
        claimable: dict[QueueCore, int] = {}
        for core in self.router.cores:
            core_requeued, core_dead, core_trimmed = yield from self._sweep_core(core, limit)
            requeued += core_requeued
            dead += core_dead
            trimmed += core_trimmed
            claimable[core] = len(core_requeued)
        yield from self.made_claimable(claimable)
        return SweepResult(requeued, dead, trimmed)

    def _sweep_core(self, core: QueueCore, limit: int) -> Steps[tuple[list[str], list[str], int]]:
        k = core.keys
        requeued: list[str] = []
        dead: list[str] = []
        trimmed = 0
        examined = 0
        trim_pending = True  # once a call: the age retention of done
        while True:
            page_size = max(1, min(MAX_IDS_PER_CALL, limit - examined))
            core.sweep_cursor, page = yield Send(("ZSCAN", k.in_progress, core.sweep_cursor, "COUNT", page_size))
            candidates = [text(member) for member, _rank in page]
            if candidates or trim_pending:
                # Owners as read: the script checks they still hold.
                read = (yield Send(("HMGET", k.owners, *candidates))) if candidates else []
                owners = [None if o is None else text(o) for o in read]
                page_requeued, page_dead, page_trimmed, _promoted, told = yield from core.commands.sweep(
                    candidates,
                    owners,
                    request_ttl_ms=core.request_ttl_ms,
                    max_attempts=core.max_attempts,
                    wake_cap=core.wake_cap,
                    done_max_age_ms=round(core.done_max_age_seconds * 1000) if trim_pending else 0,
                    trim_limit=MAX_IDS_PER_CALL,
                )
                yield from self.links.tell(core, told)
                requeued += page_requeued
                dead += page_dead
                trimmed += page_trimmed
                if trim_pending:  # once a call too: registrations and releases their makers left
                    yield from self.links.finish_links(core, MAX_IDS_PER_CALL)
                trim_pending = False
            examined += len(candidates)
            if core.sweep_cursor == 0 or examined >= limit:
                return requeued, dead, trimmed

    # -- operators

    def stats(self) -> Steps[dict[str, Any]]:
        """Sizes of the six states (todos, in_progress, done, failed, scheduled, cancelled), results
        kept, limits figures, todos per priority and the oldest unfinished job's age in seconds;
        each core's in one snapshot. A sharded queue adds each shard's under ``"shards"``, several
        queues each queue's under ``"queues"``."""
        each: list[dict[str, Any]] = []
        for core in self.router.cores:
            sizes, age_ms, by_priority = yield from core.commands.stats()
            each.append({**sizes, "oldest_pending_age_seconds": age_ms / 1000, "todos_by_priority": by_priority})
        return self.router.shape_stats(each)

    def inspect(self, job_id: str) -> Steps[JobInfo | None]:
        """Everything the queue knows about one id (its state, payload, attempts, error, times, lock,
        history, progress, result), read in one snapshot; None if no core knows it. ValueError for a
        malformed id."""
        validate_job_id(job_id)
        for core in self.router.holders(job_id):
            found = yield from self._inspect_core(core, job_id)
            if found is not None:
                return found
        return None

    def _inspect_core(self, core: QueueCore, job_id: str) -> Steps[JobInfo | None]:
        r = yield from read_job(core.keys, job_id, core.commands.drain)
        token = None if r["owner"] is None else text(r["owner"])
        ttl_ms = (yield Send(("PTTL", core.keys.lock(token)))) if token is not None else -2
        info = job_info(job_id, self.router.queue_name(core), r, ttl_ms)
        if info is None:
            return None
        shown = yield from self.links.shown(core, job_id, r)
        return dataclasses.replace(info, **shown) if shown else info

    def holder(self, job_id: str) -> Steps[QueueCore | None]:
        """The core that knows ``job_id``, or None (several candidates: the first whose inspect finds it)."""
        holders = self.router.holders(validate_job_id(job_id))
        if len(holders) == 1:
            return holders[0]
        for core in holders:
            if (yield from self._inspect_core(core, job_id)) is not None:
                return core
        return None

    def history(self, job_id: str) -> Steps[list[HistoryEntry]]:
        """The job's off-happy-path transitions (retries, lost leases, sweeps, cancels...), oldest first
        (the last ten); empty for an unknown id."""
        core = yield from self.holder(job_id)
        if core is None:
            return []
        return list(parse_history((yield Send(("HGET", core.keys.history, job_id)))))

    def progress(self, lease: Lease, fraction: float, message: str = "") -> Steps[bool]:
        """Keep the handler's progress report (``fraction`` 0..1, a short message); False when the lease
        no longer owns the job. A full Redis drops the report instead of raising."""
        core = self.router.of_lease(lease)
        try:
            return (yield from core.commands.progress(lease, fraction, message))
        except redis.OutOfMemoryError:
            return (yield from self._owner(core, lease.id)) == lease.token

    def _owner(self, core: QueueCore, job_id: str) -> Steps[str | None]:
        """The token of the claim that owns ``job_id``, or None."""
        owner = yield Send(("HGET", core.keys.owners, validate_job_id(job_id)))
        return None if owner is None else text(owner)

    def cancel(self, job_id: str) -> Steps[str | None]:
        """Cancel a job (docs/guide.md#results-cancel-history-progress): a waiting or scheduled one moves to
        cancelled at once; a running one moves to cancelled too, its lock is dropped (its ack will be
        refused) and its worker is told on the cancel channel, so the handler is interrupted. Returns
        the state it was in (an ended job's, unchanged), or None if unknown. Idempotent."""
        was, _core = yield from self._end_job(job_id, QueueCommands.cancel)
        return was

    def delete(self, job_id: str) -> Steps[str | None]:
        """Remove a job and all it left in Redis, whatever its state (a running job's ack is then refused);
        returns the state it was in, or None if unknown. The dependencies or dependents of a job with
        more than LINKS_PER_CALL of either go a page a call before it returns."""
        was, core = yield from self._end_job(job_id, QueueCommands.delete)
        if core is not None:
            yield from self.links.forget(core.name, [job_id])
        return was

    def _end_job(
        self, job_id: str, command: Callable[..., Steps[tuple[str | None, bool]]]
    ) -> Steps[tuple[str | None, QueueCore | None]]:
        """Run ``command`` (cancel.lua or delete.lua) in each core that may hold ``job_id`` until one
        did: the state the job was in and that core, or (None, None)."""
        validate_job_id(job_id)
        for core in self.router.holders(job_id):
            token = yield from self._owner(core, job_id)
            was, told = yield from command(
                core.commands, job_id, token, request_ttl_ms=core.request_ttl_ms, wake_cap=core.wake_cap
            )
            if told:
                yield from self.links.tell(core, [job_id])
            if was is not None:
                return was, core
        return None, None

    def requeue_failed(self, ids: Iterable[str] | None = None, *, limit: int = 1000) -> Steps[int]:
        """Move dead-lettered jobs back to todos as new attempts: the ids given (each in the core that
        holds it), or, with None, every core's up to ``limit`` each. Returns how many moved.
        ValueError for ``limit`` < 1 or a malformed id."""
        by_core: dict[QueueCore, list[str]] = defaultdict(list)
        if ids is None:
            check_whole("limit", limit, 1)
            for core in self.router.cores:
                by_core[core] = yield from self._failed_ids(core, limit)
        else:
            for job_id in ids:
                for core in self.router.holders(validate_job_id(job_id)):
                    by_core[core].append(job_id)
        moved: dict[QueueCore, int] = defaultdict(int)
        for core, wanted in by_core.items():
            for chunk in chunks(wanted):
                moved[core] += yield from core.commands.requeue_failed(
                    chunk, request_ttl_ms=core.request_ttl_ms, wake_cap=core.wake_cap
                )
        yield from self.made_claimable(moved)
        return sum(moved.values())

    def _failed_ids(self, core: QueueCore, limit: int) -> Steps[list[str]]:
        """Up to ``limit`` ids of ``core``'s failed set (SSCAN pages)."""
        wanted: list[str] = []
        cursor = 0
        while True:
            cursor, page = yield Send(("SSCAN", core.keys.failed, cursor, "COUNT", MAX_IDS_PER_CALL))
            for job_id in page:
                wanted.append(text(job_id))
                if len(wanted) >= limit:
                    return wanted
            if cursor == 0:
                return wanted

    # -- results: what the waiting loops of the two clients share

    def holders_of(self, job_ids: Iterable[str]) -> Steps[dict[QueueCore, list[str]]]:
        """Each core with the ids of ``job_ids`` it holds; UnknownJob for an id no core knows."""
        by_core: dict[QueueCore, list[str]] = defaultdict(list)
        for job_id in job_ids:
            core = yield from self.holder(job_id)
            if core is None:
                raise UnknownJob(f"job {job_id!r} is not in queue {self.router.name!r}")
            by_core[core].append(job_id)
        return by_core

    def look(self, core: QueueCore, job_ids: Sequence[str], ended: dict[str, Any]) -> Steps[list[str]]:
        """One snapshot: each ended job's value into ``ended``; returns the ids still waiting or running.
        Raises as ``result``: JobFailed (failed or cancelled), ResultGone (the handler returned a value
        that is no longer kept), UnknownJob. One snapshot, or an ack between a job's done and pending
        reads would make it look unknown."""
        k = core.keys
        reads = ("in_done", "result", "finished", "in_failed", "in_cancelled", "error", "pending", "due", "waiting")
        commands: list[tuple[Any, ...]] = []
        for job_id in job_ids:
            commands += [
                ("SISMEMBER", k.done, job_id),
                ("HGET", k.results, job_id),
                ("HGET", k.finished, job_id),
                ("SISMEMBER", k.failed, job_id),
                ("SISMEMBER", k.cancelled, job_id),
                ("HGET", k.errors, job_id),
                ("ZSCORE", k.pending, job_id),
                ("ZSCORE", k.scheduled, job_id),
                ("ZSCORE", k.waiting, job_id),
            ]
        replies = yield Snapshot(tuple(commands))
        waiting: list[str] = []
        for n, job_id in enumerate(job_ids):
            r = dict(zip(reads, replies[n * len(reads) : (n + 1) * len(reads)], strict=True))
            if r["in_done"]:
                if r["result"] is not None:
                    ended[job_id] = decode_result(text(r["result"]))
                elif parse_finished(r["finished"])[3]:  # it returned one
                    why = "past its TTL, or Redis was full as it ended"
                    raise ResultGone(f"job {job_id!r} is done, but its result is not kept ({why})")
                else:
                    ended[job_id] = None
            elif r["in_failed"] or r["in_cancelled"]:
                reason, traceback = split_error(r["error"])
                raise JobFailed(job_id, "failed" if r["in_failed"] else "cancelled", reason or None, traceback)
            elif r["pending"] is None and r["due"] is None and r["waiting"] is None:
                raise UnknownJob(f"job {job_id!r} is not in queue {self.router.name!r}")
            else:
                waiting.append(job_id)
        return waiting

    # -- limits

    def pause(self) -> Steps[bool]:
        """Stop jobs from starting, in every core: once this returns no claim takes one. Running jobs,
        enqueues, due jobs and the cleaner go on. Whether any was running."""
        paused = False
        for core in self.router.cores:
            paused = (yield from core.commands.set_limits("pause", "", wake_cap=core.wake_cap)) or paused
        return paused

    def resume(self) -> Steps[bool]:
        """Let jobs start again, waking idle workers. Whether any was paused."""
        resumed = False
        for core in self.router.cores:
            resumed = (yield from core.commands.set_limits("resume", "", wake_cap=core.wake_cap)) or resumed
        yield from self._wake_all()
        return resumed

    def set_rate(self, rate: Rate | str | None, *, burst: int | None = None) -> Steps[None]:
        """At most ``rate`` job starts across all workers (a ``Rate``, or a spec such as ``"100/s"`` or
        ``"5/200ms"``; None: no limit), with up to ``burst`` at once (None: a tenth of the count, rounded
        up, at least 1; see ``Rate.parse``; docs/guide.md#limits). In force from the
        next claim. A sharded queue enforces 1/N in each shard, so the shares add up while every shard
        has work. ValueError for a malformed rate or burst."""
        shares = self.router.rate_shares(Rate.given(rate, burst))
        for core, share in shares:
            spec = "" if share is None else share.spec()
            yield from core.commands.set_limits("rate", spec, wake_cap=core.wake_cap)
        yield from self._wake_all()

    def set_group_limits(
        self,
        group: str | None = None,
        *,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        burst: int | None = None,
    ) -> Steps[None]:
        """Limits of job group ``group`` (None: every group's default): at most ``concurrency`` of its jobs
        in progress and ``rate`` starts (None: no limit). Own limits replace the default wholly; both
        None restores the default. A sharded queue enforces the whole concurrency and 1/N of the rate in
        each shard. ValueError for a malformed group, concurrency or rate."""
        if group is not None:
            validate_group(group)
        whole = None if concurrency is None else parse_concurrency(concurrency)
        for core, share in self.router.rate_shares(Rate.given(rate, burst)):
            limits = GroupLimits(whole, share)
            if group is not None:
                spec = "" if limits == GroupLimits() else limits.spec()
                yield from core.commands.set_limits(f"group:{group}", spec, wake_cap=core.wake_cap)
                continue
            concurrency_spec = str(limits.concurrency or "")
            yield from core.commands.set_limits("group_concurrency", concurrency_spec, wake_cap=core.wake_cap)
            rate_spec = limits.rate.spec() if limits.rate else ""
            yield from core.commands.set_limits("group_rate", rate_spec, wake_cap=core.wake_cap)
        yield from self._wake_all()

    def limits(self) -> Steps[Limits]:
        """The limits in force: paused, the rate, the job groups' default limits and each group's own
        (a sharded queue's rates scaled back to the whole queue's; several queues: the first's)."""
        k = self.first.keys
        limits, own = yield Snapshot(
            (("HMGET", k.limits, "paused", "rate", "group_concurrency", "group_rate"), ("HGETALL", k.group_limits))
        )
        paused, rate, concurrency, group_rate = limits
        first = Limits(
            paused=paused is not None,
            rate=None if rate is None else Rate.from_spec(text(rate)),
            group_default=GroupLimits(
                None if concurrency is None else int(concurrency),
                None if group_rate is None else Rate.from_spec(text(group_rate)),
            ),
            groups={text(name): GroupLimits.from_spec(text(spec)) for name, spec in own.items()},
        )
        return self.router.whole_limits(first)

    def groups(self, most: int = 100) -> Steps[list[GroupInfo]]:
        """Job groups with jobs waiting or running (at most ``most``, turn-takers first), with their state
        and limits; a group in several cores once, its counts summed and its liveliest state.
        ValueError for ``most`` < 1."""
        if most < 1:
            raise ValueError("most must be at least 1")
        limits = yield from self.limits()
        merged: dict[str, GroupInfo] = {}
        for core in self.router.cores:
            _total, rows = yield from core.commands.list_groups(min(most, 10_000))
            for name, waiting, running, state in rows:
                info = GroupInfo(name, waiting, running, state, limits.groups.get(name, limits.group_default))
                seen = merged.get(name)
                if seen is not None:
                    info = dataclasses.replace(
                        seen,
                        waiting=seen.waiting + waiting,
                        running=seen.running + running,
                        state=min(seen.state, state, key=GROUP_STATES.index),
                    )
                merged[name] = info
        return list(merged.values())[:most]

    def ping(self, *, record: bool = False) -> Steps[bool]:
        """Redis answers for every core, each was written with this client's key-layout version (else
        LayoutVersionError; never recorded here: a queue's first other operation does), and each queue
        was opened with the shard count Redis records for it (else OptionError naming ``shards``).
        ``record``: write a sharded queue's count if none is."""
        answered = True
        yield from check_layout([core.name for core in self.router.cores], record=False)
        for core in self.router.cores:
            answered = bool((yield Send(("PING",)))) and answered
            stored = yield Send(("GET", core.keys.shards))
            if stored is not None and int(stored) != 1:
                problem = f"queue {core.name} has {int(stored)} shards, not 1: open it with that many"
                raise OptionError("shards", problem)
        for name, shards in self.router.shard_counts():
            yield from self.check_shards(name, shards, record=record)
        return answered

    def check_shards(self, name: str, shards: int, *, record: bool) -> Steps[None]:
        """OptionError (``shards``) for a queue ``name`` opened with ``shards`` shards while Redis records
        another count, or while it holds jobs unsharded: ids would change place. ``record``: write the
        count if none is."""
        plain = QueueKeys(name)
        stored = yield Send(("GET", plain.shards))
        if stored is None:
            if (yield Send(("EXISTS", plain.todos, plain.in_progress, plain.scheduled))):
                raise OptionError("shards", f"queue {name} holds jobs unsharded: drain it (or use a new name) first")
            if not record:
                return
            yield Send(("SET", plain.shards, shards, "NX"))
            stored = yield Send(("GET", plain.shards))
        if int(stored or 0) != shards:
            raise OptionError(
                "shards",
                f"queue {name} has {stored} shards, not {shards}: drain it (or use a new name) before changing that",
            )

    # -- one core alone (a plain queue: setqueue.interface.Shard)

    def seconds_since_sweep(self, core: QueueCore) -> Steps[float | None]:
        """Seconds since anyone swept ``core`` (Redis clock; None: not within a day)."""
        ttl_ms = yield Send(("PTTL", core.keys.swept))
        return None if ttl_ms < 0 else (SWEPT_STAMP_MS - ttl_ms) / 1000

    def create_periodic_runs(
        self, core: QueueCore, runs: Sequence[tuple[str, int, str, str | None]]
    ) -> Steps[tuple[list[str], list[str]]]:
        """For each (schedule name, slot ms, run id, payload), enqueue the run in ``core`` unless one of
        that slot or later exists; returns the names created and those seen first (slot recorded, no run)."""
        created: list[str] = []
        first_seen: list[str] = []
        for chunk in chunks(runs):
            made, first = yield from core.commands.periodic(
                chunk, request_ttl_ms=core.request_ttl_ms, wake_cap=core.wake_cap
            )
            created += made
            first_seen += first
        return created, first_seen

    def periodic_slots(self, core: QueueCore) -> Steps[dict[str, float]]:
        """Schedule name -> its latest slot (Unix seconds), in ``core``."""
        slots = yield Send(("HGETALL", core.keys.periodic))
        return {text(name): int(ms) / 1000 for name, ms in slots.items()}
