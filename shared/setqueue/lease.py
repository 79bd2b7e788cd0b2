"""Keeping leases alive while long jobs run."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import redis

from setqueue.jobs import Lease, RenewOutcome

log = logging.getLogger("setqueue.lease")


class Renewable(Protocol):
    @property
    def lease_seconds(self) -> float: ...
    def renew_outcomes(self, leases: Sequence[Lease]) -> list[RenewOutcome]: ...


class LeaseKeeper:
    """Renews every held lease in the background (one script call), every third of the lease time.

    A lost lease is dropped and reported to ``on_lost`` (its ack would be stale); one lost to a cancel
    goes to ``on_cancelled`` (else as lost). A Redis error is logged and retried next tick: the lease
    time is the margin."""

    def __init__(
        self,
        queue: Renewable,
        *,
        interval: float | None = None,
        on_renewed: Callable[[int], None] | None = None,
        on_lost: Callable[[Lease], None] | None = None,
        on_cancelled: Callable[[Lease], None] | None = None,
    ) -> None:
        self.queue = queue
        self.interval = interval if interval is not None else queue.lease_seconds / 3
        self._on_renewed = on_renewed
        self._on_lost = on_lost
        self._on_cancelled = on_cancelled
        self._held: dict[tuple[str, str], Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def hold(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._held[(lease.id, lease.token)] = lease

    def drop(self, leases: Iterable[Lease]) -> None:
        with self._lock:
            for lease in leases:
                self._held.pop((lease.id, lease.token), None)

    def held(self) -> list[Lease]:
        """A copy of the leases held now."""
        with self._lock:
            return list(self._held.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def renew_now(self) -> None:
        with self._lock:
            leases = list(self._held.values())
        if not leases:
            return
        outcomes = self.queue.renew_outcomes(leases)
        refused = [(lease, o) for lease, o in zip(leases, outcomes, strict=True) if o is not RenewOutcome.RENEWED]
        lost = []
        with self._lock:
            for lease, outcome in refused:
                # Dropped meanwhile (acked while we renewed): its lock is gone because the job is done.
                if self._held.pop((lease.id, lease.token), None) is not None:
                    lost.append((lease, outcome))
        if self._on_renewed is not None:
            self._on_renewed(len(leases) - len(refused))
        for lease, outcome in lost:
            if outcome is RenewOutcome.CANCELLED and self._on_cancelled is not None:
                self._on_cancelled(lease)
                continue
            log.warning("lease lost for job %s (attempt %d)", lease.id, lease.attempt)
            if self._on_lost is not None:
                self._on_lost(lease)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.renew_now()
            except redis.RedisError as exc:
                log.warning("lease renewal failed, retrying in %.1fs: %s", self.interval, exc)
