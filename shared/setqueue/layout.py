"""The layout version check: a queue records the key-layout version it was written with
(``QueueKeys.layout``, ``keys.LAYOUT_VERSION``), and a client of another version refuses it with one line
naming both, before it writes anything (docs/reference.md#layout-versions).

A queue object checks once, before the first Redis step of its first operation (after that operation's
own checks of its arguments, so a refused argument still writes nothing); no operation after pays for it.
A queue with no ``layout`` key is recorded then; one with keys but none was written before queues
recorded their version: ``UNRECORDED_LAYOUT_VERSION``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from redis import exceptions as rexc

from setqueue.client import OptionError
from setqueue.keys import LAYOUT_VERSION, UNRECORDED_LAYOUT_VERSION, QueueKeys
from setqueue.steps import Send, Steps

R = TypeVar("R")


class LayoutVersionError(OptionError):
    """The queue was written with another key-layout version than this client's: nothing was written.
    ``found`` and ``version`` are the queue's and this client's; ``str()`` is one line naming both. An
    OptionError (``option`` "layout"): the services and the command exit 2 with that line."""

    def __init__(self, queue: str, found: str, version: int = LAYOUT_VERSION) -> None:
        super().__init__(
            "layout",
            f"queue {queue} was written with key layout version {found}, and this setqueue uses version "
            f"{version}: run a setqueue of layout version {found} on it, or drain it (or use a new name) first",
        )
        self.queue = queue
        self.found = found
        self.version = version


def check_layout(names: Sequence[str], *, record: bool = True) -> Steps[None]:
    """For each plain queue (or shard) of ``names``: LayoutVersionError if it records another layout
    version than LAYOUT_VERSION (or holds keys written before versions were recorded, and that version
    is another); else, with ``record``, write the version where none is (SET NX). All are read before
    any is written: one refused writes nothing in any."""
    unrecorded: list[QueueKeys] = []
    for name in names:
        keys = QueueKeys(name)
        stored = yield Send(("GET", keys.layout))
        held = False
        if stored is None:
            # Any write of a job leaves one of these: a queue that holds any is not new.
            written = (keys.seq, keys.todos, keys.in_progress, keys.scheduled, keys.done, keys.failed)
            held = bool((yield Send(("EXISTS", *written))))
            if held:
                # Written before versions were recorded, or by a client that recorded its version and
                # wrote jobs between our two reads (a creator and a worker starting on a new queue
                # together): the version, read again, tells them apart.
                stored = yield Send(("GET", keys.layout))
        if stored is None:
            found = str(UNRECORDED_LAYOUT_VERSION) if held else None
            unrecorded.append(keys)
        else:
            found = _text(stored)
        if found is not None and found != str(LAYOUT_VERSION):
            raise LayoutVersionError(name, found)
    if not record:
        return
    for keys in unrecorded:
        try:
            yield Send(("SET", keys.layout, LAYOUT_VERSION, "NX"))
        except rexc.OutOfMemoryError:  # a full Redis still runs acks and fails: the record waits for room
            return
        found = _text((yield Send(("GET", keys.layout))))  # another client's, set meanwhile
        if found != str(LAYOUT_VERSION):
            raise LayoutVersionError(keys.name, found)


def _text(reply: object) -> str:
    """A GET's reply as text, whether the client decodes replies or not."""
    return reply.decode() if isinstance(reply, bytes) else str(reply)


class LayoutCheck:
    """The check of one queue object's plain queues, run once: ``around`` runs an operation's steps with
    the check before its first Redis step, until a check has passed."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.passed = False

    def around(self, steps: Steps[R]) -> Steps[R]:
        """``steps``, or, until the check has passed, the check and then ``steps``."""
        return steps if self.passed else self._checked_first(steps)

    def _checked_first(self, steps: Steps[R]) -> Steps[R]:
        try:
            step = next(steps)  # the operation checks its arguments before its first step
        except StopIteration as finished:
            return finished.value  # type: ignore[no-any-return]
        if not self.passed:
            yield from check_layout(self.names)
            self.passed = True
        while True:  # then the operation's steps, replies and errors as they are
            try:
                reply = yield step
            except Exception as exc:
                try:
                    step = steps.throw(exc)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]
            else:
                try:
                    step = steps.send(reply)
                except StopIteration as finished:
                    return finished.value  # type: ignore[no-any-return]
