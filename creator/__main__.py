"""`python -m creator`: the creator service. Settings come from the environment (see the README)."""

from setqueue.runners import main_creator


def main() -> int:
    return main_creator()


if __name__ == "__main__":
    raise SystemExit(main())
