"""``open_queue``: the one way to open a queue of any kind."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from setqueue.client import connect
from setqueue.group import QueueGroup
from setqueue.interface import JobQueue
from setqueue.keys import MAX_SHARDS, parse_queue_names
from setqueue.queue import Queue
from setqueue.sharded import ShardedQueue, shard_names


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
) -> JobQueue:
    """The queue ``name`` on ``url`` (redis, rediss, unix; one Redis or any Cluster node), on one client:
    a plain ``Queue`` for one name; a ``ShardedQueue`` of ``name~0`` .. ``name~N-1`` for
    ``shards=N``; a ``QueueGroup`` (strict priority) for several names (a list, or commas as in
    ``QUEUE_NAME``). ``options`` go to every ``Queue``; ``client``: an open client to use instead;
    ``tls_*``: see ``setqueue.client.tls_options``. Each has the ``JobQueue`` interface."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be a whole number from 1 to {MAX_SHARDS}, got {shards!r}")
    names = parse_queue_names(name) if isinstance(name, str) else tuple(name)
    if not names:
        raise ValueError("no queue name")
    if len(set(names)) != len(names):
        raise ValueError(f"{list(names)} names a queue twice")
    if client is None:
        client = connect(url, tls_ca_file=tls_ca_file, tls_cert_file=tls_cert_file, tls_key_file=tls_key_file)
    members: list[JobQueue] = []
    for each in names:
        queues = [Queue(client, queue_name, **options) for queue_name in shard_names(each, shards)]
        members.append(queues[0] if shards == 1 else ShardedQueue(queues, each))
    return members[0] if len(members) == 1 else QueueGroup(members)
