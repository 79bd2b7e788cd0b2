"""The floor of any Python worker here: a loop that only does the job's body (one INCR via
redis-py), with no queue at all. Runs until BENCH_SECONDS pass."""

from __future__ import annotations

import os
import time

from bench_common import COUNTER, client


def main() -> None:
    r = client()
    r.ping()
    end = time.monotonic() + float(os.environ.get("BENCH_SECONDS", "3"))
    while time.monotonic() < end:
        for _ in range(100):
            r.incr(COUNTER)


if __name__ == "__main__":
    main()
