"""Scripts survive the server: a script the server lost from its cache (SCRIPT FLUSH, a failover to a
replica that never saw it, a restart) is loaded again and resent. Every script call of setqueue
(``setqueue.executors``, ``setqueue.aio``, ``setqueue.replication``, the audit) goes through this rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import exceptions as rexc

# A script Redis lost (SCRIPT FLUSH, a failover to a replica that never saw it, a restart) is loaded
# again and resent, so many times in a row at most: one flushed again between its load and its call is
# no outage, and a server that keeps losing it gets the last NOSCRIPT, not an endless loop.
SCRIPT_LOAD_ATTEMPTS = 5


def is_noscript(error: BaseException) -> bool:
    """Whether ``error`` is Redis's NOSCRIPT (the script is not in the server's cache), known by its code,
    the reply's first word, never its text (Valkey 8 changed the text): redis-py's NoScriptError is that
    code as it maps it; a plain ResponseError that still starts with the code is one too."""
    if isinstance(error, rexc.NoScriptError):
        return True
    return isinstance(error, rexc.ResponseError) and str(error).split(" ", 1)[0] == "NOSCRIPT"


def call_script(client: Any, sha: str, source: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """EVALSHA of the script ``source`` (its SHA1 ``sha``) on a blocking client; on NOSCRIPT, SCRIPT LOAD
    and resend (at most SCRIPT_LOAD_ATTEMPTS loads). Its reply; raises what Redis raised otherwise."""
    for _ in range(SCRIPT_LOAD_ATTEMPTS):
        try:
            return client.evalsha(sha, len(keys), *keys, *args)
        except rexc.ResponseError as exc:
            if not is_noscript(exc):
                name_script(exc, sha)
                raise
        client.script_load(source)
    return client.evalsha(sha, len(keys), *keys, *args)


def name_script(error: BaseException, sha: str) -> None:
    """Mark ``error``, raised by the script ``sha``, with ``error.script_sha``: Redis names the script in
    an error it raised inside (``script: <sha>``), Valkey 9 does not (``runtime.acl.explain_refusal``)."""
    error.script_sha = sha  # type: ignore[attr-defined]
