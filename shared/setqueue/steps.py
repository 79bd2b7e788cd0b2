"""What the queue's operations ask of Redis, with no I/O of their own (sans-I/O).

Every operation of a queue is written once, as a generator that yields *steps* and is sent each
step's reply (or has the step's exception thrown in, where it can handle it: an ack keeping results
that Redis refuses for lack of memory is sent again without them). An executor runs the generator:
``setqueue.executors.Executor`` on redis-py's blocking client, ``AsyncExecutor`` on ``redis.asyncio``.
So the sync and the async client share every line that builds KEYS and ARGV, reads replies and
shapes results; only the sending differs.

A step is one of:

- ``RunScript``: one Lua script of ``lua/`` (EVALSHA, loaded on NOSCRIPT), confirmed by replicas
  when the queue asks for that (``wait``) and the script writes;
- ``Send``: one plain Redis command, as ``execute_command`` takes it (redis-py parses the reply by
  the command's name, so ``ZSCAN`` gives ``(cursor, [(member, score), ...])`` in both clients);
- ``Snapshot``: several reads sent in one ``MULTI``, so they see one instant (out of memory Redis
  refuses a ``MULTI`` even of reads: they go in a plain pipeline then, without the snapshot);
- ``AskCluster``: whether the client runs on a Redis Cluster (the reply is a bool).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    """Confirm each write script call on ``replicas`` replicas, waiting at most ``timeout_ms``: a script
    step's ``wait``, which the executors send with ``setqueue.replication.confirmed_call``. ValueError for
    fewer than 1 replica or 1 ms."""

    replicas: int
    timeout_ms: int

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas must be at least 1, got {self.replicas}")
        if self.timeout_ms < 1:  # WAIT 0 would block forever
            raise ValueError(f"timeout_ms must be at least 1, got {self.timeout_ms}")


@dataclass(frozen=True, slots=True)
class RunScript:
    """One call of the script ``name`` (``source``: its text, includes resolved); the reply is the
    script's, as redis-py decodes it."""

    name: str
    source: str
    keys: Sequence[str]
    args: Sequence[Any]
    wait: ReplicaWait | None = None  # confirm the write on replicas (None: do not wait)


@dataclass(frozen=True, slots=True)
class Send:
    """One Redis command: ``args`` as ``execute_command`` takes them, e.g. ``("HGET", key, field)``."""

    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Reads sent together in one ``MULTI``/``EXEC``; the reply is the list of their replies, in order."""

    commands: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, slots=True)
class AskCluster:
    """Whether the client runs on a Redis Cluster (it connects to find out); the reply is a bool."""


Step: TypeAlias = RunScript | Send | Snapshot | AskCluster

# An operation: yields steps, is sent their replies, returns its result.
Steps: TypeAlias = Generator[Step, Any, R]


def text(value: str | bytes) -> str:
    """A reply as text (the clients decode replies; a bytes one is UTF-8)."""
    return value.decode() if isinstance(value, bytes) else value
