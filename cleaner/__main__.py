"""`python -m cleaner`: the cleaner service. Settings come from the environment (see the README)."""

from setqueue.runners import main_cleaner


def main() -> int:
    return main_cleaner()


if __name__ == "__main__":
    raise SystemExit(main())
