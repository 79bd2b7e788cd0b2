"""`python -m worker` (or `setqueue-worker`): the worker service, or with PROCESSES>1 the supervisor
of that many (``worker.supervisor``), whose children run this entry point too (``ChildRole``). A worker
alone that stops for zombie slots runs itself again in place (``worker.restart``)."""

from setqueue.runtime.logs import configure_logging
from setqueue.runtime.service import EXIT_SETTING, load_settings, serve, usage
from setqueue.runtime.settings import WorkerSettings
from worker.restart import exit_or_restart
from worker.service import EXIT_ZOMBIES, WorkerService
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
    # Alone, it restarts itself when it stops for zombie slots (as a supervisor restarts its processes).
    code = serve(settings, restarting_worker, PROGRAM)
    return exit_or_restart(code) if code == EXIT_ZOMBIES else code


def restarting_worker(settings: WorkerSettings) -> WorkerService:
    service = WorkerService(settings)
    service.exit_now = exit_or_restart  # where it exits with a zombie still in a handler
    return service


if __name__ == "__main__":
    raise SystemExit(main())
