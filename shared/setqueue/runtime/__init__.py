"""The services' runtime: settings, the service loop, metrics, logs, periodic jobs, the audit, the
demo handler and the ``setqueue`` command. The core (``setqueue``'s other modules) never imports it.

Importing it first checks that ``setqueue`` is the installed package: a folder named ``setqueue``
without ``__init__.py`` on ``sys.path`` (the current directory for ``python -m`` and ``-c``) becomes a
namespace package that shadows an editable install, whose ``__init__`` then never runs while its
submodules still load. The program then says so in one line and exits 2 (every entry point, the
services' packages and ``setqueue.runtime.cli``, imports this first)."""

import sys
from pathlib import Path

import setqueue

EXIT_SHADOWED = 2


def shadowing() -> str | None:
    """What shadows the installed setqueue package, in one line; None when nothing does."""
    installed = Path(__file__).resolve().parent.parent
    found = getattr(setqueue, "__file__", None)
    if found is not None and Path(found).resolve().parent == installed:
        return None
    if found is None:
        folders = ", ".join(str(path) for path in getattr(setqueue, "__path__", ())) or "a folder"
        what = f"the folder {folders} (no __init__.py)"
    else:
        what = f"the package {Path(found).parent}"
    hint = "run from another directory, or rename that folder"
    return f"{what} shadows the installed setqueue package at {installed}: {hint}"


if (_shadowed := shadowing()) is not None:
    print(f"setqueue: {_shadowed}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_SHADOWED)
