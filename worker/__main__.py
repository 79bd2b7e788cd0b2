"""`python -m worker` (or `setqueue-worker`): the worker service, or with PROCESSES>1 the supervisor
of that many (``worker.supervisor``), whose children run this entry point too (``ChildRole``)."""

from setqueue.runtime.logs import configure_logging
from setqueue.runtime.service import EXIT_SETTING, load_settings, serve, usage
from setqueue.runtime.settings import WorkerSettings
from worker.service import WorkerService
from worker.supervisor import ChildRole, Supervisor

PROGRAM = "setqueue-worker"
SUMMARY = "The worker of setqueue: claims jobs, runs them with JOB_HANDLER, acks or fails them."


def main() -> int:
    # setqueue.runtime.service.main, with the choice of PROCESSES.
    code = usage(PROGRAM, SUMMARY, None)
    if code is not None:
        return code
    settings = load_settings(WorkerSettings, PROGRAM)
    if settings is None:
        return EXIT_SETTING
    child = ChildRole.from_env()
    configure_logging(settings.log_level, settings.log_format, PROGRAM, child=None if child is None else child.index)
    if child is not None:
        child.watch_parent()
        return serve(settings, WorkerService, PROGRAM, metrics_socket=child.metrics_socket())
    if settings.processes > 1:
        return Supervisor(settings, PROGRAM).run()
    return serve(settings, WorkerService, PROGRAM)


if __name__ == "__main__":
    raise SystemExit(main())
