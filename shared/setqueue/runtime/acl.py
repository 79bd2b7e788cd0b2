"""Least privilege: the Redis ACL rule setqueue works under, and what a refusal of it means.

The rule gives the keys ``~setqueue:*``, the channels ``&setqueue:*`` and the commands setqueue runs
(its scripts' too: Redis checks them against the user), nothing else. ``CONFIG GET`` is left out on
purpose: it hands out the passwords; memory is read with ``INFO``. tests/test_acl.py runs everything
under exactly this rule. Inside a script, a NOPERM names neither the script nor the command (only the
SHA-1 and line), so ``explain_refusal`` finds both.
"""

from __future__ import annotations

import hashlib
import re

from redis import exceptions as rexc

from setqueue.scripts import ACK_KEEPING_RESULTS, SOURCES

# The commands setqueue sends, by use. Redis's ACL names, lower case; a|b is subcommand b of a.
COMMANDS: dict[str, str] = {
    # HELLO asks a node whether it is in a cluster. (No CLIENT SETINFO: no rule for Redis 7.0 can grant it.)
    "connection": "ping hello select",
    "scripts": "evalsha eval script|load script|exists",
    "in scripts": "get set del exists incrby decrby pexpire time hget hmget hset hdel hincrby hlen sadd srem scard "
    "sismember zadd zrem zscore zmscore zcard zcount zrange zpopmin lpush ltrim lpop llen",
    "limits": "zlexcount hsetnx zremrangebyscore hkeys smembers hexists",
    # Dependencies: an enqueue's staged list (RPUSH, read by the script), a job's entries dropped by range.
    "dependencies": "rpush lrange zremrangebylex",
    # What the services and the command run themselves.
    "direct": "zscan sscan hgetall smismember pttl blpop multi exec discard wait info",
    "cluster": "cluster|slots cluster|shards command asking readonly",
    "pubsub": "publish subscribe unsubscribe psubscribe punsubscribe spublish ssubscribe sunsubscribe",
    "console": "scan zrevrange",
}

KEYS_PATTERN = "~setqueue:*"
CHANNELS_PATTERN = "&setqueue:*"


def rule(password: str = "PASSWORD") -> list[str]:
    """The words of ``ACL SETUSER <user> <words>`` (or of ``user <name>`` in redis.conf)."""
    commands = [f"+{command}" for group in COMMANDS.values() for command in group.split()]
    return ["reset", "on", f">{password}", KEYS_PATTERN, "resetchannels", CHANNELS_PATTERN, "-@all", *commands]


def setuser(user: str = "setqueue", password: str = "PASSWORD") -> str:
    return " ".join(["ACL", "SETUSER", user, *rule(password)])


# A script's command refused: "... script: <sha>, on @user_script:<line>." (7.2 also names the command);
# Valkey 9: "ACL failure in script: ... the '<command>' command script: on @user_script:<line>.", no sha
# (the call marks the error with it: setqueue.script_cache.name_script).
_IN_SCRIPT = re.compile(r"script: (?:([0-9a-f]{40}), )?on @user_script:(\d+)")
_COMMAND = re.compile(r"'([a-z|]+)' command")
_CALL = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'")
_SCRIPT_NAMES = {hashlib.sha1(source.encode()).hexdigest(): name for name, source in SOURCES.items()}
_SCRIPT_NAMES[hashlib.sha1(ACK_KEEPING_RESULTS.encode()).hexdigest()] = "ack"  # the same lines, another first


def explain_refusal(error: Exception) -> str | None:  # noqa: PLR0911 (a return a kind of refusal)
    """One line saying what this user may not do (NOPERM, or an ACL failure in a script); else None."""
    text = str(error)
    if isinstance(error, rexc.NoPermissionError):
        command = _COMMAND.search(text)
        if command:
            return f"this Redis user may not run {command[1].upper()} (NOPERM): {_GRANT}"
        if "key" in text:
            return f"this Redis user may not touch the queue's keys (NOPERM: {text}): it needs {KEYS_PATTERN}"
        if "channel" in text:
            return f"this Redis user may not use the queue's channels (NOPERM: {text}): it needs {CHANNELS_PATTERN}"
        return f"NOPERM: {text}: {_GRANT}"
    lower = text.lower()
    if not isinstance(error, rexc.ResponseError) or not (
        "user executing the script" in lower or "acl failure in script" in lower
    ):
        return None
    found = _IN_SCRIPT.search(text)
    sha = (found[1] if found else None) or getattr(error, "script_sha", None)
    name = _SCRIPT_NAMES.get(sha) if sha else None
    command = _COMMAND.search(text)
    called = command[1].upper() if command else None
    line = int(found[2]) if found else 0
    if called is None and name is not None:
        lines = SOURCES[name].splitlines()
        call = _CALL.search(lines[line - 1]) if 0 < line <= len(lines) else None
        called = call[1].upper() if call else None
    what = called or "one of the commands it runs"
    where = f" in {name}.lua (line {line})" if name else " in a script"
    if "key" in text.split("script:", maxsplit=1)[0] and called is None:
        return f"this Redis user may not touch a key{where}: it needs {KEYS_PATTERN}"
    return f"this Redis user may not run {what}{where}: {_GRANT}"


_GRANT = "grant the setqueue ACL rule (setqueue acl-rule prints it; docs/guide.md#least-privilege)"
