"""Plain functions the queue's operations share, with no I/O: what a payload is stored as, what the
stored records read as (history lines, progress reports, finished records, errors, a job's whole
record), how a call is split into script calls, and how figures of several shards add up."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from setqueue.jobs import (
    TRACEBACK_MARK,
    HistoryEntry,
    JobInfo,
    PermanentJobError,
    Progress,
    TaskCall,
    WaitProgress,
    decode_result,
    parse_job_options,
    parse_retry_timeouts,
    parse_trace_parent,
    read_envelope,
)
from setqueue.keys import (
    DEPENDENCY_OUTCOMES,
    MAX_IDS_PER_CALL,
    STATES,
    QueueKeys,
    check_utf8,
    priority_of_rank,
    validate_job_id,
)
from setqueue.limits import LIMIT_STATS
from setqueue.steps import Snapshot, Steps, text

T = TypeVar("T")
# The most dependencies and dependents of one job that inspect shows (a callback may have 100,000).
LINKS_SHOWN = 100


def chunks(items: Sequence[T], size: int = MAX_IDS_PER_CALL) -> Iterable[Sequence[T]]:
    """``items`` in slices of at most ``size``: one script call each, so no call holds Redis long."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def numbered(request_id: str | None, number: int) -> str | None:
    """The request id of the ``number``-th script call of one batched call (None stays None)."""
    return None if request_id is None else f"{request_id}-{number}"


def part_id(request_id: str | None, part: str) -> str | None:
    """The request id of one queue's or shard's part of a call spanning several (None stays None)."""
    return None if request_id is None else f"{request_id}-{part}"


def job_items(ids: Iterable[str] | Mapping[str, Any], payload_max_bytes: int) -> list[tuple[str, str | None]]:
    """(id, payload text or None) of what ``enqueue`` was given, all checked.

    Accepts an iterable of ids, or a mapping id -> payload (see ``payload_text``). Raises TypeError for a
    lone str or bytes (a common slip: ``enqueue("a")`` would enqueue "a" alone, so it is refused with a
    hint) and for a payload that is neither text nor JSON; ValueError for a bad id or a payload over
    ``payload_max_bytes``."""
    if isinstance(ids, str | bytes | bytearray):
        raise TypeError(
            f"ids must be a collection of job ids or a mapping id -> payload, not a {type(ids).__name__}: "
            f"enqueue([{ids!r}]) enqueues that one id"
        )
    if not isinstance(ids, Mapping):
        return [(validate_job_id(job_id), None) for job_id in ids]
    return [(validate_job_id(job_id), payload_text(job_id, p, payload_max_bytes)) for job_id, p in ids.items()]


def payload_text(job_id: str, payload: Any, most: int) -> str:
    """A payload as stored: str as is, bytes as UTF-8 text, anything else as compact JSON.

    Raises ValueError for bytes that are not UTF-8, text that is not valid UTF-8, or more than ``most``
    bytes; TypeError for a value JSON cannot encode (NaN and infinities included)."""
    if isinstance(payload, bytes | bytearray):
        try:
            stored = payload.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(
                f"payload of {job_id!r}: bytes that are not UTF-8 text (encode binary data first, e.g. base64)"
            ) from None
    elif isinstance(payload, str):
        stored = check_utf8(f"payload of {job_id!r}", payload)
    else:
        try:
            stored = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"payload of {job_id!r} is neither text nor JSON-serialisable: {exc}") from None
    size = len(stored.encode("utf-8"))
    if size > most:
        raise ValueError(f"payload of {job_id!r} is {size:,} bytes, more than payload_max_bytes ({most:,})")
    return stored


def parse_history(stored: Any) -> tuple[HistoryEntry, ...]:
    """The history hash's value: one line per entry, ``<ms>\\t<kind>\\t<worker>\\t<detail>``."""
    entries: list[HistoryEntry] = []
    for line in ("" if stored is None else text(stored)).splitlines():
        at, kind, worker, detail = [*line.split("\t", 3), "", "", ""][:4]
        entries.append(HistoryEntry(int(at) / 1000 if at.isdigit() else 0.0, kind, worker, detail))
    return tuple(entries)


def parse_progress(stored: Any) -> Progress | None:
    """The progress hash's value, ``<fraction>|<ms>|<message>``; None when there is no report."""
    if stored is None:
        return None
    fraction, at, message = [*text(stored).split("|", 2), "", ""][:3]
    return Progress(float(fraction or 0), int(at or 0) / 1000, message)


def parse_finished(stored: Any) -> tuple[int | None, float | None, str | None, bool]:
    """The finished hash's value, ``<enqueued ms>:<finished ms>:<attempts>[:1]``: enqueue ms, finish
    time (s), attempts as stored, and whether the handler returned a result (":1"). A missing field is
    None, never 0."""
    fields = text(stored).split(":") if stored else []
    enqueued_ms, finished_ms, attempts, returned = [*fields, "", "", "", ""][:4]
    return (
        int(enqueued_ms) if enqueued_ms else None,
        int(finished_ms) / 1000 if finished_ms else None,
        attempts or None,
        returned == "1",
    )


def split_error(stored: Any) -> tuple[str | None, str | None]:
    """The errors hash's value: the reason, and the traceback after TRACEBACK_MARK (None: none)."""
    if stored is None:
        return None, None
    reason, mark, trace = text(stored).partition(TRACEBACK_MARK)
    return reason, (mark.lstrip("\n") + trace if mark else None)


def inspect_reads(k: QueueKeys, job_id: str) -> dict[str, tuple[Any, ...]]:
    """The reads of everything kept of ``job_id``, by name, for one snapshot (``job_info`` reads the replies)."""
    return {
        "todo_rank": ("ZSCORE", k.todos, job_id),
        "running_rank": ("ZSCORE", k.in_progress, job_id),
        "in_done": ("SISMEMBER", k.done, job_id),
        "in_failed": ("SISMEMBER", k.failed, job_id),
        "due": ("ZSCORE", k.scheduled, job_id),
        "in_cancelled": ("SISMEMBER", k.cancelled, job_id),
        "kept_priority": ("HGET", k.priorities, job_id),
        "attempts": ("HGET", k.attempts, job_id),
        "payload": ("HGET", k.payloads, job_id),
        "error": ("HGET", k.errors, job_id),
        "owner": ("HGET", k.owners, job_id),
        "finished": ("HGET", k.finished, job_id),
        "own": ("HGET", k.options, job_id),
        "history": ("HGET", k.history, job_id),
        "progress": ("HGET", k.progress, job_id),
        "result": ("HGET", k.results, job_id),
        "joined": ("ZSCORE", k.pending, job_id),
        "first": ("HGET", k.enqueued, job_id),
        "done_at": ("ZSCORE", k.done_log, job_id),
        "grouped_rank": ("ZSCORE", k.grouped, job_id),
        "group": ("HGET", k.group_of, job_id),
        "waiting_since": ("ZSCORE", k.waiting, job_id),
        "deps": ("HGET", k.deps, job_id),
        "depends_on": ("ZRANGE", k.dep_lines, f"[{job_id}\0", f"({job_id}\1", "BYLEX", "LIMIT", 0, LINKS_SHOWN),
        "dependents": ("ZRANGE", k.dependents, f"[{job_id}\0", f"({job_id}\1", "BYLEX", "LIMIT", 0, LINKS_SHOWN),
        "forgotten": ("ZSCORE", k.forgetting, job_id),
        "recorded": ("EXISTS", k.released),
    }


def read_job(k: QueueKeys, job_id: str, drain: Callable[[], Steps[int]]) -> Steps[dict[str, Any]]:
    """The replies to ``inspect_reads``, by name, from one snapshot (MULTI), so that the job cannot move
    between two of the reads. Where acks recorded releases, ``drain`` (drain.lua) first moves them to the
    line and the snapshot is read again: a released job shows in todos once its dependency's ack returned."""
    reads = inspect_reads(k, job_id)
    r = dict(zip(reads, (yield Snapshot(tuple(reads.values()))), strict=True))
    if r["recorded"]:
        yield from drain()
        r = dict(zip(reads, (yield Snapshot(tuple(reads.values()))), strict=True))
    return r


def job_info(job_id: str, queue: str, r: Mapping[str, Any], ttl_ms: int) -> JobInfo | None:
    """The ``JobInfo`` of the replies ``r`` to ``inspect_reads`` (by name) and the PTTL of its owner's lock
    (-2: none); None when no state holds the id."""
    todo_rank = r["todo_rank"] if r["todo_rank"] is not None else r["grouped_rank"]  # in its group's line
    member = (
        todo_rank is not None,
        r["running_rank"] is not None,
        bool(r["in_done"]),
        bool(r["in_failed"]),
        r["due"] is not None,
        bool(r["in_cancelled"]),
        r["waiting_since"] is not None,
    )
    states = [name for name, is_member in zip(STATES, member, strict=True) if is_member]
    if not states:
        return None
    state = states[0]
    rank = todo_rank if todo_rank is not None else r["running_rank"]
    priority: int | None = None
    if rank is not None:
        priority = priority_of_rank(rank)
    elif state in ("scheduled", "failed"):
        priority = int(r["kept_priority"]) if r["kept_priority"] is not None else 0
    elif state == "waiting":
        priority = parse_deps_header(text(r["deps"]))[4] if r["deps"] is not None else 0
    # First enqueued: kept apart only when it joined the line later (scheduled, retried after a backoff).
    enqueued_ms: Any = r["joined"] if r["first"] is None else int(text(r["first"]))
    if state == "waiting":
        enqueued_ms = r["waiting_since"]
    attempts: Any = r["attempts"]
    finished_at: float | None = None
    if state in ("done", "failed", "cancelled"):
        enqueued_ms, finished_at, attempts, _returned = parse_finished(r["finished"])
    elif attempts is None:
        attempts = 0  # never claimed yet
    token = None if r["owner"] is None else text(r["owner"])
    own = None if r["own"] is None else text(r["own"])
    max_attempts, timeout = parse_job_options(own)
    reason, traceback = split_error(r["error"])
    done_at = r["done_at"]
    due_ms = r["due"] if r["due"] is not None else r["joined"]  # scheduled: due; waiting or running: joined
    payload = None if r["payload"] is None else text(r["payload"])
    return JobInfo(
        id=job_id,
        queue=queue,
        state=state,
        priority=priority,
        attempts=None if attempts is None else int(attempts),
        payload=payload,
        error=reason,
        enqueued_at=None if enqueued_ms is None else enqueued_ms / 1000,
        done_at=None if done_at is None or state != "done" else done_at / 1000,
        finished_at=finished_at,
        due_at=None if due_ms is None else due_ms / 1000,
        lock_token=token if ttl_ms >= 0 else None,
        lock_ttl_seconds=ttl_ms / 1000 if ttl_ms >= 0 else None,
        max_attempts=max_attempts,
        timeout=timeout,
        traceback=traceback,
        trace_parent=parse_trace_parent(own),
        history=parse_history(r["history"]),
        progress=parse_progress(r["progress"]),
        result=None if r["result"] is None else decode_result(text(r["result"])),
        result_kept=r["result"] is not None,
        group=None if r["group"] is None else text(r["group"]),
        task=task_call(payload),
        retry_timeouts=parse_retry_timeouts(own),
    )


def summed_stats(each: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several cores' ``stats()`` summed; the oldest pending age is the oldest of any."""
    total: dict[str, Any] = {name: sum(s[name] for s in each) for name in (*STATES, "results_kept", *LIMIT_STATS)}
    total["oldest_pending_age_seconds"] = max(s["oldest_pending_age_seconds"] for s in each)
    by_priority: dict[int, int] = defaultdict(int)
    for s in each:
        for priority, n in s["todos_by_priority"].items():
            by_priority[priority] += n
    total["todos_by_priority"] = dict(by_priority)
    return total


def retry_delay(attempt: int, base: float, most: float) -> float:
    """The delay before retrying a job after its ``attempt``-th attempt failed
    (docs/guide.md#retries-backoff-dead-letters): exponential, ``base * 2^(attempt-1)`` capped at
    ``most``, then drawn from the upper half of that ("equal jitter"), so that jobs failing together do
    not all come back at once, yet none comes back much sooner than asked. 0 when ``base`` is 0."""
    if base <= 0:
        return 0.0
    exponent = min(max(attempt, 1) - 1, 64)  # 2^64 * base is past any max already
    d = min(most, base * 2.0**exponent)
    return random.uniform(d / 2, d)


def task_call(payload: str | None) -> TaskCall | None:
    """The task call a payload holds, for ``inspect``; None for none, or a malformed one."""
    try:
        return read_envelope(payload)
    except PermanentJobError:
        return None


# -- dependencies: a link is "<queue> <id>" (lua/includes/links.lua)


def split_link(link: str) -> tuple[str, str]:
    """``"<queue> <id>"`` -> (queue, id)."""
    queue, _, job_id = link.partition(" ")
    return queue, job_id


def progress_of(total: int, outcomes: Iterable[str]) -> WaitProgress:
    """The ``WaitProgress`` of a job with ``total`` dependencies, of which these ``outcomes`` ended."""
    counts = dict.fromkeys(DEPENDENCY_OUTCOMES, 0)
    for outcome in outcomes:
        if outcome in counts:
            counts[outcome] += 1
    return WaitProgress(total, **counts)


def parse_deps_header(stored: str) -> tuple[int, str, int | None, str, int]:
    """A ``deps`` entry (keys.QueueKeys.deps): count, mode, due ms (None: at once), generation, priority."""
    count, mode, due, generation, priority = stored.split("|")
    return int(count), mode, int(due) if due else None, generation, int(priority)


def unique_links(links: Sequence[str]) -> list[str]:
    """``links`` in order, each once."""
    return list(dict.fromkeys(links))
