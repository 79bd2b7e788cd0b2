"""A baseline tree's producer (the bench imports this checkout's setqueue): prints a line once it has
imported setqueue, then for each stdin line, a JSON list of [ids, group or null] calls, enqueues each call's
ids (in that job group) and prints the number added. It stays up for the whole run: no interpreter start
inside a timed enqueue."""

import json
import os
import sys

import setqueue
from setqueue import Queue

queue = Queue.from_url(os.environ["BENCH_REDIS_URL"], name=sys.argv[1])
print(setqueue.__file__, flush=True)
for line in sys.stdin:
    print(sum(queue.enqueue(ids, group=group) for ids, group in json.loads(line)), flush=True)
queue.close()
