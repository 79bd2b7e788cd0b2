"""The README and docs/ stay true to the code: settings, metrics, keys, CLI, links and code map."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from setqueue.keys import QueueKeys
from setqueue.runtime.cli import build_parser
from setqueue.runtime.metrics import CleanerMetrics, CreatorMetrics, SupervisorMetrics, WorkerMetrics
from setqueue.runtime.settings import SETTINGS
from tests.support import REPO_ROOT

README_PATH = REPO_ROOT / "README.md"
README = README_PATH.read_text()
REFERENCE = (REPO_ROOT / "docs" / "reference.md").read_text()
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))

README_MAX_LINES = 350

# [text](target) and ![alt](target), target up to the first space or closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no '## {heading}' section"
    return match.group(1)


def _table_rows(text: str) -> list[list[str]]:
    """The cells of every table row, header and separator included."""
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.lstrip().startswith("|")
    ]


# -- the reference: settings, metrics, keys, commands


def test_every_setting_is_in_the_configuration_table_with_its_default() -> None:
    table = _section(REFERENCE, "Configuration")
    for setting in SETTINGS:
        default = f"`{setting.default}`" if setting.default else "(empty)"
        assert re.search(rf"^\| `{setting.name}` \| {re.escape(default)} \|", table, re.M), setting.name


def test_the_configuration_table_names_no_setting_the_code_lacks() -> None:
    names = {setting.name for setting in SETTINGS}
    rows = _table_rows(_section(REFERENCE, "Configuration"))
    documented = {row[0].strip("`") for row in rows[2:]}
    assert documented <= names, documented - names


def test_every_metric_is_in_the_metrics_table() -> None:
    names = set()
    roles = (CreatorMetrics, WorkerMetrics, SupervisorMetrics, lambda registry: CleanerMetrics(registry, audit=True))
    for role in roles:
        registry = CollectorRegistry()
        role(registry)
        for metric in registry.collect():
            names.add(metric.name + ("_total" if metric.type == "counter" else ""))
    table = _section(REFERENCE, "Metrics")
    for name in names:
        assert re.search(rf"^\| `{name}[`{{]", table, re.M), name


def test_every_key_of_the_layout_is_documented() -> None:
    keys = QueueKeys("Q")
    attributes = [name for name, value in vars(QueueKeys).items() if isinstance(value, property) and name != "prefix"]
    assert {"todos", "in_progress", "done", "failed", "scheduled", "owners", "audit_created"} <= set(attributes)
    table = _section(REFERENCE, "Key layout")
    for attribute in attributes:
        assert f"| `{getattr(keys, attribute)}` |" in table, attribute
    assert f"| `{keys.lock('<token>')}` |" in table
    assert f"| `{keys.request('<request id>')}` |" in table
    assert f"| `{keys.audit_run('<token>', '<id>')}` |" in table


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the setqueue parser has no subcommands")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Long options but --help and --version."""
    return {
        option
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and option not in ("--help", "--version")
    }


def test_every_command_and_option_of_the_cli_is_in_the_reference() -> None:
    section = _section(REFERENCE, "The `setqueue` command")
    parser = build_parser()
    commands = _subcommands(parser)
    assert {"push", "stats", "inspect", "requeue-failed", "delete", "schedules"} <= set(commands)
    for name, subparser in commands.items():
        assert re.search(rf"^\| `setqueue {re.escape(name)}\b", section, re.M), name
        for option in _options(subparser):
            assert f"{option}" in section, f"{name} {option}"
    for option in _options(parser):
        assert re.search(rf"^\| `{re.escape(option)}\b", section, re.M), option


def test_the_exit_codes_are_in_the_reference() -> None:
    cli = _table_rows(_section(REFERENCE, "The `setqueue` command"))
    assert {"0", "1", "2", "3"} <= {row[0] for row in cli}
    services = _table_rows(_section(REFERENCE, "Services: endpoints, signals, exit codes"))
    assert {"0", "1", "2", "3", "4"} <= {row[0] for row in services}
    assert {"`/metrics`", "`/healthz` (or `/health`)"} <= {row[0] for row in services}


# -- the README


def test_the_two_commands() -> None:
    assert "```sh\ndocker compose up --build\n```" in README
    assert "```sh\nscripts/test\n```" in README
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().endswith("exec scripts/test")


def test_the_readme_is_a_front_door() -> None:
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; detail belongs in docs/"
    # Dated runs belong in docs/ and bench/.
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", FENCE.sub("", README)), "a date in README.md"


def test_the_readme_maps_the_card_flow_to_the_scripts() -> None:
    rows = ["|".join(row) for row in _table_rows(_section(README, "From the design card to setqueue"))]
    for word in ("SRANDMEMBER", "enqueue.lua", "claim.lua", "ack.lua", "sweep.lua"):
        assert any(word in row for row in rows), word
    for script in ("enqueue", "claim", "ack", "sweep"):
        assert (REPO_ROOT / "shared" / "setqueue" / "lua" / f"{script}.lua").is_file()


def test_every_path_the_code_map_names_exists() -> None:
    """Each row: a folder, then backticked paths (with a / or an extension) in it or from the root."""
    rows = _table_rows(_section(README, "Code map"))[2:]
    assert rows
    for row in rows:
        folder = row[0].strip("`")
        assert (REPO_ROOT / folder).is_dir(), folder
        for name in re.findall(r"`([^`\s]+)`", row[1]):
            if not ("/" in name or re.search(r"\.(py|lua|md|yml)$", name)):
                continue  # a class, function or setting name
            candidates = (REPO_ROOT / folder / name, REPO_ROOT / name)
            assert any(path.exists() for path in candidates), f"{folder} {name}"


# -- links


def _links(path: Path) -> list[tuple[str, str]]:
    """(target, anchor) of every relative link (target "" within the page); URLs with a scheme are skipped."""
    pairs = []
    for link in LINK.findall(FENCE.sub("", path.read_text())):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", link):
            target, _, anchor = link.partition("#")
            pairs.append((target, anchor))
    return pairs


def _relative_links(path: Path) -> list[str]:
    return [target for target, _ in _links(path) if target]


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but - and _ dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", FENCE.sub("", path.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def test_every_relative_link_points_at_a_file_or_folder() -> None:
    checked = 0
    for page in [README_PATH, *DOCS]:
        for target in _relative_links(page):
            resolved = (page.parent / target).resolve()
            assert resolved.exists(), f"{page.relative_to(REPO_ROOT)} links to {target}, which does not exist"
            checked += 1
    assert checked >= 20


def test_every_anchor_a_link_names_is_a_heading() -> None:
    checked = 0
    for page in [README_PATH, *DOCS]:
        for target, anchor in _links(page):
            linked = (page.parent / target).resolve() if target else page
            if not anchor or linked.suffix != ".md" or not linked.exists():
                continue
            assert anchor in _anchors(linked), f"{page.relative_to(REPO_ROOT)} links to {target}#{anchor}"
            checked += 1
    assert checked >= 20


def test_the_readme_links_every_doc() -> None:
    linked = {(REPO_ROOT / target).resolve() for target in _relative_links(README_PATH)}
    for page in DOCS:
        assert page.resolve() in linked, page.name
