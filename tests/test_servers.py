"""The server matrix (tests/support/servers.py, docs/reference.md#tested-servers): a run is on the
server and RESP version it says it is, the suites it names exist, and the docs' table says what runs."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest
import redis

from setqueue import open_queue
from setqueue.runtime.cli import main as cli_main
from tests.support import REPO_ROOT
from tests.support.servers import ONCE_ONLY, SUITES, server_kind

REFERENCE = REPO_ROOT / "docs" / "reference.md"


def test_the_run_is_on_the_server_and_protocol_it_names(redis_url: str, queue_name: str) -> None:
    info = redis.Redis.from_url(redis_url).info("server")
    assert info.get("server_name", "redis") == server_kind(), info  # Valkey says its name; Redis does not
    wanted = os.environ.get("SETQUEUE_TEST_PROTOCOL")
    q = open_queue(redis_url, queue_name)
    try:
        q.stats()
        connection = q.redis.connection_pool.get_connection()
        try:
            spoken = int(connection.protocol or 2)  # type: ignore[attr-defined]
        finally:
            q.redis.connection_pool.release(connection)
    finally:
        q.close()
    if wanted:
        assert spoken == int(wanted)


def test_doctor_names_the_server_it_found(redis_url: str, queue_name: str) -> None:
    out = io.StringIO()
    cli_main(["--redis-url", redis_url, "--queue", queue_name, "doctor"], out=out)
    line = next(line for line in out.getvalue().splitlines() if " redis: " in line)
    assert line.split(" redis: ")[1].startswith("Valkey 9." if server_kind() == "valkey" else "Redis 7."), line


def test_the_suites_name_test_files_that_exist_and_need_no_docker_or_browser() -> None:
    for name, files in SUITES.items():
        assert files, name
        for path in files:
            text = (REPO_ROOT / path).read_text()
            assert not re.search(r"mark\.(compose|browser)\b", text), path
    assert "tests/test_servers.py" in SUITES["core"]
    for test in ONCE_ONLY:
        path, name = test.split("::")
        assert f"def {name}(" in (REPO_ROOT / path).read_text(), test


def test_the_tested_servers_table_says_what_the_test_command_runs() -> None:
    section = REFERENCE.read_text().split("## Tested servers", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if re.match(r"\| (Redis|Valkey) ", line)}
    script = (REPO_ROOT / "scripts" / "test").read_text()
    assert "SETQUEUE_TEST_SERVER=valkey SETQUEUE_TEST_PROTOCOL=2" in script
    assert "SETQUEUE_TEST_PROTOCOL=3" in script
    assert "RESP2" in rows["Valkey 9.1"] and "core, services and CLI" in rows["Valkey 9.1"]
    assert "RESP3" in rows["Redis 7.0.15"] and "the whole suite" in rows["Redis 7.0.15"]
    compose = (REPO_ROOT / "docker-compose.yml").read_text()
    assert "redis:7.4-alpine" in compose and "`redis:7.4-alpine`" in rows["Redis 7.4"]


@pytest.mark.parametrize("lua", sorted((REPO_ROOT / "shared" / "setqueue" / "lua").glob("*.lua")), ids=lambda p: p.name)
def test_every_script_declares_flags_so_needs_redis_7(lua: Path) -> None:
    # The minimum the table states: a #!lua line is Redis 7.0's script flags; Redis 6 cannot compile it.
    assert lua.read_text().startswith("#!lua"), lua
