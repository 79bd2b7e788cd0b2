"""TLS against a TLS-only redis-server verified with a CA made here: each mistake is one line and exit 3,
never a wait; a TLS file that does not fit is a bad setting (exit 2)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from setqueue import OptionError, open_queue
from setqueue.runtime.cli import main as cli_main
from setqueue.runtime.tls import tls_refusal
from tests.support import RedisServer
from tests.support.procs import Proc, run_to_exit
from tests.support.tls import Pki, TlsRedisServer, make_pki
from tests.support.waits import wait_until


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: Pki) -> Iterator[TlsRedisServer]:
    server = TlsRedisServer(pki).start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def mutual_server(pki: Pki) -> Iterator[TlsRedisServer]:
    """Asks every client for a certificate signed by the CA."""
    server = TlsRedisServer(pki, client_certs="yes").start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def expired_server(pki: Pki) -> Iterator[TlsRedisServer]:
    server = TlsRedisServer(pki, cert=pki.expired_cert).start()
    yield server
    server.cleanup()


def tls_env(pki: Pki, **more: Any) -> dict[str, str]:
    return {"REDIS_TLS_CA_FILE": str(pki.ca), **{k: str(v) for k, v in more.items()}}


Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """The command on ``url`` with only ``env``'s TLS settings: (exit code, stdout, stderr)."""

    def run(env: dict[str, str], url: str, *argv: str, queue: str = "q") -> tuple[int, str, str]:
        for name in ("REDIS_TLS_CA_FILE", "REDIS_TLS_CERT_FILE", "REDIS_TLS_KEY_FILE"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        out = io.StringIO()
        code = cli_main(["--redis-url", url, "--queue", queue, *argv], stdin=io.StringIO(""), out=out)
        return code, out.getvalue(), capsys.readouterr().err

    return run


def run_service(module: str, env: dict[str, str], timeout: float = 60) -> tuple[int, list[str]]:
    """A service that must stop on its own: (exit code, its lines naming it)."""
    done = run_to_exit(module, env, timeout)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, [line for line in done.stderr.splitlines() if line.startswith(f"setqueue-{module}:")]


def test_the_library_over_tls_verifies_the_server(tls_server: TlsRedisServer, pki: Pki) -> None:
    q = open_queue(tls_server.url, f"tls-{uuid.uuid4().hex[:6]}", tls_ca_file=str(pki.ca))
    assert q.enqueue(["a", "b"]) == 2
    leases = q.claim(2)
    assert [r.acked for r in q.ack_many(leases)] == [True, True]
    assert q.stats()["done"] == 2
    q.close()
    with pytest.raises(OptionError) as refused:
        open_queue("redis://localhost:6379/0", "q", tls_ca_file=str(pki.ca))
    assert refused.value.option == "tls_ca_file"


def test_a_client_certificate_for_a_redis_that_asks_for_one(mutual_server: TlsRedisServer, pki: Pki) -> None:
    q = open_queue(
        mutual_server.url,
        "mutual",
        tls_ca_file=str(pki.ca),
        tls_cert_file=str(pki.client_cert),
        tls_key_file=str(pki.client_key),
    )
    assert q.enqueue(["a"]) == 1
    q.close()


@pytest.mark.slow
def test_the_services_and_the_command_over_tls(
    tls_server: TlsRedisServer,
    pki: Pki,
    tmp_path: Path,
    procs: list[Proc],
    cli: Cli,
) -> None:
    name = f"tls-{uuid.uuid4().hex[:6]}"
    env = {"REDIS_URL": tls_server.url, "QUEUE_NAME": name, **tls_env(pki)}
    roles: list[tuple[str, dict[str, Any]]] = [("worker", {"WORK_SECONDS": 0}), ("cleaner", {})]
    for role, extra in [*roles, ("creator", {"CREATE_TOTAL": 30})]:
        proc = Proc.start(role, tmp_path, **env, **extra)
        procs.append(proc)
    queue = open_queue(tls_server.url, name, tls_ca_file=str(pki.ca))
    wait_until(lambda: queue.stats()["done"] == 30, 60, "30 jobs done over TLS")
    worker = procs[0]
    status, body = worker.healthz() or (0, {})
    assert status == 200 and body["redis"] == "up"
    code, out, err = cli(tls_env(pki), tls_server.url, "push", "x", queue=name)
    assert (code, out, err) == (0, "1 new, 0 already known\n", "")
    code, out, _ = cli(tls_env(pki), tls_server.url, "doctor", queue=name)
    assert out.startswith("ok    redis: ") and "over TLS" in out.splitlines()[0], out
    for proc in procs:
        assert "Traceback" not in proc.log()


WRONG = {
    "a CA that did not sign it": ("url", "other_ca", "not signed by a CA we trust"),
    "no CA: the system's do not know ours": ("url", None, "not signed by a CA we trust"),
    "a redis:// URL to the TLS port": ("plain_url", None, "speaks TLS: use a rediss:// URL"),
}


@pytest.mark.parametrize("case", list(WRONG), ids=list(WRONG))
def test_a_tls_mistake_is_one_line_and_exit_3(
    tls_server: TlsRedisServer,
    pki: Pki,
    case: str,
    cli: Cli,
) -> None:
    url_of, ca_of, says = WRONG[case]
    url = getattr(tls_server, url_of)
    env = {"REDIS_TLS_CA_FILE": str(getattr(pki, ca_of))} if ca_of else {}
    code, out, err = cli(env, url, "stats")
    assert code == 3 and out == "" and len(err.splitlines()) == 1 and says in err, err
    service_code, lines = run_service("cleaner", {"REDIS_URL": url, **env})
    assert service_code == 3 and len(lines) == 1 and says in lines[0], lines


def test_an_expired_certificate_is_one_line_and_exit_3(expired_server: TlsRedisServer, pki: Pki, cli: Cli) -> None:
    env = tls_env(pki)
    code, _, err = cli(env, expired_server.url, "push", "a")
    assert code == 3 and len(err.splitlines()) == 1 and "certificate has expired" in err, err
    service_code, lines = run_service("worker", {"REDIS_URL": expired_server.url, **env})
    assert service_code == 3 and len(lines) == 1 and "certificate has expired" in lines[0], lines


def test_a_redis_that_asks_for_a_client_certificate_says_so(mutual_server: TlsRedisServer, pki: Pki, cli: Cli) -> None:
    code, _, err = cli(tls_env(pki), mutual_server.url, "stats")
    assert code == 3 and len(err.splitlines()) == 1, err
    both = tls_env(pki, REDIS_TLS_CERT_FILE=pki.client_cert, REDIS_TLS_KEY_FILE=pki.client_key)
    code, out, err = cli(both, mutual_server.url, "stats")
    assert code == 0 and "todos" in out, err


def test_a_rediss_url_to_a_plain_redis_is_found_out(redis_server: RedisServer) -> None:
    """A TLS handshake with a plain Redis hangs until the connect timeout (minutes, with resends): the
    port is then asked in plain text what the timeout means."""
    url = f"rediss://localhost:{redis_server.port}/0"
    said = tls_refusal(redis.TimeoutError("Timeout connecting to server"), url)
    assert said is not None and "does not speak TLS: use a redis:// URL" in said
    assert tls_refusal(redis.TimeoutError("Timeout reading"), redis_server.url) is None  # an outage


TLS = "rediss://localhost:6379/0"
BAD_FILES = {
    "a CA file with a redis:// URL": ("redis://localhost:6379/0", {"REDIS_TLS_CA_FILE": "ca"}, "REDIS_TLS_CA_FILE"),
    "a CA file that is not there": (TLS, {"REDIS_TLS_CA_FILE": "/nope"}, "REDIS_TLS_CA_FILE"),
    "a CA file that holds a key": (TLS, {"REDIS_TLS_CA_FILE": "client_key"}, "REDIS_TLS_CA_FILE"),
    "a key without its certificate": (TLS, {"REDIS_TLS_KEY_FILE": "client_key"}, "REDIS_TLS_KEY_FILE"),
    "a certificate with another's key": (
        TLS,
        {"REDIS_TLS_CERT_FILE": "client_cert", "REDIS_TLS_KEY_FILE": "server_key"},
        "REDIS_TLS_KEY_FILE",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES), ids=list(BAD_FILES))
def test_tls_files_that_do_not_fit_are_a_bad_setting(pki: Pki, case: str, cli: Cli) -> None:
    url, files, named = BAD_FILES[case]
    paths = {"ca": pki.ca, "client_key": pki.client_key, "client_cert": pki.client_cert, "server_key": pki.server_key}
    env = {name: str(paths.get(value, value)) for name, value in files.items()}
    service_code, lines = run_service("creator", {"REDIS_URL": url, **env})
    assert service_code == 2 and len(lines) == 1 and named in lines[0], lines
    code, _, err = cli(env, url, "stats")
    assert code == 2 and len(err.splitlines()) == 1 and named in err, err
