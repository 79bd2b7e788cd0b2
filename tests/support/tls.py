"""TLS for the tests: a CA made with openssl, and a redis-server that speaks only TLS."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import redis

from tests.support.redis_server import RedisServer, need

SERVER_NAMES = "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
CA_CONFIG = """[ca]
default_ca = ca
[ca]
database = index.txt
serial = serial
new_certs_dir = .
default_md = sha256
policy = any
copy_extensions = copy
[any]
commonName = supplied
"""


def openssl() -> str:
    binary = shutil.which("openssl")
    if not binary:
        need("openssl", "not on PATH: the TLS tests make their certificates with it")
    return binary  # type: ignore[return-value]


@dataclass(frozen=True)
class Pki:
    """A CA and the server (localhost, 127.0.0.1) and client certificates it signed; another CA that
    signed nothing the server shows; a server certificate that expired long ago."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    expired_cert: Path


def _run(*args: str, cwd: Path) -> None:
    done = subprocess.run([openssl(), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def _ca(folder: Path, name: str) -> None:
    _run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt",
         "-subj", f"/CN={name}", "-days", "2", cwd=folder)  # fmt: skip


def _request(folder: Path, name: str, common_name: str) -> None:
    _run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", f"/CN={common_name}", cwd=folder)  # fmt: skip


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    _ca(folder, "ca")
    _ca(folder, "other-ca")
    (folder / "server.ext").write_text(SERVER_NAMES)
    _request(folder, "server", "localhost")
    _run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "server.crt", "-days", "2", "-extfile", "server.ext", cwd=folder)  # fmt: skip
    _request(folder, "client", "setqueue-client")
    _run("x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-out", "client.crt", "-days", "2", cwd=folder)  # fmt: skip
    # Valid for a day in 2020: `openssl ca` takes explicit dates.
    (folder / "ca.cnf").write_text(CA_CONFIG)
    (folder / "index.txt").write_text("")
    (folder / "serial").write_text("1000\n")
    _run("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.crt", "-keyfile", "ca.key", "-in", "server.csr",
         "-out", "expired.crt", "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
         "-extfile", "server.ext", "-notext", cwd=folder)  # fmt: skip
    return Pki(
        ca=folder / "ca.crt",
        server_cert=folder / "server.crt",
        server_key=folder / "server.key",
        client_cert=folder / "client.crt",
        client_key=folder / "client.key",
        other_ca=folder / "other-ca.crt",
        expired_cert=folder / "expired.crt",
    )


class TlsRedisServer(RedisServer):
    """Only a TLS port, with ``cert``; asks clients for a certificate when ``client_certs`` is "yes"."""

    def __init__(self, pki: Pki, *, cert: Path | None = None, client_certs: str = "no") -> None:
        self.pki = pki
        self.cert = cert or pki.server_cert
        self.client_certs = client_certs
        super().__init__()

    @property
    def url(self) -> str:
        return f"rediss://localhost:{self.port}/0"

    @property
    def plain_url(self) -> str:
        """redis:// to the TLS port: a mistake made on purpose."""
        return f"redis://localhost:{self.port}/0"

    def admin(self) -> redis.Redis:
        """Trusts the server whatever its certificate."""
        return redis.Redis(
            host="localhost",
            port=self.port,
            ssl=True,
            ssl_cert_reqs="none",
            ssl_check_hostname=False,
            ssl_certfile=str(self.pki.client_cert),
            ssl_keyfile=str(self.pki.client_key),
            decode_responses=True,
        )

    def start(self) -> Self:
        command = [self.binary, "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--tls-cert-file", str(self.cert), "--tls-key-file", str(self.pki.server_key)]
        command += ["--tls-ca-cert-file", str(self.pki.ca), "--tls-auth-clients", self.client_certs]
        command += ["--dir", self.dir, "--protected-mode", "no", "--loglevel", "warning", *self.persistence]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        client = self.admin()
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None:
                    err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                    if "TLS" in err and "not" in err.lower():
                        need("redis-server with TLS", f"this redis-server was built without it: {err[-300:]}")
                    raise RuntimeError(f"redis-server with TLS did not start on port {self.port}: {err}") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server with TLS did not start on port {self.port}") from None
                time.sleep(0.05)
        client.close()
        return self
