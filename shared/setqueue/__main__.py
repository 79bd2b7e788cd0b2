"""`python -m setqueue`: the operator CLI (see ``setqueue.runtime.cli``)."""

from setqueue.runtime.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
