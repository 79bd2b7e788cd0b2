"""`python -m cleaner` (or `setqueue-cleaner`): the cleaner service."""

from cleaner.service import CleanerService
from setqueue.runtime.service import main as run_service
from setqueue.runtime.settings import CleanerSettings

SUMMARY = "The cleaner of setqueue: requeues jobs whose lease expired, trims done, creates periodic runs."


def main() -> int:
    return run_service(CleanerSettings, CleanerService, "setqueue-cleaner", summary=SUMMARY)


if __name__ == "__main__":
    raise SystemExit(main())
