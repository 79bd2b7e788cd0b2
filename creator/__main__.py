"""`python -m creator` (or `setqueue-creator`): the creator service. Settings come from the environment
(see the README's configuration table)."""

from creator.service import CreatorService
from setqueue.config import CreatorSettings
from setqueue.service import main as run_service


def main() -> int:
    return run_service(CreatorSettings, CreatorService, "setqueue-creator")


if __name__ == "__main__":
    raise SystemExit(main())
