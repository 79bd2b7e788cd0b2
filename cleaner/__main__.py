"""`python -m cleaner` (or `setqueue-cleaner`): the cleaner service. Settings come from the environment
(see the README's configuration table)."""

from cleaner.service import CleanerService
from setqueue.config import CleanerSettings
from setqueue.service import main as run_service


def main() -> int:
    return run_service(CleanerSettings, CleanerService, "setqueue-cleaner")


if __name__ == "__main__":
    raise SystemExit(main())
