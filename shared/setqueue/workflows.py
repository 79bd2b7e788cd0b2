"""The dependency steps of the queue's operations (docs/reference.md#dependencies), sans-I/O like
``setqueue.operations``, whose ``Operations`` holds one ``Workflows`` and calls it: naming and checking
dependencies, registering a waiting job with them, telling an ended job's dependents, across queues,
shards and Cluster slots (each step a script in one slot; lua/includes/links.lua), and the chain and
fan-in helpers over ``send``."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from setqueue.client import TRANSIENT_REDIS_ERRORS
from setqueue.core import QueueCore
from setqueue.jobs import DependencyResult, Link, decode_result, unknown_dependency
from setqueue.keys import (
    IF_DEPENDENCY_FAILS,
    LINKS_PER_CALL,
    MAX_IDS_PER_CALL,
    QueueKeys,
    queue_of_shard,
    shard_name,
    shard_of,
    validate_job_id,
)
from setqueue.records import chunks, parse_deps_header, progress_of, split_error, split_link, unique_links
from setqueue.routing import Router
from setqueue.scripts import EnqueueCall, LinkPlan, QueueCommands, new_request_id
from setqueue.steps import Send, Snapshot, Steps, text
from setqueue.tasks import Call, Dependency, FanIn, Sent, Task, new_job_id

log = logging.getLogger("setqueue.queue")
R = TypeVar("R")

# How old (seconds, by the Redis clock) a registering or releasing entry must be before a sweep
# finishes it: whoever made it (the enqueuer, the worker that ended a dependency) does so at once,
# so an older one was left by a process that died or lost Redis midway. Finishing twice is harmless
# (both steps are idempotent); this only keeps the cleaner from doing live work twice. With the
# cleaner's sweep interval it bounds the delay a crash adds to a release.
LINK_GRACE_SECONDS = 10.0
# The most dependency list entries one RPUSH stages for an enqueue (setqueue.keys.QueueKeys.staging),
# and how long a staging list an enqueuer left behind lives: a sweep finishes its registrations well
# within it (LINK_GRACE_SECONDS after the enqueuer died, then the cleaner's interval).
STAGING_CHUNK = 1000
STAGING_TTL_MS = 86_400_000


class Host(Protocol):
    """What the dependency steps use of the operations that hold them (``setqueue.operations.Operations``)."""

    router: Router[QueueCore]
    first: QueueCore

    def enqueue(
        self,
        ids: Mapping[str, Any] | Iterable[str],
        *,
        delay: float | None = None,
        at: float | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        timeout: float | None = None,
        group: str | None = None,
        retry_timeouts: bool | None = None,
        depends_on: Iterable[Dependency] | None = None,
        if_dependency_fails: str = "fail",
    ) -> Steps[int]: ...

    def send(
        self, task: Task[Any, Any] | str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Steps[Sent[Any]]: ...

    def holder(self, job_id: str) -> Steps[QueueCore | None]: ...

    def on_a_cluster(self) -> Steps[bool]: ...

    def push_wakes(self, pushes: Mapping[str, int]) -> Steps[None]: ...


class Workflows:
    """The dependency steps of ``ops`` (an ``Operations``)."""

    def __init__(self, ops: Host) -> None:
        self.ops = ops
        # The script calls of other queues (or shards) that dependencies link to, by name.
        self._elsewhere: dict[str, QueueCommands] = {core.name: core.commands for core in ops.router.cores}
        # Other queues' shard counts (1: not sharded), read once: where their jobs live.
        self._shard_counts: dict[str, int] = {}
        # What this process's calls did to dependents, for the metrics: released to the line (or
        # scheduled), and failed by a dependency that did not end done.
        self.released = 0
        self.dependency_failures = 0
        # Jobs released in shards of sharded queues since the last wake_shards, by queue name.
        self._to_wake: dict[str, int] = defaultdict(int)

    def count(self, released: int, failed: int, queue: str) -> None:
        """Add what a script of ``queue`` (or shard) said it did to dependents (released, failed) to this
        process's counts; jobs released in a shard are woken for by ``wake_shards``."""
        self.released += released
        self.dependency_failures += failed
        sharded = queue_of_shard(queue) if released else None
        if sharded is not None:
            self._to_wake[sharded] += released

    def wake_shards(self) -> Steps[None]:
        """Wake the workers of sharded queues whose shards had jobs released: on a Cluster they wait on
        the queue's own wake list, in another slot than any shard's, which no script of a shard can push
        to (elsewhere the scripts woke them). Up to wake_cap tokens a list. Outside the scripts: a lost
        wake-up delays a pick-up by at most the idle wait, never loses a job. No Redis call when there
        is nothing to wake or no Cluster."""
        if not self._to_wake:
            return
        woken, self._to_wake = self._to_wake, defaultdict(int)
        if not (yield from self.ops.on_a_cluster()):
            return
        cap = self.ops.first.wake_cap
        yield from self.ops.push_wakes({QueueKeys(name).wake: min(n, cap) for name, n in woken.items()})

    def _commands_of(self, name: str) -> QueueCommands:
        """The script calls of queue (or shard) ``name``: one of this queue's cores, or another queue."""
        commands = self._elsewhere.get(name)
        if commands is None:
            commands = self._elsewhere[name] = QueueCommands(QueueKeys(name), self.ops.first.commands.wait)
        return commands

    def _link_of(self, dependency: Dependency) -> Steps[str]:
        """The link ("<queue or shard> <id>") of one dependency as a caller named it."""
        if isinstance(dependency, str):
            return f"{self.ops.router.home(dependency).name} {dependency}"
        queue, job_id = dependency.queue, dependency.id
        home = self.ops.router.home(job_id)
        if not queue or queue == self.ops.router.queue_name(home):
            return f"{home.name} {job_id}"
        shards = self._shard_counts.get(queue)
        if shards is None:  # another queue: how many shards it was opened with (none written: 1)
            stored = yield Send(("GET", QueueKeys(queue).shards))
            shards = self._shard_counts[queue] = 1 if stored is None else int(text(stored))
        name = queue if shards == 1 else shard_name(queue, shard_of(job_id, shards))
        return f"{name} {job_id}"

    def links_of(self, dependencies: Sequence[Dependency]) -> Steps[list[str]]:
        """The links of ``dependencies``, each once, in order (read only; not checked: check_known)."""
        links: list[str] = []
        for dependency in dependencies:
            links.append((yield from self._link_of(dependency)))
        return unique_links(links)

    def plan_links(
        self, by_core: Mapping[QueueCore, Sequence[Any]], dependencies: list[Any], one_call: bool
    ) -> Steps[LinkPlan]:
        """How the jobs ``by_core`` (those of each core) register with ``dependencies``: in their enqueue
        call itself when ``one_call`` allows it (if_exists "ignore") and it is one script call whose
        links all live in its slot, few enough for a page (LINKS_PER_CALL), which then checks them
        itself: the common chain step; else staged, each link checked here first (UnknownJob naming an
        unknown one, nothing written)."""
        links = yield from self.links_of(dependencies)
        if one_call and len(by_core) == 1:
            [(core, jobs)] = by_core.items()
            fits = len(jobs) <= MAX_IDS_PER_CALL and len(jobs) * len(links) <= LINKS_PER_CALL
            if fits and all(split_link(link)[0] == core.name for link in links):
                return LinkPlan(links, one_call=True)
        yield from self.check_known(links)
        return LinkPlan(links, one_call=False)

    def enqueue_linked(
        self, core: QueueCore, enqueue: EnqueueCall, plan: LinkPlan, job_ids: list[str], generation: str
    ) -> Steps[int]:
        """Make ``enqueue``, the enqueue call of ``job_ids`` of ``core`` (its request id ``generation``),
        and register its new jobs with their dependencies as ``plan`` says: in the call itself, which
        refuses an unknown dependency (UnknownJob, nothing written) and asks for the staged way while an
        earlier run of a dependency or new id is still being forgotten; else with the list staged first
        and each job registered after (``register``). Returns how many jobs were new."""
        if plan.one_call:
            reply = yield from enqueue(links=plan.links)
            if reply.unknown is not None:
                raise unknown_dependency(core.name, reply.unknown)
            if not reply.staged:
                self.count(reply.told.released, reply.told.failed, core.name)
                yield from self.tell(core, reply.releases)
                return reply.added
        yield from self.stage(core, plan.links, generation)
        added = (yield from enqueue()).added
        for job_id in job_ids:
            yield from self.register(core, job_id, generation)
        yield from self.unstage(core, generation)
        return added

    def check_known(self, links: Sequence[str]) -> Steps[None]:
        """UnknownJob naming the first of ``links`` that no queue knows (read only: nothing is written)."""
        by_queue: dict[str, list[str]] = defaultdict(list)
        for link in links:
            queue, job_id = split_link(link)
            by_queue[queue].append(job_id)
        for queue, job_ids in by_queue.items():
            for chunk in chunks(job_ids):
                states = yield from self._commands_of(queue).lookup(chunk)
                for job_id, state in zip(chunk, states, strict=True):
                    if state is None:
                        raise unknown_dependency(queue, job_id)

    def stage(self, core: QueueCore, links: Sequence[str], generation: str) -> Steps[None]:
        """Write ``links`` to ``core``'s staging list of the enqueue call ``generation`` (its request id),
        in pages of STAGING_CHUNK, with a day's TTL: register.lua copies it a page a call, so that no
        script takes or copies a long list at once. Written afresh: a resent call stages it again."""
        staging = core.keys.staging(generation)
        yield Send(("DEL", staging))
        for start in range(0, len(links), STAGING_CHUNK):
            yield Send(("RPUSH", staging, *links[start : start + STAGING_CHUNK]))
        yield Send(("PEXPIRE", staging, STAGING_TTL_MS))

    def new_generation(self) -> str:
        """A fresh request id for an enqueue call with dependencies: its links' generation."""
        return new_request_id()

    def unstage(self, core: QueueCore, generation: str) -> Steps[None]:
        """Drop the staging list of enqueue call ``generation`` once each of its jobs registered."""
        yield Send(("DEL", core.keys.staging(generation)))

    def register(self, core: QueueCore, job_id: str, generation: str | None = None) -> Steps[None]:
        """Register waiting job ``job_id`` of ``core`` with its dependencies, page by page (register.lua);
        those of other queues with depend.lua there, bringing back the ones that ended (arrive.lua). Then
        tell the dependents of any job that failed on the way. ``generation``: its enqueue call's request id
        (None: read from its deps record). Idempotent: a sweep redoes one left unfinished."""
        if generation is None:
            header = yield Send(("HGET", core.keys.deps, job_id))
            if header is None:
                return  # it has no dependencies (any more)
            generation = parse_deps_header(text(header))[3]
        releases: list[tuple[str, str]] = []
        start: int | None = 0
        while start is not None:
            page = yield from core.commands.register(
                job_id, generation, start, page=LINKS_PER_CALL, wake_cap=core.wake_cap
            )
            self.count(page.told.released, page.told.failed, core.name)
            releases += [(core.name, released) for released in page.releases]
            if page.busy:  # dependencies whose earlier run is still being forgotten: finish that first
                yield from self.finish_forgetting(core.name, page.busy)
            if page.elsewhere:
                dependent = f"{core.name} {page.generation} {job_id}"
                by_queue: dict[str, list[str]] = defaultdict(list)
                for link in page.elsewhere:
                    queue, dependency = split_link(link)
                    by_queue[queue].append(dependency)
                arrivals: list[tuple[str, str, str, str]] = []
                for queue, dependencies in by_queue.items():
                    asking = dependencies
                    while asking:
                        answers = yield from self._commands_of(queue).depend(dependent, asking)
                        busy = []
                        for dependency, answer in zip(asking, answers, strict=True):
                            if answer == "busy":  # its earlier run is still being forgotten
                                busy.append(dependency)
                            elif answer:  # it had ended (or is gone): it counts now
                                arrivals.append((job_id, page.generation, f"{queue} {dependency}", answer))
                        if busy:
                            yield from self.finish_forgetting(queue, busy)
                        asking = busy
                if arrivals:
                    failed, told = yield from core.commands.arrive(arrivals, wake_cap=core.wake_cap)
                    self.count(told.released, told.failed, core.name)
                    releases += [(core.name, released) for released in failed]
                if page.next_start is None:  # the last page: now the entry can go
                    yield from core.commands.register(
                        job_id, generation, None, page=LINKS_PER_CALL, wake_cap=core.wake_cap
                    )
            start = page.next_start
        yield from self.release_all(releases)
        yield from self.wake_shards()

    def release_all(
        self, ended: Sequence[tuple[str, str]], read: Mapping[tuple[str, str], Sequence[str]] | None = None
    ) -> Steps[None]:
        """Tell the dependents of each (queue or shard, id) of ``ended`` how it ended (release.lua: of one
        queue, as many jobs a call as LINKS_PER_CALL dependents allow); those of other queues with
        arrive.lua there. A dependent that fails in turn has its own dependents told too. ``read``: of
        ``ended``, jobs that ended done whose dependents the ending call read whole, with those of other
        queues ("<queue> <generation> <id>"): they are told there, then the jobs only finish.
        Idempotent: a sweep redoes one left unfinished."""
        # Per queue: the jobs still to tell -> the last dependent told ("" none yet; None: all told
        # here, finish once those elsewhere are).
        left: dict[str, dict[str, str | None]] = defaultdict(dict)
        for queue, job_id in ended:
            left[queue].setdefault(job_id, "")
        if read:
            yield from self._arrive_elsewhere(left, [(*job, "done", dependents) for job, dependents in read.items()])
            for queue, job_id in read:
                left[queue][job_id] = None
        while left:
            queue, jobs = next(iter(left.items()))
            batch = list(jobs.items())[:MAX_IDS_PER_CALL]
            commands = self._commands_of(queue)
            reads, releases, told = yield from commands.release(
                batch, page=LINKS_PER_CALL, wake_cap=self.ops.first.wake_cap
            )
            self.count(told.released, told.failed, queue)
            being_told = [
                (job, got) for job, got in zip(batch, reads, strict=True) if job[1] is not None and got.outcome
            ]
            yield from self._arrive_elsewhere(
                left, [(queue, job_id, got.outcome, got.elsewhere) for (job_id, _), got in being_told]
            )
            # Only once they are all told does a job finish (after None: "end" in the next call).
            for job_id, _after in batch:
                del jobs[job_id]  # finished, or not being released, unless asked again below
            for (job_id, _), got in being_told:
                if got.more:
                    jobs[job_id] = got.after
                elif got.elsewhere:
                    jobs[job_id] = None  # all read: finish now that those elsewhere are told
                # else finished in the script
            for released in releases:
                jobs.setdefault(released, "")
            if not jobs:
                del left[queue]

    def _arrive_elsewhere(
        self,
        left: dict[str, dict[str, str | None]],
        ended: Sequence[tuple[str, str, str, Sequence[str]]],
    ) -> Steps[None]:
        """Tell dependents of other queues (arrive.lua there) that their dependency ended: for each
        (queue, id, outcome, its dependents read, "<queue> <generation> <id>"). One call per queue and
        page of LINKS_PER_CALL for all of ``ended``, so a batch of acks that each release one dependent
        in another queue makes one, not one per job. Dependents failed in turn join ``left``, to tell
        theirs."""
        by_queue: dict[str, list[tuple[str, str, str, str]]] = defaultdict(list)
        for queue, job_id, outcome, dependents in ended:
            for dependent in dependents:
                its_queue, rest = split_link(dependent)
                generation, dependent_id = split_link(rest)
                by_queue[its_queue].append((dependent_id, generation, f"{queue} {job_id}", outcome))
        for its_queue, arrivals in by_queue.items():
            for page in chunks(arrivals, LINKS_PER_CALL):
                failed, there = yield from self._commands_of(its_queue).arrive(page, wake_cap=self.ops.first.wake_cap)
                self.count(there.released, there.failed, its_queue)
                for released in failed:
                    left[its_queue].setdefault(released, "")

    def tell(
        self, core: QueueCore, told: Sequence[str], read: Mapping[str, Sequence[str]] | None = None
    ) -> Steps[None]:
        """After a script ended jobs of ``core`` that have dependents (``told``, recorded in its releasing
        key): tell them now; ``read``: of those, jobs that ended done whose dependents the script read
        whole, with those of other queues. Redis failing meanwhile leaves the record for a sweep to
        finish (LINK_GRACE_SECONDS), never a lost release: the ending call still returns what it did.
        Then wakes the workers of shards where the script or this released jobs (``wake_shards``)."""
        try:
            if told:
                yield from self.release_all(
                    [(core.name, job_id) for job_id in told],
                    {(core.name, job_id): dependents for job_id, dependents in (read or {}).items()},
                )
            yield from self.wake_shards()
        except TRANSIENT_REDIS_ERRORS as exc:
            log.warning(
                "queue %s: telling the dependents of %d ended jobs failed (%s); a sweep will", core.name, len(told), exc
            )

    def finish_links(self, core: QueueCore, limit: int) -> Steps[int]:
        """A sweep's part: finish registrations and releases older than LINK_GRACE_SECONDS that their
        makers left (died, or lost Redis), and drop the dependency lists of jobs in ``forgetting``.
        Returns how many jobs it finished."""
        seconds, micros = yield Send(("TIME",))
        before = int(seconds) * 1000 + int(micros) // 1000 - round(LINK_GRACE_SECONDS * 1000)
        k = core.keys
        registering = yield Send(("ZRANGE", k.registering, "-inf", before, "BYSCORE", "LIMIT", 0, limit))
        for job_id in registering:
            yield from self.register(core, text(job_id))
        releasing = yield Send(("ZRANGE", k.releasing, "-inf", before, "BYSCORE", "LIMIT", 0, limit))
        yield from self.release_all([(core.name, text(job_id)) for job_id in releasing])
        forgetting = yield Send(("ZRANGE", k.forgetting, 0, limit - 1))
        yield from self.forget(core.name, [text(job_id) for job_id in forgetting])
        yield from self.wake_shards()
        return len(registering) + len(releasing) + len(forgetting)

    def forget(self, queue: str, job_ids: Sequence[str]) -> Steps[None]:
        """Drop the entries of ``job_ids`` that queue (or shard) ``queue`` forgot with more than
        LINKS_PER_CALL dependencies or dependents (its ``forgetting`` key), a page a call (forget.lua)
        until none are left. Not there: one call that does nothing."""
        commands = self._commands_of(queue)
        left = list(job_ids)
        while left:
            still = yield from commands.forget(left[:MAX_IDS_PER_CALL], page=LINKS_PER_CALL)
            left = still + left[MAX_IDS_PER_CALL:]

    def finish_forgetting(self, queue: str, job_ids: Sequence[str]) -> Steps[None]:
        """Finish what an earlier run of each of ``job_ids`` (of ``queue``) left to forget, so that a new
        dependent can register with its new run: the telling of its dependents, if it was forgotten
        meanwhile (release_all), then its entries (forget). Whoever comes next does it, idempotently."""
        yield from self.release_all([(queue, job_id) for job_id in job_ids])
        yield from self.forget(queue, job_ids)

    def dependencies(self, job_id: str) -> Steps[list[DependencyResult]]:
        """The dependencies of ``job_id`` in the order given, each with how it ended and what its handler
        returned (``DependencyResult``): what a callback combines. Empty for a job without dependencies,
        an unknown id, or while the entries there are an earlier run's, still being dropped
        (``forgetting``). ValueError for a malformed id."""
        core = yield from self.ops.holder(job_id)
        if core is None:
            return []
        k = core.keys
        if (yield Send(("ZSCORE", k.forgetting, job_id))) is not None:
            return []
        links = yield from self._dependency_links(core, job_id, None)
        ended: dict[str, str] = {}
        for chunk in chunks(links):
            outcomes = yield Send(("HMGET", k.arrived, *(f"{job_id}\0{link}" for link in chunk)))
            ended.update({link: text(o) for link, o in zip(chunk, outcomes, strict=True) if o is not None})
        by_queue: dict[str, list[str]] = defaultdict(list)
        for link in links:
            queue, dependency = split_link(link)
            by_queue[queue].append(dependency)
        kept: dict[str, tuple[Any, str | None]] = {}
        for queue, ids in by_queue.items():
            qk = QueueKeys(queue)
            for chunk in chunks(ids):
                replies = yield Snapshot(
                    tuple(c for i in chunk for c in (("HGET", qk.results, i), ("HGET", qk.errors, i)))
                )
                for n, dependency in enumerate(chunk):
                    result, error = replies[2 * n], replies[2 * n + 1]
                    value = None if result is None else decode_result(text(result))
                    kept[f"{queue} {dependency}"] = (value, None if error is None else split_error(error)[0])
        out = []
        for link in links:
            queue, dependency = split_link(link)
            value, error = kept.get(link, (None, None))
            out.append(DependencyResult(queue, dependency, ended.get(link), value, error))
        return out

    def _dependency_links(self, core: QueueCore, job_id: str, most: int | None) -> Steps[list[str]]:
        """The links of ``job_id``'s dependencies in order (``dep_lines``), at most ``most`` (None: all)."""
        low, high = f"[{job_id}\0", f"({job_id}\1"
        limit = () if most is None else ("LIMIT", 0, most)
        lines = yield Send(("ZRANGE", core.keys.dep_lines, low, high, "BYLEX", *limit))
        return [text(line).split("\0", 2)[2] for line in lines]

    def shown(self, core: QueueCore, job_id: str, r: Mapping[str, Any]) -> Steps[dict[str, Any]]:
        """inspect's dependency fields of ``job_id`` from its snapshot ``r``: its dependencies and
        dependents (``Link``, with their states now, read per queue), its progress and mode. While an
        earlier run's entries are still being dropped (``forgetting``), none of them is shown."""
        earlier = r["forgotten"] is not None
        if r["deps"] is None and (earlier or not r["dependents"]):
            return {}
        links = [] if earlier else [text(line).split("\0", 2)[2] for line in r["depends_on"]]
        dependents = []
        for member in () if earlier else r["dependents"]:
            queue, rest = split_link(text(member).split("\0", 1)[1])
            dependents.append(f"{queue} {split_link(rest)[1]}")
        by_queue: dict[str, list[str]] = defaultdict(list)
        for link in (*links, *dependents):
            queue, other = split_link(link)
            by_queue[queue].append(other)
        states: dict[str, str | None] = {}
        for queue, ids in by_queue.items():
            for chunk in chunks(list(dict.fromkeys(ids))):
                found = yield from self._commands_of(queue).lookup(chunk)
                states.update({f"{queue} {other}": state for other, state in zip(chunk, found, strict=True)})
        shown: dict[str, Any] = {
            "depends_on": tuple(Link(*split_link(link), states.get(link)) for link in links),
            "dependents": tuple(Link(*split_link(link), states.get(link)) for link in dependents),
        }
        if r["deps"] is not None:
            count, mode, _due, _generation, _priority = parse_deps_header(text(r["deps"]))
            every = [] if earlier else (yield from self._dependency_links(core, job_id, None))
            outcomes: list[str] = []
            for chunk in chunks(every):
                found = yield Send(("HMGET", core.keys.arrived, *(f"{job_id}\0{link}" for link in chunk)))
                outcomes += [text(outcome) for outcome in found if outcome is not None]
            shown["waiting_on"] = progress_of(count, outcomes)
            shown["if_dependency_fails"] = mode
        return shown

    def chain(self, steps: Sequence[Call[Any]], *, id: str | None = None) -> Steps[list[Sent[Any]]]:
        """Send ``steps`` (``task.call(...)``) as a chain: each waits for the one before and runs only if
        it ended done (a step that fails for good fails the rest, each naming the one before). Returns
        what each send returned, in order; ``result(sent[-1])`` is the last step's value, and a step reads
        the one before's with ``lease.dependencies()``. ``id``: the chain's own id; its steps are then
        "<id>/1", "<id>/2", ..., so sending the same chain again (after a lost reply, or a producer that
        died midway) adds only the steps not there yet. ValueError for no steps."""
        if not steps:
            raise ValueError("a chain needs at least one step")
        sent: list[Sent[Any]] = []
        for number, step in enumerate(steps, 1):
            step_id = None if id is None else f"{validate_job_id(id)}/{number}"
            task = step.task.options(id=step_id, depends_on=sent[-1:] or None)
            sent.append((yield from self._send_call(task, step)))
        return sent

    def fan_in(
        self,
        members: Sequence[Call[Any]],
        then: Call[R],
        *,
        if_member_fails: str = "run",
        id: str | None = None,
    ) -> Steps[FanIn[R]]:
        """Send ``members`` (``task.call(...)``), then ``then``, the callback, which waits for all of them:
        with ``if_member_fails`` "run" (the default) it runs once when every member ended, whichever way
        (``lease.dependencies()`` says how each ended and what it returned); with "fail" a member that
        fails for good fails it. Members with the same task options go in one enqueue call a batch.
        ``id``: the fan-in's own id; its members are then "<id>/<n>" and the callback "<id>/then", so
        sending it again adds only what is not there yet. ValueError for no members or a bad option."""
        if not members:
            raise ValueError("a fan-in needs at least one member")
        if if_member_fails not in IF_DEPENDENCY_FAILS:
            raise ValueError(
                f"if_member_fails must be one of {', '.join(IF_DEPENDENCY_FAILS)}, got {if_member_fails!r}"
            )
        if id is not None:
            validate_job_id(id)
        by_options: dict[Any, dict[str, Call[Any]]] = defaultdict(dict)
        for number, member in enumerate(members, 1):
            by_options[member.task.defaults][new_job_id() if id is None else f"{id}/{number}"] = member
        sent: dict[str, Sent[Any]] = {}
        for options, calls in by_options.items():
            payloads = {member_id: call.payload for member_id, call in calls.items()}
            added = yield from self.ops.enqueue(
                payloads,
                delay=options.delay,
                at=options.at,
                priority=options.priority or 0,
                max_attempts=options.max_attempts,
                timeout=options.timeout,
                group=options.group,
                retry_timeouts=options.retry_timeouts,
                depends_on=options.depends_on,
                if_dependency_fails=options.if_dependency_fails or "fail",
            )
            for member_id, call in calls.items():  # created: every member of its batch was new
                queue = self.ops.router.queue_name(self.ops.router.home(member_id))
                sent[member_id] = Sent(member_id, added == len(calls), call.task.name, queue)
        callback_id = None if id is None else f"{id}/then"
        members_sent = [sent[member_id] for calls in by_options.values() for member_id in calls]
        task = then.task.options(id=callback_id, depends_on=members_sent, if_dependency_fails=if_member_fails)
        callback = yield from self._send_call(task, then)
        return FanIn(members_sent, callback)

    def _send_call(self, task: Task[Any, R], call: Call[Any]) -> Steps[Sent[R]]:
        """Send ``call`` with ``task``'s options (the call's task with some added)."""
        return (yield from self.ops.send(task, call.args, call.kwargs))
