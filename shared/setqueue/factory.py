"""``open_queue``: the one way to open a queue of any kind (``setqueue.aio.open_queue``: the same, on
asyncio)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from setqueue.client import connect
from setqueue.group import MultiRouter
from setqueue.keys import MAX_SHARDS, validate_queue_name
from setqueue.queue import Queue
from setqueue.sharded import ShardRouter, shard_names


class ShardedQueue(Queue):
    """A blocking ``Queue`` over 2 to MAX_SHARDS plain queues (its shards), routed by ``ShardRouter``."""

    def __init__(self, shards: Sequence[Queue], name: str) -> None:
        self._setup(shards[0].redis, ShardRouter([shard.core for shard in shards], name), shards, None)


class MultiQueue(Queue):
    """A blocking ``Queue`` serving plain or sharded queues as one, in strict priority of their order,
    routed by ``MultiRouter``."""

    def __init__(self, members: Sequence[Queue]) -> None:
        router = MultiRouter([member.router for member in members])
        self._setup(members[0].redis, router, [s for m in members for s in m.shards], members)

    def member(self, name: str) -> Queue:
        """The queue ``name`` of those served; ValueError if it is not one."""
        for queue in self.queues:
            if queue.name == name:
                return queue
        raise ValueError(f"queue {name!r} is not one of {self.name}")


# The old name, deprecated: "group" now means a job group only (enqueue(group=...)).
QueueGroup = MultiQueue


def queue_layout(name: str | Sequence[str], shards: int) -> list[tuple[str, list[str]]]:
    """Each named queue with the names of its shards (one: the queue itself), checked: ValueError for a shard
    count out of 1..MAX_SHARDS, no name, a bad name (a str is one name: one with a comma is refused, with the
    list to pass instead), or a name given twice."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be a whole number from 1 to {MAX_SHARDS}, got {shards!r}")
    if isinstance(name, str):
        if "," in name:
            several = [part.strip() for part in name.split(",")]
            raise ValueError(
                f"queue name {name!r} has a comma: several queues are a list, open_queue(url, {several!r})"
            )
        names: tuple[str, ...] = (validate_queue_name(name),)
    else:
        names = tuple(name)
    if not names:
        raise ValueError("no queue name")
    if len(set(names)) != len(names):
        raise ValueError(f"{list(names)} names a queue twice")
    return [(each, shard_names(each, shards)) for each in names]


def open_queue(
    url: str,
    name: str | Sequence[str] = "default",
    *,
    shards: int = 1,
    client: Any = None,
    tls_ca_file: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    **options: Any,
) -> Queue:
    """The queue ``name`` on ``url`` (redis, rediss, unix: one Redis or any Cluster node; redis+sentinel,
    rediss+sentinel: the master its sentinels name, ``setqueue.sentinel``), on one client:
    a plain queue for one name; a sharded queue of ``name~0`` .. ``name~N-1`` for ``shards=N``; several
    queues served as one (strict priority, in order) for a list of names (a str is one name: one with a
    comma is refused; only ``QUEUE_NAME`` separates names with commas). ``options`` go to every plain queue
    (``QueueCore``'s); ``client``: an open client to use instead; ``tls_*``: see
    ``setqueue.client.tls_options``. Each has the ``JobQueue`` interface. Raises ValueError for a bad name,
    shard count or option, OptionError for a TLS file that does not fit the URL."""
    layout = queue_layout(name, shards)
    if client is None:
        client = connect(url, tls_ca_file=tls_ca_file, tls_cert_file=tls_cert_file, tls_key_file=tls_key_file)
    members: list[Queue] = []
    for queue_name, names in layout:
        plain = [Queue(client, shard, **options) for shard in names]
        members.append(plain[0] if len(plain) == 1 else ShardedQueue(plain, queue_name))
    return members[0] if len(members) == 1 else MultiQueue(members)
