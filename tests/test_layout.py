"""The house shows the design: what each folder may import, and a light library front door."""

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
from setqueue.config import SETTINGS, CleanerSettings, CreatorSettings, WorkerSettings, default
from tests.support import REPO_ROOT

SERVICES = ("worker", "creator", "cleaner")
# What a library user (or the CLI) must not pay for: the services' runtime and its HTTP server.
HEAVY = ("prometheus_client", "http.server", "setqueue.service", "setqueue.metrics_server", *SERVICES)


def modules_loaded_by(statement: str) -> list[str]:
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", check=True)
    return list(json.loads(result.stdout))


@pytest.mark.parametrize("statement", ["import setqueue", "import setqueue.cli", "from setqueue import Queue"])
def test_the_library_front_door_is_light(statement: str) -> None:
    loaded = modules_loaded_by(statement)
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == [], f"{statement!r} loads {heavy}"


def first_party_imports(path: Path) -> set[str]:
    """Modules of this project that ``path`` imports (setqueue.x, worker.x, ...)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] in ("setqueue", *SERVICES)}


def module_files() -> dict[str, Path]:
    files = {f"setqueue.{p.stem}": p for p in (REPO_ROOT / "shared" / "setqueue").glob("*.py")}
    files["setqueue"] = files.pop("setqueue.__init__")
    for service in SERVICES:
        for p in (REPO_ROOT / service).glob("*.py"):
            files[service if p.stem == "__init__" else f"{service}.{p.stem}"] = p
    return files


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
    shared = "\n".join(p.read_text() for p in (REPO_ROOT / "shared" / "setqueue").glob("*.py"))
    assert f"class {service.capitalize()}Service" not in shared


def test_the_library_takes_its_defaults_from_the_settings_table() -> None:
    parameters = inspect.signature(Queue.__init__).parameters
    for name in ("lease_seconds", "max_attempts", "done_max_count", "done_max_age_seconds"):
        assert parameters[name].default == default(name.upper()), name
    assert parameters["name"].default == default("QUEUE_NAME")
    assert inspect.signature(Queue.from_url).parameters["name"].default == default("QUEUE_NAME")


def test_every_setting_is_a_field_of_a_settings_class() -> None:
    fields = {f.name for cls in (CreatorSettings, WorkerSettings, CleanerSettings) for f in dataclasses.fields(cls)}
    assert fields == {setting.field for setting in SETTINGS}
