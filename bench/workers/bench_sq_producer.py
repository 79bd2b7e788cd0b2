"""A baseline tree's producer (the bench imports this checkout's setqueue): prints a line once it has
imported setqueue, then enqueues each stdin line's JSON list of ids and prints the number added. It stays
up for the whole run: no interpreter start inside a timed enqueue."""

import json
import os
import sys

import setqueue
from setqueue import Queue

queue = Queue.from_url(os.environ["BENCH_REDIS_URL"], name=sys.argv[1])
print(setqueue.__file__, flush=True)
for line in sys.stdin:
    print(queue.enqueue(json.loads(line)), flush=True)
queue.close()
