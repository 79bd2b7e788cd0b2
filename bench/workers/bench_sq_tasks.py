"""setqueue's tasks by name in the bench: ``JOB_HANDLER=bench_sq_tasks:tasks`` serves the registry, whose
one task, ``bench.noop``, is the bench's job run by its id (workers/bench_common.py): with BENCH_NOOP=1 a
tally, so the counter still proves each call ran once. Producers send ``noop`` (or its name), or enqueue
``ENVELOPE``, the payload such a send writes."""

from bench_common import run_job

from setqueue import Tasks, current_lease
from setqueue.tasks import envelope

tasks = Tasks()
NAME = "bench.noop"


@tasks.task(name=NAME)
def noop() -> None:
    run_job(current_lease().id)


ENVELOPE = envelope(NAME, (), {})  # {"task":"bench.noop","v":1}
