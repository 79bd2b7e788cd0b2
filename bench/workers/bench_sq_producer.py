"""A baseline tree's producer (the bench imports this checkout's setqueue): prints a line once it has
imported setqueue, then for each stdin line, a JSON list of [ids, group or null, payload or null] calls,
enqueues each call's ids (in that job group, each with that payload) and prints the number added; a line
"reset" opens the queue afresh (after a FLUSHALL took its layout key, which a queue records once) and
prints "reset". It stays up for the whole run: no interpreter start inside a timed enqueue."""

import json
import os
import sys

import setqueue
from setqueue import Queue

queue = Queue.from_url(os.environ["BENCH_REDIS_URL"], name=sys.argv[1])
print(setqueue.__file__, flush=True)
for line in sys.stdin:
    if line.strip() == "reset":
        queue.close()
        queue = Queue.from_url(os.environ["BENCH_REDIS_URL"], name=sys.argv[1])
        print("reset", flush=True)
        continue
    calls = json.loads(line)
    added = (queue.enqueue(ids if p is None else dict.fromkeys(ids, p), group=g) for ids, g, p in calls)
    print(sum(added), flush=True)
queue.close()
