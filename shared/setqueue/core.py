"""One plain queue in one Redis slot (a shard), ``QueueCore``: its options, its key layout, its script
calls and what its last claim and sweep saw. ``setqueue.operations`` runs every operation over one or
more of them (a router says which)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from setqueue.keys import QueueKeys, check_seconds, check_whole
from setqueue.scripts import QueueCommands
from setqueue.steps import ReplicaWait


class QueueCore:
    """One plain queue in one Redis slot: the options every operation on it reads, its keys and script
    calls, and what its last claim and sweep saw. No I/O.

    The only place the queue options' defaults are declared: ``setqueue.Queue``, ``setqueue.aio`` and
    the services' settings read this signature. Raises ValueError for an option out of its range."""

    def __init__(
        self,
        name: str = "default",
        *,
        lease_seconds: float = 30.0,
        max_attempts: int = 5,
        done_max_count: int = 1_000_000,
        done_max_age_seconds: float = 604_800.0,
        retry_backoff_seconds: float = 1.0,
        retry_backoff_max_seconds: float = 300.0,
        request_ttl_seconds: float = 120.0,
        wake_cap: int = 64,
        wait_replicas: int = 0,
        wait_timeout_seconds: float = 1.0,
        payload_max_bytes: int = 1_048_576,
        payload_keep_bytes: int = 1024,
        result_ttl_seconds: float = 3600.0,
        result_max_bytes: int = 1_048_576,
    ) -> None:
        if not lease_seconds >= 0.001:
            raise ValueError(f"lease_seconds must be at least 0.001, got {lease_seconds}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        if done_max_count < 0 or not done_max_age_seconds >= 0:
            raise ValueError("done_max_count and done_max_age_seconds must not be negative")
        if not request_ttl_seconds >= 1:
            raise ValueError("request_ttl_seconds must be at least 1")
        if wake_cap < 1:
            raise ValueError("wake_cap must be at least 1")
        check_whole("wait_replicas", wait_replicas, 0)
        if not (isinstance(wait_timeout_seconds, int | float) and 0.001 <= wait_timeout_seconds < math.inf):
            raise ValueError(f"wait_timeout_seconds must be at least 0.001 and finite, got {wait_timeout_seconds!r}")
        check_whole("payload_max_bytes", payload_max_bytes, 1)
        check_seconds("retry_backoff_seconds", retry_backoff_seconds)
        check_seconds("retry_backoff_max_seconds", retry_backoff_max_seconds)
        self.name = name
        self.keys = QueueKeys(name)
        # How long a claim holds its jobs without renewing (the lock key's TTL).
        self.lease_seconds = float(lease_seconds)
        self.lease_ms = max(1, round(lease_seconds * 1000))
        # Claims a job may take before it is dead-lettered (a job's own max_attempts wins).
        self.max_attempts = max_attempts
        # done's retention: at most this many ids, none older than this (0: no limit).
        self.done_max_count = done_max_count
        self.done_max_age_seconds = float(done_max_age_seconds)
        # How many idle workers one call may wake (each waits on the wake list).
        self.wake_cap = wake_cap
        self.retry_backoff_seconds = float(retry_backoff_seconds)
        self.retry_backoff_max_seconds = float(retry_backoff_max_seconds)
        # How long a call's request record answers a resend with the first call's result.
        self.request_ttl_seconds = float(request_ttl_seconds)
        self.request_ttl_ms = round(request_ttl_seconds * 1000)
        self.payload_max_bytes = payload_max_bytes
        # A done job keeps a payload of at most this many bytes for inspect, as long as done keeps its id
        # (0: none kept). A dead letter keeps its payload whatever its size, for a requeue.
        self.payload_keep_bytes = check_whole("payload_keep_bytes", payload_keep_bytes, 0)
        self.result_ttl_seconds = check_seconds("result_ttl_seconds", result_ttl_seconds)
        self.result_max_bytes = check_whole("result_max_bytes", result_max_bytes, 1)
        self.wait_replicas = wait_replicas
        self.wait_timeout_seconds = float(wait_timeout_seconds)
        wait = ReplicaWait(wait_replicas, round(wait_timeout_seconds * 1000)) if wait_replicas else None
        self.commands = QueueCommands(self.keys, wait)
        # What the last claim saw: when more could be claimed (seconds after next_due_seen, monotonic;
        # None: not known), and whether a rate or group limits exist (then claim only for free slots).
        self.next_due: float | None = None
        self.next_due_seen = 0.0
        self.limited = False
        # Told (queue name, "paused" | "rate" | "group") when limits held jobs back.
        self.on_held: Callable[[str, str], None] | None = None
        self.sweep_cursor = 0  # where the next sweep's ZSCAN of in_progress goes on

    def due_in(self) -> float | None:
        """Seconds until more could be claimed, as the last short claim saw it (None: not known)."""
        if self.next_due is None:
            return None
        return self.next_due - (time.monotonic() - self.next_due_seen)
