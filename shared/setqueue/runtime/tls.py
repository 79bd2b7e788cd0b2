"""What a failed connection to a rediss:// Redis (or a redis:// URL to a Redis that speaks TLS)
means, in one line, so that a service stops with exit code 3 instead of waiting for a Redis that
will never let it in. A failed handshake is no outage: it is not resent (``client.tls_failure``).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from urllib.parse import urlsplit

from redis import exceptions as rexc

from setqueue.client import redact_url, tls_failure

_UNTRUSTED = "the server's certificate is not signed by a CA we trust (set REDIS_TLS_CA_FILE"
_PLAIN = "the server does not speak TLS: use a redis:// URL"
# OpenSSL's words -> what they mean; the first match wins.
_REASONS = (
    ("certificate has expired", "the server's certificate has expired"),
    ("certificate is not yet valid", "the server's certificate is not valid yet"),
    ("hostname mismatch", "the server's certificate is not for this host name"),
    ("ip address mismatch", "the server's certificate is not for this address"),
    ("unable to get local issuer certificate", _UNTRUSTED + " to its CA)"),
    ("self-signed certificate", _UNTRUSTED + ")"),
    ("self signed certificate", _UNTRUSTED + ")"),
    ("certificate required", "the server asks for a client certificate (REDIS_TLS_CERT_FILE, REDIS_TLS_KEY_FILE)"),
    ("wrong version number", _PLAIN),
    ("record layer failure", _PLAIN),
    ("packet length too long", _PLAIN),
)


def _what(error: ssl.SSLError) -> str:
    text = str(getattr(error, "verify_message", None) or "") + " " + str(error)
    for words, meaning in _REASONS:
        if words in text.lower():
            return meaning
    return f"{type(error).__name__}: {error}"


def speaks_tls(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether host:port completes a TLS handshake (certificate not checked)."""
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
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout) as raw:
        raw.sendall(b"PING\r\n")
        return raw.recv(1)[:1] in (b"+", b"-")
    return False


def tls_refusal(error: Exception, url: str) -> str | None:
    """One line when ``error`` is TLS in the way (a failed handshake, the wrong scheme); else None."""
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
