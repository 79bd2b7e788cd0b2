"""Code trees: the checkout bench/ runs from, or a baseline git ref in a worktree beside it.

`bash bench/run --baseline REF` measures setqueue at REF next to this checkout's, in the same
run and on the same redis-server. REF is checked out with `git worktree add --detach` under
bench/.baseline/<sha> (gitignored; reused by later runs), and everything setqueue of a baseline
system runs from there: its workers (`python -m worker` with that tree as working directory and
its shared/ and root first on PYTHONPATH) and its producer (bench/workers/bench_sq_producer.py,
a process of its own with the same path). The two versions may lay their keys out differently,
so neither ever touches a queue the other one wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASELINES = REPO / "bench" / ".baseline"
# Imported by a process started with a tree's environment, to prove the tree is the one it runs.
_PROBE = "import json, setqueue, worker; print(json.dumps([setqueue.__file__, worker.__file__]))"


@dataclass(frozen=True)
class CodeTree:
    """A copy of the project whose shared/setqueue and worker/ a system runs."""

    root: Path
    label: str = ""  # "" for this checkout; the baseline's short sha otherwise
    ref: str = ""  # the ref as given on the command line
    sha: str = ""

    @property
    def is_current(self) -> bool:
        return self.root == REPO

    def python_path(self) -> list[str]:
        return [str(self.root / "shared"), str(self.root)]

    def suffix(self) -> str:
        """What a system's name gets: setqueue@762146c."""
        return f"@{self.label}" if self.label else ""

    def env(self, extra_path: list[str], base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment whose Python finds this tree's setqueue and worker first (after
        ``extra_path``, the bench's job modules)."""
        env = dict(os.environ if base is None else base)
        rest = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join([*extra_path, *self.python_path(), rest]).rstrip(os.pathsep)
        return env

    def verify(self) -> None:
        """Fail unless a worker started the way the bench starts it imports this tree's code."""
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE],
            env=self.env([]),
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"{self.root}: cannot import setqueue and worker:\n{proc.stderr[-2000:]}")
        for f in json.loads(proc.stdout):
            if not Path(f).resolve().is_relative_to(self.root):
                raise SystemExit(f"{self.root}: a worker there would import {f}, not this tree's code")

    def describe(self) -> str:
        return "this checkout (working tree)" if self.is_current else f"git worktree of {self.ref} ({self.sha[:12]})"

    def as_dict(self) -> dict[str, str]:
        return {"root": str(self.root), "label": self.label, "ref": self.ref, "sha": self.sha}


CURRENT = CodeTree(REPO)


def _git(*args: str) -> str:
    proc = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def checkout_state() -> dict[str, str | bool]:
    """This checkout's commit and whether its setqueue or worker code differs from it."""
    changes = _git("status", "--porcelain", "--", "shared", "worker")
    return {"head": _git("rev-parse", "HEAD"), "code_changed": bool(changes)}


def worktree(ref: str) -> CodeTree:
    """The tree of ``ref`` in bench/.baseline/<sha>: made on first use (git worktree add
    --detach), reused afterwards once checked to be at that commit."""
    sha = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    label = _git("rev-parse", "--short", sha)
    path = BASELINES / sha
    if not path.exists():
        BASELINES.mkdir(parents=True, exist_ok=True)
        # --force: only so that a worktree whose directory was deleted can be made again here.
        _git("worktree", "add", "--detach", "--force", "--quiet", str(path), sha)
    head = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if head != sha:
        raise SystemExit(f"{path} is not a worktree at {sha} (HEAD {head or 'unknown'}): remove it and run again")
    dirty = subprocess.run(
        ["git", "-C", str(path), "status", "--porcelain"], capture_output=True, text=True, check=False
    ).stdout.strip()
    if dirty:
        raise SystemExit(f"{path} has local changes, so it is not {ref}:\n{dirty}")
    tree = CodeTree(path, label=label, ref=ref, sha=sha)
    tree.verify()
    return tree
