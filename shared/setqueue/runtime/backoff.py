"""Capped exponential backoff with jitter, for waiting out a Redis outage."""

from __future__ import annotations

import random


class Backoff:
    """``next()``: 0.1, 0.2, 0.4 … up to ``cap``, ±25% jitter so replicas do not reconnect in lockstep."""

    def __init__(self, base: float = 0.1, cap: float = 10.0) -> None:
        self.base = base
        self.cap = cap
        self.failures = 0

    def next(self) -> float:
        delay: float = min(self.cap, self.base * 2.0**self.failures)
        self.failures += 1
        return delay * random.uniform(0.75, 1.25)

    def reset(self) -> None:
        self.failures = 0
