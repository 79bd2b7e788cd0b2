"""`python -m setqueue`: the operator CLI (see ``setqueue.cli``)."""

from setqueue.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
