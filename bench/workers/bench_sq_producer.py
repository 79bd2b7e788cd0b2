"""setqueue's producer in a process of its own, for a baseline tree (--baseline): the bench imports
this checkout's setqueue, so another tree's Queue can only run in another interpreter. Started with
that tree's shared/ and root first on PYTHONPATH, it says when it has imported setqueue, then
for each line of stdin, a JSON list of ids, calls Queue.enqueue(ids) and answers the number
added. It stays up for the whole run: no interpreter start inside a timed enqueue."""

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
