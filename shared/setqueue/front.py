"""What a queue is on either client besides sending (``QueueFront``): ``setqueue.Queue`` and
``setqueue.aio.Queue`` each add their sending of the operations (``setqueue.operations``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, Self

from setqueue.core import QueueCore
from setqueue.keys import QueueKeys
from setqueue.routing import Router


class Answering(Protocol):
    """What the front asks of the operations without I/O (``Operations`` has it)."""

    first: QueueCore

    def backoff_delay(self, attempt: int) -> float: ...
    def due_in(self) -> float | None: ...


class QueueFront:
    """What a queue is on either client besides sending: its router and operations, what it is made
    of, and the options a queue of several cores reports (its first core's). ``setqueue.Queue`` and
    ``setqueue.aio.Queue`` add the sending."""

    name: str
    router: Router[QueueCore]
    operations: Answering
    _shards: Sequence[Self]
    _queues: Sequence[Self]

    def _made_of(self, router: Router[QueueCore], shards: Sequence[Self] | None, queues: Sequence[Self] | None) -> None:
        """Over ``router``; ``shards`` and ``queues``: the plain and named queues it is made of (None: itself)."""
        self.router = router
        self.name = router.name
        self._shards = (self,) if shards is None else tuple(shards)
        self._queues = (self,) if queues is None else tuple(queues)

    @property
    def core(self) -> QueueCore:
        """The one core of a plain queue; AttributeError for a queue of several (see ``shards``)."""
        cores = self.router.cores
        if len(cores) != 1:
            raise AttributeError(f"queue {self.name!r} has {len(cores)} shards: each of .shards has one core")
        return cores[0]

    @property
    def queues(self) -> Sequence[Self]:
        """Itself, or the queues served as one."""
        return self._queues

    @property
    def shards(self) -> Sequence[Self]:
        """Itself, its shards, or all the shards of the queues served as one: plain queues."""
        return self._shards

    @property
    def keys(self) -> QueueKeys:
        """A plain queue's key layout."""
        return self.core.keys

    @property
    def lease_seconds(self) -> float:
        return self.operations.first.lease_seconds

    @property
    def max_attempts(self) -> int:
        return self.operations.first.max_attempts

    @property
    def retry_backoff_seconds(self) -> float:
        return self.operations.first.retry_backoff_seconds

    @property
    def request_ttl_seconds(self) -> float:
        """How long a call's result is kept for a resend with the same request id."""
        return self.operations.first.request_ttl_seconds

    @property
    def result_ttl_seconds(self) -> float:
        return self.operations.first.result_ttl_seconds

    @property
    def wake_cap(self) -> int:
        return self.operations.first.wake_cap

    @property
    def payload_max_bytes(self) -> int:
        return self.operations.first.payload_max_bytes

    @property
    def limited(self) -> bool:
        """As the last claims found it: a rate or group limits exist (claim only for free slots)."""
        return any(core.limited for core in self.router.cores)

    @property
    def on_held(self) -> Callable[[str, str], None] | None:
        """Told (queue name, "paused" | "rate" | "group") when limits held jobs back."""
        return self.operations.first.on_held

    @on_held.setter
    def on_held(self, told: Callable[[str, str], None] | None) -> None:
        for core in self.router.cores:
            core.on_held = told

    def backoff_delay(self, attempt: int) -> float:
        """The retry delay after ``attempt`` (``Operations.backoff_delay``; no I/O)."""
        return self.operations.backoff_delay(attempt)

    def due_in(self) -> float | None:
        """Seconds until more could be claimed, as the last short claims saw it (None: not known; no I/O)."""
        return self.operations.due_in()
