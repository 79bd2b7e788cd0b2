"""The core explains itself: every key of the layout says its Redis type and what it holds, and every public
class, function and method of setqueue.keys, setqueue.jobs and setqueue.limits says what it is for, including
the exceptions it raises itself."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

from setqueue import jobs, keys, limits
from setqueue.keys import QueueKeys

EXPLAINED = (keys, jobs, limits)
# A key's docstring starts with its Redis type (the words of docs/reference.md#key-layout).
REDIS_TYPE = re.compile(r"(Sorted set|Hash|Set|String|List|Stream|Pub/Sub channel)\b")
# What a docstring of each type must name: what its members or fields are.
MUST_NAME = {"Sorted set": ("member", "score"), "Set": ("member",), "Hash": ("field",)}


def key_names() -> list[str]:
    """The ``QueueKeys`` properties and methods that name a key (``prefix`` is only the start of one)."""
    return [
        name
        for name, value in vars(QueueKeys).items()
        if (isinstance(value, property) or inspect.isfunction(value)) and not name.startswith("_")
        if name != "prefix"
    ]


def test_the_layout_has_its_keys() -> None:
    assert len(key_names()) >= 40
    assert {"todos", "pending", "owners", "finished", "lock", "request"} <= set(key_names())


@pytest.mark.parametrize("name", key_names())
def test_every_key_says_its_redis_type_and_what_it_holds(name: str) -> None:
    doc = inspect.getdoc(getattr(QueueKeys, name)) or ""
    kind = REDIS_TYPE.match(doc)
    assert kind, f"QueueKeys.{name}: its docstring must start with its Redis type, got {doc[:40]!r}"
    for word in MUST_NAME.get(kind[1], ()):
        assert word in doc.lower(), f"QueueKeys.{name} ({kind[1]}) does not say what its {word}s are"


def test_the_prefix_says_it_is_no_key() -> None:
    assert (inspect.getdoc(QueueKeys.prefix) or "").startswith("Not a key")


def _definitions(module: ModuleType) -> list[tuple[str, ast.FunctionDef | ast.ClassDef, ast.ClassDef | None]]:
    """(qualified name, node, its class) of every public class, function and method the module defines."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    found: list[tuple[str, ast.FunctionDef | ast.ClassDef, ast.ClassDef | None]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("_"):
            found.append((node.name, node, None))
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for member in node.body:
                if isinstance(member, ast.FunctionDef):
                    found.append((f"{node.name}.{member.name}", member, node))
    return found


def _raised_here(function: ast.FunctionDef) -> set[str]:
    """The exception classes ``function`` raises by name in its own body (not in nested functions)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            names.add(node.exc.func.id)
        todo.extend(ast.iter_child_nodes(node))
    return names


DEFINITIONS = [
    (module.__name__, name, node, owner) for module in EXPLAINED for name, node, owner in _definitions(module)
]
# Dunder methods aside: what a constructor raises is said by its class.
PUBLIC = [definition for definition in DEFINITIONS if not definition[1].split(".")[-1].startswith("_")]
FUNCTIONS = [definition for definition in DEFINITIONS if isinstance(definition[2], ast.FunctionDef)]


@pytest.mark.parametrize(("module", "name", "node", "owner"), PUBLIC, ids=[f"{m}.{n}" for m, n, _, _ in PUBLIC])
def test_every_public_class_function_and_method_has_a_docstring(
    module: str, name: str, node: ast.FunctionDef | ast.ClassDef, owner: ast.ClassDef | None
) -> None:
    assert ast.get_docstring(node), f"{module}.{name} has no docstring"


@pytest.mark.parametrize(("module", "name", "node", "owner"), FUNCTIONS, ids=[f"{m}.{n}" for m, n, _, _ in FUNCTIONS])
def test_every_docstring_names_the_exceptions_its_code_raises(
    module: str, name: str, node: ast.FunctionDef | ast.ClassDef, owner: ast.ClassDef | None
) -> None:
    assert isinstance(node, ast.FunctionDef)
    told_by = owner if owner is not None and node.name in ("__init__", "__post_init__") else node
    doc = ast.get_docstring(told_by) or ""
    missing = sorted(error for error in _raised_here(node) if error not in doc)
    assert not missing, f"{module}.{name} raises {missing} but its docstring does not say so"


def test_no_argv_slot_or_reply_offset_is_indexed_by_a_bare_number() -> None:
    """Script arguments and replies are built and read by name (unpacking, named constants), never as
    ``args[5]`` or ``reply[3:]``: a number there says nothing and breaks silently when a header changes."""
    library = Path(__file__).resolve().parent.parent / "shared" / "setqueue"
    found: list[str] = []
    for path in sorted(library.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
                continue
            if node.value.id not in ("args", "argv", "reply", "replies", "keys"):
                continue
            index = node.slice
            if isinstance(index, ast.Slice) and index.step is not None:
                continue  # reply[::2], reply[1::2]: a flat reply of pairs split in two
            bounds = [index.lower, index.upper] if isinstance(index, ast.Slice) else [index]
            if any(isinstance(b, ast.Constant) and isinstance(b.value, int) and b.value != 0 for b in bounds):
                found.append(f"{path.relative_to(library)}:{node.lineno}")
    assert found == []
