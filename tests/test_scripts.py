"""The Lua <-> Python contract, read statically: headers naming KEYS and ARGV, comments documenting
them, helpers from lua/includes/, and the loader's checks. (tests/test_cluster.py runs the wrappers.)"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue.executors import Executor
from setqueue.keys import QueueKeys
from setqueue.scripts import (
    CONTRACTS,
    NAMES,
    PER_CALL_KEYS,
    SOURCES,
    ScriptContractError,
    check_call,
    check_layout,
    layout_key_names,
    parse_contract,
    resolve_includes,
)
from setqueue.steps import RunScript

LUA_DIR = Path(__file__).resolve().parent.parent / "shared" / "setqueue" / "lua"
HEADER_LINE = re.compile(
    r"local [\w, ]+ = (?:(?:tonumber\()?(?:KEYS|ARGV)\[\d+\]\)?(?:, )?)+"  # named entries
    r"|local [A-Z_]+ = \d+ +-- (?:KEYS|ARGV)\[[A-Z_]+\.\.\].*"  # the start of a variable-length list
)


def _code(line: str) -> str:
    return line.split("--", 1)[0]


def test_the_lua_folder_holds_the_scripts_it_loads() -> None:
    assert sorted(p.stem for p in LUA_DIR.glob("*.lua")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_each_script_names_its_keys_and_argv_in_its_first_lines(name: str) -> None:
    """As Redis runs it: comments, then the lines naming KEYS and ARGV; below them no numeric index,
    and no index arithmetic anywhere."""
    lines = SOURCES[name].splitlines()
    code = [(n, line) for n, line in enumerate(lines, 1) if _code(line).strip() and not line.startswith("#!")]
    header = [
        line for _, line in code[: next(i for i, (_, line) in enumerate(code) if not HEADER_LINE.fullmatch(line))]
    ]
    assert header, f"{name}.lua: no locals naming KEYS right after the comments"
    keys = [(int(i), local) for line in header for local, i in _named(line, "KEYS")]
    args = [(int(i), local) for line in header for local, i in _named(line, "ARGV")]
    assert [i for i, _ in keys] == list(range(1, len(keys) + 1)), name
    assert [i for i, _ in args] == list(range(1, len(args) + 1)), name
    assert tuple(local for _, local in keys) == CONTRACTS[name].keys
    assert tuple(local for _, local in args) == CONTRACTS[name].args
    for number, line in code[len(header) :]:
        assert not re.search(r"\b(KEYS|ARGV)\[\s*\d+\s*\]", _code(line)), f"{name}.lua line {number}: {line}"
    for number, line in code:
        assert not re.search(r"\b(KEYS|ARGV)\[[^\]]*[-+*/%]", _code(line)), f"{name}.lua line {number}: {line}"


def _named(line: str, table: str) -> list[tuple[str, str]]:
    """(local, index) for each ``table`` entry a header line names."""
    match = re.fullmatch(r"local ([\w, ]+) = (.+)", line.strip())
    if match is None or "--" in match[2]:
        return []
    names = [n.strip() for n in match[1].split(",")]
    indexes = [re.search(rf"\b{table}\[(\d+)\]", v) for v in match[2].split(",")]
    return [(n, i[1]) for n, i in zip(names, indexes, strict=True) if i is not None]


@pytest.mark.parametrize("name", NAMES)
def test_each_header_comment_documents_the_names(name: str) -> None:
    """The comments say "KEYS[i] <name>" for each entry and "KEYS[<CONSTANT>..]" for a list, so they
    cannot drift from the locals."""
    raw = (LUA_DIR / f"{name}.lua").read_text()
    comments = "\n".join(line for line in raw.splitlines() if line.startswith("--"))
    contract = CONTRACTS[name]
    for table, names, tail in (("KEYS", contract.keys, contract.key_tail), ("ARGV", contract.args, contract.arg_tail)):
        documented = dict(re.findall(rf"\b{table}\[(\d+)\] (\w+)", comments))
        assert documented == {str(i): local for i, local in enumerate(names, 1)}, (name, table)
        if tail is not None:
            assert f"{table}[{tail}..]" in comments, (name, tail)
    assert re.search(r"^-- Returns ", comments, re.M), name


def test_shared_helpers_come_from_the_includes() -> None:
    """Each include holds only local functions and UPPER_CASE constants and serves a script; the
    commands the helpers wrap appear in no script's own text."""
    includes = {p.stem: p.read_text() for p in (LUA_DIR / "includes").glob("*.lua")}
    assert includes
    for name, text in includes.items():
        top_level = [line for line in text.splitlines() if _code(line).strip() and not line.startswith((" ", "end"))]
        assert all(re.match(r"local (function |[A-Z][A-Z0-9_]* = )", line) for line in top_level), (name, top_level)
        assert any(f'-- @include "{name}"' in p.read_text() for p in LUA_DIR.rglob("*.lua")), f"{name} unused"
    for name in NAMES:
        own = (LUA_DIR / f"{name}.lua").read_text()
        for command in ("TIME", "GET", "LTRIM", "DECRBY"):
            assert f"redis.call('{command}'" not in own, f"{name}.lua calls {command} itself"


def _reader(files: dict[str, str]) -> object:
    def read(name: str) -> str:
        if name not in files:
            raise FileNotFoundError(name)
        return files[name]

    return read


def test_includes_are_inlined_once_even_when_nested() -> None:
    files = {
        "clock": "local function clock() return 1 end",
        "twice": '-- @include "clock"\nlocal function twice() return 2 * clock() end',
    }
    source = 'local a = KEYS[1]\n-- @include "twice"\n--- @include "clock"\n-- @include "twice"\nreturn twice()\n'
    resolved = resolve_includes(source, _reader(files), "s.lua")  # type: ignore[arg-type]
    assert resolved == (
        "local a = KEYS[1]\nlocal function clock() return 1 end\n"
        "local function twice() return 2 * clock() end\nreturn twice()\n"
    )


@pytest.mark.parametrize(
    ("source", "files", "error"),
    [
        ('-- @include "nowhere"', {}, r's\.lua, line 1: -- @include "nowhere": no file includes/nowhere\.lua'),
        (
            '-- @include "a"',
            {"a": '\n-- @include "b"', "b": '-- @include "a"'},
            r"circular include s\.lua -> a -> b -> a",
        ),
        ("-- @include includes/a", {"a": ""}, r"malformed include"),
        ('-- @include "a.lua"', {"a": ""}, r"malformed include"),
    ],
)
def test_a_broken_include_fails_loudly(source: str, files: dict[str, str], error: str) -> None:
    with pytest.raises(ScriptContractError, match=error):
        resolve_includes(source, _reader(files), "s.lua")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("local a, b = KEYS[1], KEYS[3]\nreturn a", r"names KEYS out of order"),
        ("local a = KEYS[1]\nlocal FIRST = 3  -- KEYS[FIRST..] more\nreturn a", r"FIRST = 3, but the header names 1"),
        ("local a = KEYS[1]\nlocal b = 2\nreturn KEYS[2]", r"line 3: KEYS\[2\] below the header"),
        ("local a = KEYS[1]\nlocal n = 1\nreturn KEYS[n + 1]", r"line 3: KEYS\[n \+ 1\]: index arithmetic"),
        ("local a, b = KEYS[1], 5\nreturn a", r"name each KEYS/ARGV entry alone"),
    ],
)
def test_a_header_that_does_not_hold_fails_loudly(source: str, error: str) -> None:
    with pytest.raises(ScriptContractError, match=error):
        parse_contract("s", source)


def test_a_header_with_a_tail_parses() -> None:
    source = (
        "-- s.lua\nlocal a, b = KEYS[1], KEYS[2]\nlocal FIRST_LOCK = 3  -- KEYS[FIRST_LOCK..] locks\n"
        "local ttl, most = ARGV[1], tonumber(ARGV[2])\nfor i = FIRST_LOCK, #KEYS do end\n"
    )
    contract = parse_contract("s", source)
    assert (contract.keys, contract.args, contract.key_tail, contract.arg_tail) == (
        ("a", "b"),
        ("ttl", "most"),
        "FIRST_LOCK",
        None,
    )


class Script:
    """One script sent as the executor sends it, after the contract check the command layer makes."""

    def __init__(self, name: str, client: redis.Redis) -> None:
        self.name = name
        self.executor = Executor(client)

    def call(self, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        check_call(self.name, keys, args)
        return self.executor.do(RunScript(self.name, SOURCES[self.name], keys, args))


def test_a_call_with_the_wrong_number_of_keys_or_args_is_refused(client: redis.Redis) -> None:
    k = QueueKeys("contract-check")
    stats = Script("stats", client)
    every = [getattr(k, name) for name in CONTRACTS["stats"].keys]
    assert stats.call(every)[:8] == [0] * 8
    with pytest.raises(
        ScriptContractError,
        match=rf"stats\.lua takes {len(every)} KEYS \(todos, in_progress, done, failed, pending, scheduled, "
        r"cancelled, results, grouped, .*\), given 5",
    ):
        stats.call(every[:5])
    with pytest.raises(ScriptContractError, match=r"takes 0 ARGV"):
        stats.call(every, [1])
    renew = Script("renew", client)
    assert renew.call([k.owners, k.cancelled, k.lock("t")], [1000, 1, "t", "nobody", 1]) == [0]  # one claim, one lease
    with pytest.raises(ScriptContractError, match=r"renew\.lua takes 2 or more KEYS \(owners, cancelled\), given 0"):
        renew.call([], [1000, 0])
    with pytest.raises(ScriptContractError, match=r"claim\.lua takes 7 ARGV"):
        Script("claim", client).call([k.request("x"), *[k.todos] * (len(CONTRACTS["claim"].keys) - 1)], [1, 2, 3, 4, 5])


@pytest.mark.parametrize("name", NAMES)
def test_every_key_a_header_names_is_a_key_of_the_layout(name: str) -> None:
    """The wrappers build KEYS from the header's names and QueueKeys: the two must agree."""
    layout = layout_key_names()
    keys = QueueKeys("Q")
    for key in CONTRACTS[name].keys:
        assert key in layout or key in PER_CALL_KEYS, f"{name}.lua: KEYS name {key!r} is not in QueueKeys"
        if key in layout:  # and the key of that name is the one the header describes
            assert getattr(keys, key) == f"setqueue:{{Q}}:{key}"


def test_a_header_naming_a_key_the_layout_lacks_is_refused() -> None:
    source = "-- s.lua\nlocal request, todo = KEYS[1], KEYS[2]\nreturn 1\n"
    with pytest.raises(ScriptContractError, match=r"names KEYS \['todo'\] that the key layout"):
        check_layout("s", parse_contract("s", source), layout_key_names())


@pytest.mark.parametrize("name", NAMES)
def test_every_helper_a_script_calls_is_included_in_it(name: str) -> None:
    helpers = {
        helper
        for path in (LUA_DIR / "includes").glob("*.lua")
        for helper in re.findall(r"local function (\w+)", path.read_text())
    }
    source = SOURCES[name]
    defined = set(re.findall(r"local function (\w+)", source))
    called = {f for f in re.findall(r"\b(\w+)\(", source) if f in helpers}
    assert called <= defined, f"{name}.lua calls {sorted(called - defined)} without its -- @include"
