"""The registry of live workers (docs/console.md#the-registry-of-live-workers): per queue, a record
``setqueue:{Q}:worker:<id>`` with a TTL of three beats (the one truth of who is alive) and an index
``setqueue:{Q}:workers`` by last beat, both under the queue's hash tag."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from setqueue.keys import QueueKeys

# Index entries are kept this long after their last beat.
INDEX_KEEP_MS = 3_600_000
# Most job ids one record lists (held_count is whole).
MOST_HELD_LISTED = 100
# Most task names one record lists (task_count is whole).
MOST_TASKS_LISTED = 200
# Most workers one index read returns.
MOST_READ = 1000
WORKER_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")


@dataclass(frozen=True)
class WorkerRecord:
    """One live worker, as it last described itself."""

    id: str
    host: str
    pid: int
    queues: list[str]
    slots: int  # CONCURRENCY
    busy: int  # slots running a job now
    held: list[list[str]]  # [queue, id] of jobs it holds, at most MOST_HELD_LISTED
    held_count: int
    started_at: float  # Unix seconds, the worker's clock
    seen_at: float  # this beat's time
    handler: str = ""
    version: str = ""
    heartbeat_seconds: float = 0.0
    tasks: list[str] = field(default_factory=list)  # a task registry's names, sorted; at most MOST_TASKS_LISTED
    task_count: int = 0  # how many tasks it serves (0: a plain handler)
    ttl_seconds: float | None = field(default=None, compare=False)  # filled by the reader: time left

    def to_json(self) -> str:
        data = asdict(self)
        data.pop("ttl_seconds")
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, ttl_seconds: float | None = None) -> WorkerRecord | None:
        """A stored record, or None when it is not one (another version's)."""
        try:
            data: dict[str, Any] = json.loads(text)
            known = {name: data[name] for name in cls.__dataclass_fields__ if name in data and name != "ttl_seconds"}
            return cls(**known, ttl_seconds=ttl_seconds)
        except (ValueError, TypeError):
            return None


def validate_worker_id(worker_id: str) -> str:
    if not WORKER_ID.fullmatch(worker_id):
        raise ValueError(f"worker id {worker_id!r} must be 1 to 200 letters, digits or ._:-")
    return worker_id


def beat(client: redis.Redis, queue_names: Iterable[str], record: WorkerRecord, ttl_ms: int) -> None:
    """Write ``record`` for each queue (one pipelined round trip each)."""
    validate_worker_id(record.id)
    now_ms = round(record.seen_at * 1000)
    text = record.to_json()
    for name in queue_names:
        keys = QueueKeys(name)
        with client.pipeline(transaction=False) as pipe:
            pipe.set(keys.worker(record.id), text, px=ttl_ms)
            pipe.zadd(keys.workers, {record.id: now_ms})
            pipe.zremrangebyscore(keys.workers, "-inf", now_ms - INDEX_KEEP_MS)
            pipe.execute()


def leave(client: redis.Redis, queue_names: Iterable[str], worker_id: str) -> None:
    """Remove a cleanly stopping worker at once."""
    for name in queue_names:
        keys = QueueKeys(name)
        with client.pipeline(transaction=False) as pipe:
            pipe.delete(keys.worker(worker_id))
            pipe.zrem(keys.workers, worker_id)
            pipe.execute()


def live_workers(client: redis.Redis, queue_name: str) -> list[WorkerRecord]:
    """A queue's workers whose record has not expired, most recently seen first."""
    keys = QueueKeys(queue_name)
    ids = [_text(i) for i in client.zrevrange(keys.workers, 0, MOST_READ - 1)]  # type: ignore[union-attr, arg-type]
    if not ids:
        return []
    with client.pipeline(transaction=False) as pipe:
        for worker_id in ids:
            pipe.get(keys.worker(worker_id))
            pipe.pttl(keys.worker(worker_id))
        replies = pipe.execute()
    found: list[WorkerRecord] = []
    for text, ttl_ms in zip(replies[::2], replies[1::2], strict=True):
        if text is None:
            continue  # expired: that worker stopped beating
        record = WorkerRecord.from_json(text, ttl_ms / 1000 if ttl_ms >= 0 else None)
        if record is not None:
            found.append(record)
    return found


def live_worker_count(client: redis.Redis, queue_name: str) -> int:
    """How many workers of a queue are live (their record has not expired): ``live_workers`` without
    reading the records, in two commands."""
    keys = QueueKeys(queue_name)
    ids = client.zrevrange(keys.workers, 0, MOST_READ - 1)
    if not ids:
        return 0
    return int(client.exists(*(keys.worker(_text(i)) for i in ids)))  # type: ignore[union-attr, arg-type]


def all_live_workers(client: redis.Redis, queue_names: Sequence[str]) -> list[WorkerRecord]:
    """The live workers of any of these queues, each once."""
    seen: dict[str, WorkerRecord] = {}
    for name in queue_names:
        for record in live_workers(client, name):
            seen.setdefault(record.id, record)
    return sorted(seen.values(), key=lambda r: (r.host, r.pid, r.id))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
