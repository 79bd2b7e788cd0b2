"""The house shows the design: what each folder may import, a light library front door, and a clone without
raw data, walls of text or heavy pictures."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from setqueue import Queue
from setqueue.core import QueueCore
from setqueue.runtime.settings import (
    SETTINGS,
    CleanerSettings,
    ConsoleSettings,
    CreatorSettings,
    WorkerSettings,
    default,
)
from tests.support import REPO_ROOT

SERVICES = ("worker", "creator", "cleaner")
# The console is a service folder too, but a Starlette app rather than a Service loop.
FOLDERS = (*SERVICES, "console")
LIBRARY = REPO_ROOT / "shared" / "setqueue"
# What a library user must not pay for.
HEAVY = (
    *("prometheus_client", "http.server", "croniter", "setqueue.runtime", *FOLDERS),
    *("starlette", "jinja2", "uvicorn", "setqueue.otel", "setqueue.otel_context"),
)
# The OpenTelemetry glue (setqueue[otel]), tested alone.
GLUE = ("setqueue.otel", "setqueue.otel_context")
# The kinds of queue: only the factory may tell them apart (everyone else uses setqueue.JobQueue).
QUEUE_KINDS = {"Queue", "ShardedQueue", "QueueGroup", "CompositeQueue", "JobQueue"}
MOST_FLOORS = 8


def modules_loaded_by(statement: str) -> list[str]:
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    return list(json.loads(result.stdout))


def first_party_imports(path: Path) -> set[str]:
    """This project's modules that ``path`` imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] in ("setqueue", *FOLDERS)}


def module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in LIBRARY.rglob("*.py"):
        parts = ("setqueue", *path.relative_to(LIBRARY).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for service in FOLDERS:
        for p in (REPO_ROOT / service).glob("*.py"):
            files[service if p.stem == "__init__" else f"{service}.{p.stem}"] = p
    return files


# Beside the core, with the runtime: ``python -m setqueue``, and the pytest plugin that starts workers
# with their settings for users' tests.
ENTRY_POINTS = ("setqueue.__main__", "setqueue.testing")


def core_modules() -> list[str]:
    """The library without its runtime and its entry points."""
    return sorted(
        m
        for m in module_files()
        if m.startswith("setqueue") and not m.startswith("setqueue.runtime")
        if m not in ENTRY_POINTS and m not in GLUE
    )


@pytest.mark.parametrize("module", ["setqueue", *core_modules()])
def test_the_core_loads_nothing_of_the_runtime(module: str) -> None:
    loaded = modules_loaded_by(f"import {module}")
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == [], f"import {module} loads {heavy}"


def test_the_command_line_loads_no_metrics_and_no_service() -> None:
    loaded = modules_loaded_by("import setqueue.runtime.cli")
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in ("prometheus_client", *FOLDERS))]
    assert heavy == [], f"the CLI loads {heavy}"


@pytest.mark.parametrize("module", GLUE)
def test_the_opentelemetry_glue_loads_nothing_of_the_runtime(module: str) -> None:
    loaded = modules_loaded_by(f"import {module}")
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in ("setqueue.runtime", *FOLDERS))]
    assert heavy == [], f"import {module} loads {heavy}"


def test_the_worker_imports_the_opentelemetry_glue_only_through_worker_tracing() -> None:
    for module, path in module_files().items():
        if module.startswith(("worker", "creator", "cleaner", "console")) and module != "worker.tracing":
            assert not first_party_imports(path) & set(GLUE), module


def test_the_core_raises_no_error_that_names_an_environment_variable() -> None:
    names = {setting.name for setting in SETTINGS}
    for module in core_modules():
        tree = ast.parse(module_files()[module].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                said = [c.value for c in ast.walk(node.exc) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                named = [n for n in names for text in said if n in text]
                assert named == [], f"{module} line {node.lineno} raises an error naming {named}"


def test_only_the_factory_tells_the_kinds_of_queue_apart() -> None:
    for module, path in module_files().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
                kinds = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & QUEUE_KINDS
                assert not kinds or module == "setqueue.factory", f"{module} line {node.lineno}: isinstance on {kinds}"


def library_floors() -> dict[str, int]:
    """Each library module's floor: 1 above the highest it imports (the package's __init__ aside)."""
    files = {m: p for m, p in module_files().items() if m.startswith("setqueue")}
    graph = {
        m: {i for i in first_party_imports(p) if i in files and i not in (m, "setqueue")} for m, p in files.items()
    }
    floors: dict[str, int] = {}

    def floor(module: str) -> int:
        if module not in floors:
            floors[module] = 1 + max((floor(dep) for dep in graph[module]), default=0)
        return floors[module]

    for module in graph:
        floor(module)
    return floors


def test_the_library_stands_on_few_floors() -> None:
    floors = library_floors()
    assert max(floors.values()) <= MOST_FLOORS, sorted(floors.items(), key=lambda item: item[1])


def test_no_code_is_left_for_the_set_layout_nobody_ran() -> None:
    for path in [*LIBRARY.rglob("*.py"), *LIBRARY.rglob("*.lua")]:
        assert "legacy" not in path.read_text().lower(), path


def test_shared_imports_no_service_and_services_do_not_import_each_other() -> None:
    for module, path in module_files().items():
        top = module.split(".")[0]
        for imported in first_party_imports(path):
            other = imported.split(".")[0]
            if top == "setqueue":
                assert other == "setqueue", f"{module} (shared/) imports the service module {imported}"
            else:
                assert other in ("setqueue", top), f"{module} imports another service's module {imported}"


def test_no_import_cycles() -> None:
    files = module_files()
    graph = {m: {i for i in first_party_imports(p) if i in files and i != m} for m, p in files.items()}
    # setqueue/__init__ is a package's front door: its submodules run it first anyway.
    for deps in graph.values():
        deps.discard("setqueue")
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done:
            return
        assert module not in visiting, f"import cycle: {' -> '.join([*visiting[visiting.index(module) :], module])}"
        visiting.append(module)
        for dep in sorted(graph[module]):
            visit(dep)
        visiting.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)


@pytest.mark.parametrize("service", SERVICES)
def test_each_service_folder_holds_its_service(service: str) -> None:
    code = "\n".join(p.read_text() for p in (REPO_ROOT / service).glob("*.py"))
    assert f"class {service.capitalize()}Service(Service[" in code
    assert len(code.splitlines()) > 50
    shared = "\n".join(p.read_text() for p in LIBRARY.rglob("*.py"))
    assert f"class {service.capitalize()}Service" not in shared


def test_the_settings_take_the_library_defaults() -> None:
    parameters = inspect.signature(QueueCore.__init__).parameters
    for name in ("lease_seconds", "max_attempts", "done_max_count", "done_max_age_seconds"):
        assert parameters[name].default == default(name.upper()), name
    assert parameters["name"].default == default("QUEUE_NAME")
    assert inspect.signature(Queue.from_url).parameters["name"].default == default("QUEUE_NAME")


def test_every_setting_is_a_field_of_a_settings_class() -> None:
    classes = (CreatorSettings, WorkerSettings, CleanerSettings, ConsoleSettings)
    fields = {f.name for cls in classes for f in dataclasses.fields(cls)}
    assert fields == {setting.field for setting in SETTINGS}


def _tracked_files() -> list[Path]:
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    return [REPO_ROOT / name for name in listed.decode().split("\0") if name]


# Where raw measurements, their logs and worktrees go (bench/README.md, tests/compose/chaos.py, the browser
# tests): ignored by git, never tracked. A tracked file sits under none of these folders.
RAW_DATA_FOLDERS = ("out", "bench/out", "bench/.baseline", "tests/.screenshots")
# A file this long is data, not something people read; the dashboard JSON is the one file allowed past it.
MOST_LINES = 1000
LONG_ALLOWED = ("grafana/dashboards/setqueue.json",)
PICTURES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
# The docs' charts and console screenshots weigh a few KB each; a picture past this is a photo or a raw dump.
MOST_PICTURE_BYTES = 150_000


def test_raw_measurement_data_stays_out_of_git() -> None:
    """A clone is the code and one current summary per measurement, not a store of old data."""
    files = _tracked_files()
    for folder in RAW_DATA_FOLDERS:
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{folder}/x"], cwd=REPO_ROOT, check=False)
        assert ignored.returncode == 0, f"{folder}/ is not in .gitignore"
    # .gitignore's "out/" ignores a folder named out at any depth, so none may hold a tracked file either.
    raw = [
        path
        for path in (f.relative_to(REPO_ROOT) for f in files)
        if "out" in path.parts[:-1] or any(path.is_relative_to(folder) for folder in RAW_DATA_FOLDERS)
    ]
    assert not raw, raw


def test_no_tracked_file_is_over_a_thousand_lines_but_the_dashboard() -> None:
    files = _tracked_files()
    long = [
        f
        for f in files
        if f.suffix.lower() not in PICTURES
        and f.relative_to(REPO_ROOT).as_posix() not in LONG_ALLOWED
        and f.is_file()
        and f.read_bytes().count(b"\n") > MOST_LINES
    ]
    assert not long, long


def test_every_tracked_picture_is_small() -> None:
    big = {
        f.relative_to(REPO_ROOT).as_posix(): f.stat().st_size
        for f in _tracked_files()
        if f.suffix.lower() in PICTURES and f.is_file() and f.stat().st_size > MOST_PICTURE_BYTES
    }
    assert not big, f"pictures over {MOST_PICTURE_BYTES:,} bytes: {big}"
