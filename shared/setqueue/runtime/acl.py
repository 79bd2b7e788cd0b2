"""Least privilege: the Redis ACL rule under which the library, the services and the ``setqueue``
command work, and what a refusal of it means.

The rule (``SERVICE_RULE``; ``setqueue acl-rule`` prints it as an ``ACL SETUSER`` command) gives a
user the keys ``~setqueue:*``, the Pub/Sub channels ``&setqueue:*`` and the commands setqueue runs,
nothing else: no other key, no ``KEYS``/``FLUSHALL``/``CONFIG``/``DEBUG``. ``CONFIG GET`` is left out
on purpose: it hands out the passwords of the server; the eviction policy and memory are read with
``INFO`` instead. Redis checks the commands a script runs against the user too, so the commands of
``lua/`` are in it. ``tests/test_acl.py`` runs the library, the services and the command under a user
with exactly this rule; the compose stack's services run under it.

A user without one of them is refused with ``NOPERM``; inside a script Redis names neither the
script nor the command (only the script's SHA-1 and line), so ``explain_refusal`` finds both.
"""

from __future__ import annotations

import hashlib
import re

from redis import exceptions as rexc

from setqueue.scripts import ACK_KEEPING_RESULTS, SOURCES

# The commands setqueue sends, and why. Redis's ACL names, lower case; a|b is subcommand b of a.
COMMANDS: dict[str, str] = {
    # Connecting: redis-py's health checks, a database of the URL, and HELLO, which asks a node whether
    # it runs a Redis Cluster. (setqueue's client does not send CLIENT SETINFO: Redis 7.0 does not
    # know it, so no rule for 7.0 can grant it.)
    "connection": "ping hello select",
    # Every transition is a script, loaded once and called by its SHA-1.
    "scripts": "evalsha script|load script|exists",
    # What the scripts run (Redis checks each against the user).
    "in scripts": "get set del exists incrby decrby pexpire time hget hmget hset hdel hincrby hlen sadd srem scard "
    "sismember zadd zrem zscore zmscore zcard zcount zrange zpopmin lpush ltrim",
    # What flow control's scripts run besides (the groups' lines read with ZRANGE ... BYLEX and
    # counted with ZLEXCOUNT; pause with HSETNX; the groups set aside; their rates' states trimmed).
    "flow control": "zlexcount hsetnx zremrangebyscore hkeys smembers hexists",
    # What the services and the command run themselves: the sweep's page of in_progress, inspect's
    # snapshot (MULTI), requeue-failed's page of failed, idle workers' BLPOP, WAIT_REPLICAS, the
    # audit, periodic jobs, the sweep stamp, and INFO for the eviction policy and memory.
    "direct": "zscan sscan hgetall smismember pttl blpop multi exec discard wait info",
    # A Redis Cluster client maps the slots and the commands' keys, and follows ASK redirections.
    "cluster": "cluster|slots cluster|shards command asking readonly",
    # Job results and cancel requests travel on Pub/Sub channels setqueue:{Q}:...
    "pubsub": "publish subscribe unsubscribe psubscribe punsubscribe spublish ssubscribe sunsubscribe",
    # The console finds the queues with SCAN (setqueue:{*} keys only, as the key pattern allows) and
    # pages done and the dead letters newest first.
    "console": "scan zrevrange",
}

KEYS_PATTERN = "~setqueue:*"
CHANNELS_PATTERN = "&setqueue:*"


def rule(password: str = "PASSWORD") -> list[str]:
    """The ACL rule of a setqueue user, word by word (``ACL SETUSER <user> <words>``, or the words
    after ``user <name>`` in redis.conf or redis-server's ``--user``)."""
    commands = [f"+{command}" for group in COMMANDS.values() for command in group.split()]
    return ["reset", "on", f">{password}", KEYS_PATTERN, "resetchannels", CHANNELS_PATTERN, "-@all", *commands]


def setuser(user: str = "setqueue", password: str = "PASSWORD") -> str:
    """``ACL SETUSER`` for a setqueue user, as one line to paste into redis-cli."""
    return " ".join(["ACL", "SETUSER", user, *rule(password)])


# Redis's words when a script's command is refused (7.0: "The user executing the script can't run this
# command or subcommand script: <sha>, on @user_script:<line>."; 7.2 names the command).
_IN_SCRIPT = re.compile(r"script: ([0-9a-f]{40}), on @user_script:(\d+)")
_COMMAND = re.compile(r"'([a-z|]+)' command")
_CALL = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'")
_SCRIPT_NAMES = {hashlib.sha1(source.encode()).hexdigest(): name for name, source in SOURCES.items()}
_SCRIPT_NAMES[hashlib.sha1(ACK_KEEPING_RESULTS.encode()).hexdigest()] = "ack"  # the same lines, another first


def explain_refusal(error: Exception) -> str | None:  # noqa: PLR0911 (a return a kind of refusal)
    """One line saying what this user may not do, when ``error`` is Redis refusing it (NOPERM, or
    an ACL failure inside a script); None for any other error."""
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
    name = _SCRIPT_NAMES.get(found[1]) if found else None
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
