"""`python -m creator` (or `setqueue-creator`): the creator service."""

from creator.service import CreatorService
from setqueue.runtime.service import main as run_service
from setqueue.runtime.settings import CreatorSettings

SUMMARY = "The creator of setqueue: enqueues generated job ids (or ids read from stdin) at CREATE_RATE."


def main() -> int:
    return run_service(CreatorSettings, CreatorService, "setqueue-creator", summary=SUMMARY)


if __name__ == "__main__":
    raise SystemExit(main())
