"""Dependencies between jobs: what a caller names, and what inspect and a lease give back
(docs/guide.md#dependencies; the scripts: lua/includes/links.lua).

A dependency is named in Redis as a *link*, ``"<queue> <id>"``: the plain queue, or the shard of a
sharded queue, that holds the job (queue names have no spaces, so the first space splits it)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from setqueue.keys import DEPENDENCY_OUTCOMES, validate_job_id, validate_queue_name


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job of any queue of the same Redis (or Cluster), to depend on: ``queue`` is the queue's name
    (a sharded queue's own name: the shard is found from the id). ValueError for a bad name or id."""

    queue: str
    id: str

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)
        validate_job_id(self.id)


@dataclass(frozen=True, slots=True)
class Link:
    """One end of a dependency, as inspect shows it: the ``queue`` (or shard) that holds the job, its
    ``id``, and its ``state`` now (one of ``keys.STATES``; None: no longer known, trimmed by retention or
    deleted)."""

    queue: str
    id: str
    state: str | None


@dataclass(frozen=True, slots=True)
class WaitProgress:
    """How far a job enqueued with dependencies got: how many it has, and how many ended each way."""

    total: int
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    deleted: int = 0
    unknown: int = 0  # trimmed by retention, or deleted, before the job registered with it

    @property
    def ended(self) -> int:
        """How many of its dependencies ended, whichever way."""
        return self.done + self.failed + self.cancelled + self.deleted + self.unknown


@dataclass(frozen=True, slots=True)
class DependencyResult:
    """One dependency of a job, as its handler reads it (``Lease.dependencies``): where it is, how it
    ended (``outcome``: done, failed, cancelled, deleted or unknown; None: not ended, which only a job
    released by hand sees), and ``result``: what its handler returned (None: nothing, not kept, or not
    done); ``error``: the reason it failed, if it did."""

    queue: str
    id: str
    outcome: str | None
    result: Any = None
    error: str | None = None


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
