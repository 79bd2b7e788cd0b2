"""TLS on the wire: what a failed connection to a rediss:// Redis (or a redis:// URL to a Redis that
speaks TLS) means, in one line, so that a service stops at start with exit code 3 and the command
says what to fix, instead of both waiting for a Redis that will never let them in.

A rediss:// connection verifies the server's certificate (its chain against REDIS_TLS_CA_FILE or
the system's CAs, and its host name): ``setqueue.client.tls_options``. A handshake that fails is no
outage, so it is not resent (``setqueue.client.tls_failure``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from urllib.parse import urlsplit

from redis import exceptions as rexc

from setqueue.client import redact_url, tls_failure

# OpenSSL's words -> what they mean for the user, the first that matches.
_REASONS = (
    ("certificate has expired", "the server's certificate has expired"),
    ("certificate is not yet valid", "the server's certificate is not valid yet"),
    ("hostname mismatch", "the server's certificate is not for this host name"),
    ("ip address mismatch", "the server's certificate is not for this address"),
    (
        "unable to get local issuer certificate",
        "the server's certificate is not signed by a CA we trust (set REDIS_TLS_CA_FILE to its CA)",
    ),
    ("self-signed certificate", "the server's certificate is not signed by a CA we trust (set REDIS_TLS_CA_FILE)"),
    ("self signed certificate", "the server's certificate is not signed by a CA we trust (set REDIS_TLS_CA_FILE)"),
    ("certificate required", "the server asks for a client certificate (REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE)"),
    ("wrong version number", "the server does not speak TLS: use a redis:// URL"),
    ("record layer failure", "the server does not speak TLS: use a redis:// URL"),
    ("packet length too long", "the server does not speak TLS: use a redis:// URL"),
)


def _what(error: ssl.SSLError) -> str:
    text = str(getattr(error, "verify_message", None) or "") + " " + str(error)
    for words, meaning in _REASONS:
        if words in text.lower():
            return meaning
    return f"{type(error).__name__}: {error}"


def speaks_tls(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether the server at host:port completes a TLS handshake (its certificate not checked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        contextlib.suppress(OSError),
        socket.create_connection((host, port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=host),
    ):
        return True
    return False


def speaks_plain_redis(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether the server at host:port answers a plain-text PING (any Redis reply)."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout) as raw:
        raw.sendall(b"PING\r\n")
        return raw.recv(1)[:1] in (b"+", b"-")
    return False


def tls_refusal(error: Exception, url: str) -> str | None:
    """One line when ``error`` (from a call to ``url``) is TLS getting in the way: a handshake that
    failed, a redis:// URL to a Redis that speaks TLS, or a rediss:// URL to one that does not.
    None for anything else (an outage)."""
    where = redact_url(url)
    failure = tls_failure(error)
    if failure is not None:
        return f"the TLS handshake with Redis at {where} failed: {_what(failure)}"
    if not isinstance(error, rexc.ConnectionError | rexc.TimeoutError) or "refused" in str(error).lower():
        return None  # nothing listens there, or an outage: not TLS
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "localhost", parts.port or 6379
    except ValueError:
        return None
    if parts.scheme == "redis" and speaks_tls(host, port):
        return f"Redis at {where} speaks TLS: use a rediss:// URL (and REDIS_TLS_CA_FILE for the CA of its certificate)"
    if parts.scheme == "rediss" and speaks_plain_redis(host, port):
        return f"Redis at {where} does not speak TLS: use a redis:// URL"
    return None
