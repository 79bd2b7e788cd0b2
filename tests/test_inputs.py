"""Bad input gets one clear line and changes nothing; odd but valid input works (issue: trust)."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from setqueue import Queue
from setqueue.runtime.cli import main
from setqueue.runtime.settings import SETTINGS
from tests.support import RedisServer
from tests.support.procs import run_to_exit


@pytest.fixture(scope="module")
def unix_redis() -> Iterator[str]:
    socket_dir = Path(tempfile.mkdtemp(prefix="sq-sock-"))
    path = socket_dir / "redis.sock"
    server = RedisServer(args=["--unixsocket", str(path), "--unixsocketperm", "700"]).start()
    yield f"unix://{path}"
    server.cleanup()


def test_a_unix_socket_url_works_for_the_library_and_the_cli(
    unix_redis: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    q = Queue.from_url(unix_redis, name=queue_name)
    assert q.enqueue(["a"]) == 1
    out = io.StringIO()
    assert main(["--redis-url", unix_redis, "--queue", queue_name, "push", "b"], out=out) == 0
    # No worker serves it: push says so on stderr, and still exits 0.
    assert out.getvalue() == "1 new, 0 already known\n" and "no live worker serves" in capsys.readouterr().err
    assert q.stats()["todos"] == 2
    q.close()


def test_an_empty_payload_comes_back_empty_not_none(queue: Queue) -> None:
    queue.enqueue({"x": ""})
    [lease] = queue.claim()
    assert lease.payload == ""
    info = queue.inspect("x")
    assert info is not None and info.payload == ""


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1:6379/0?foo=bar", "unknown option 'foo'"),
        ("redis://127.0.0.1:6379/0?socket_timeout=abc", "socket_timeout='abc' is not valid"),
        ("redis://127.0.0.1:6379/99999999999", "the database after the / must be a number"),
    ],
)
def test_a_bad_url_option_is_one_line_exit_2(url: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--redis-url", url, "push", "a"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_every_numeric_setting_is_bounded() -> None:
    unbounded = [s.name for s in SETTINGS if s.kind in (int, float) and (s.low is None or s.high is None)]
    assert unbounded == []


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.kind in (int, float)], ids=lambda s: s.name)
@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "1e308", "1e300"])
def test_no_numeric_setting_takes_an_infinite_or_huge_value(setting: object, raw: str) -> None:
    from setqueue.runtime.settings import Setting, SettingError  # noqa: PLC0415

    assert isinstance(setting, Setting)
    with pytest.raises(SettingError, match=setting.name):
        setting.parse(raw)


def test_a_creator_id_prefix_past_the_id_limit_is_a_setting_error() -> None:
    from setqueue.runtime.settings import SETTING_BY_NAME, SettingError  # noqa: PLC0415

    with pytest.raises(SettingError, match="CREATE_ID_PREFIX"):
        SETTING_BY_NAME["CREATE_ID_PREFIX"].parse("x" * 1020)
    assert SETTING_BY_NAME["CREATE_ID_PREFIX"].parse("nightly") == "nightly"


def test_text_that_is_not_utf8_is_refused_before_anything_is_written(queue: Queue) -> None:
    with pytest.raises(ValueError, match="not valid UTF-8"):
        queue.enqueue(["ok", "a\udcffb"])
    with pytest.raises(ValueError, match="not valid UTF-8"):
        queue.enqueue({"ok": "fine", "p": "x\ud800"})
    assert queue.inspect("ok") is None


def test_the_cli_names_the_line_of_an_undecodable_id(
    queue_name: str, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # What `printf 'a\xffb' | setqueue push` gives Python's stdin: a lone surrogate.
    stdin = io.StringIO("good\n" + b"a\xffb\n".decode("utf-8", "surrogateescape"))
    assert main(["--redis-url", redis_url, "--queue", queue_name, "push"], stdin=stdin) == 2
    err = capsys.readouterr().err
    assert err.startswith("setqueue: line 2: ") and "UTF-8" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    server = RedisServer(args=["--requirepass", "right"]).start()
    yield server
    server.cleanup()


@pytest.mark.parametrize("service", ["worker", "creator", "cleaner"])
@pytest.mark.parametrize(
    ("credentials", "db", "says"),
    [
        (":wrong@", 0, "refused the user or password in REDIS_URL"),
        ("", 0, "requires a password: set it in REDIS_URL"),
        (":right@", 99, "DB index"),
    ],
)
def test_redis_refusing_the_settings_at_start_is_one_line_exit_3(
    locked_redis: RedisServer, service: str, credentials: str, db: int, says: str
) -> None:
    url = f"redis://{credentials}127.0.0.1:{locked_redis.port}/{db}"
    result = run_to_exit(service, {"REDIS_URL": url, "QUEUE_NAME": "refused", "CREATE_TOTAL": 1})
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if "refused us" in line]
    assert len(lines) == 1 and says in lines[0] and "wrong" not in lines[0] and "right" not in lines[0]
    assert "Traceback" not in result.stderr
