"""Scripts survive the server: a script the server lost from its cache (SCRIPT FLUSH, a failover to a
replica that never saw it, a restart) is loaded again and resent. Every script call of setqueue
(``setqueue.executors``, ``setqueue.aio``, ``setqueue.replication``, the audit) goes through this rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import exceptions as rexc

# A script Redis lost (SCRIPT FLUSH, a failover to a replica that never saw it, a restart) is loaded
# again and resent, so many times in a row at most: one flushed again between its load and its call is
# no outage, and a server that keeps losing it gets the last NOSCRIPT, not an endless loop. On one
# Redis the last attempt is an EVAL of the source, which no flush can come between.
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
    and resend (at most SCRIPT_LOAD_ATTEMPTS loads). Its reply; raises what Redis raised otherwise.

    On one Redis the load and the resend go in one pipeline: Redis runs one client's pipelined commands
    one after the other, so a flush between the two (another client's, or a failover's) is unlikely,
    but not ruled out: Redis reads a script of 40 KB in more than one read, and serves other clients
    between them. So the last attempt is an EVAL of the source, loaded and run in one command (not a
    MULTI: a full Redis refuses whatever a MULTI queues, and our finishing scripts must run then). A
    Cluster client loads on every master, then resends."""
    try:
        return client.evalsha(sha, len(keys), *keys, *args)
    except rexc.ResponseError as exc:
        if not is_noscript(exc):
            name_script(exc, sha)
            raise
    cluster = getattr(client, "cluster_client", None)
    on_one_redis = cluster is None or cluster() is None
    for attempt in range(1, SCRIPT_LOAD_ATTEMPTS + 1):
        try:
            if not on_one_redis:
                client.script_load(source)
                return client.evalsha(sha, len(keys), *keys, *args)
            if attempt == SCRIPT_LOAD_ATTEMPTS:
                return client.eval(source, len(keys), *keys, *args)
            pipe = client.pipeline(transaction=False)
            pipe.script_load(source)
            pipe.evalsha(sha, len(keys), *keys, *args)
            return pipe.execute()[1]
        except rexc.ResponseError as exc:
            if not is_noscript(exc) or attempt == SCRIPT_LOAD_ATTEMPTS:
                name_script(exc, sha)
                raise
    raise AssertionError("unreachable")


def name_script(error: BaseException, sha: str) -> None:
    """Mark ``error``, raised by the script ``sha``, with ``error.script_sha``: Redis names the script in
    an error it raised inside (``script: <sha>``), Valkey 9 does not (``runtime.acl.explain_refusal``)."""
    error.script_sha = sha  # type: ignore[attr-defined]
