"""`python -m worker` (or `setqueue-worker`): the worker service. Settings come from the environment
(``--help`` lists them; docs/reference.md explains them)."""

from setqueue.runtime.service import main as run_service
from setqueue.runtime.settings import WorkerSettings
from worker.service import WorkerService

SUMMARY = "The worker of setqueue: claims jobs, runs them with JOB_HANDLER, acks or fails them."


def main() -> int:
    return run_service(WorkerSettings, WorkerService, "setqueue-worker", summary=SUMMARY)


if __name__ == "__main__":
    raise SystemExit(main())
