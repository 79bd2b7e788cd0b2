"""setqueue's producer in a process of its own, for a code tree other than the bench's (--baseline).

    PYTHONPATH=<tree>/shared:<tree> BENCH_REDIS_URL=redis://... python bench_sq_producer.py QUEUE

The bench process imports this checkout's setqueue; a baseline's `Queue` (its own enqueue script
and key layout) can only run in another interpreter. This one stays up for the whole run: its
first line is the path of the setqueue it imported (the bench checks it is the tree's), then for
each line on stdin, a JSON list of ids, it calls `Queue.enqueue(ids)` (500 ids per script call,
as in-process) and answers with the number added. Passing 20,000 ids through the pipe costs a few
milliseconds, not an interpreter start per run.
"""

from __future__ import annotations

import json
import os
import sys

import setqueue
from setqueue import Queue


def main() -> int:
    q = Queue.from_url(os.environ["BENCH_REDIS_URL"], name=sys.argv[1])
    print(json.dumps(setqueue.__file__), flush=True)
    try:
        for line in sys.stdin:
            added = q.enqueue(json.loads(line))
            print(added, flush=True)
    finally:
        q.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
