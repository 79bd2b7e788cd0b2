"""`python -m worker`: the worker service. Settings come from the environment (see the README)."""

from setqueue.runners import main_worker


def main() -> int:
    return main_worker()


if __name__ == "__main__":
    raise SystemExit(main())
