"""The Lua scripts of ``lua/`` and the one place that knows how each is called.

A script's header is its contract: comments document keys, args and reply, then locals name each
KEYS and ARGV entry in order (``local request, todos = KEYS[1], KEYS[2]``); a variable-length list
starts at a named constant (``local FIRST_LOCK = 10  -- KEYS[FIRST_LOCK..]``). No body line indexes
KEYS/ARGV by number or arithmetic. KEYS names are ``QueueKeys`` properties (or the per-call
``request``, ``lock``), so KEYS lists are built from header and layout. ``-- @include "<name>"``
inlines ``lua/includes/<name>.lua`` once per script. A broken header, unknown key or bad include
fails the import."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Protocol, TypeVar

import redis

from setqueue.keys import LINKS_PER_CALL, STATES, QueueKeys, priority_of_rank
from setqueue.limits import LIMIT_STATS
from setqueue.steps import ReplicaWait, RunScript, Steps, text

NAMES = (
    "enqueue",
    "claim",
    "renew",
    "ack",
    "fail",
    "sweep",
    "requeue_failed",
    "delete",
    "stats",
    "periodic",
    "cancel",
    "progress",
    "set_limits",
    "list_groups",
    "register",
    "depend",
    "arrive",
    "release",
    "forget",
    "lookup",
    "drain",
)

# The scripts that write nothing, which a ReplicaWait leaves alone.
READ_ONLY = frozenset({"stats", "list_groups", "lookup"})


__all__ = ["CONTRACTS", "NAMES", "SOURCES", "QueueCommands", "ScriptContractError", "new_request_id", "text"]


class ScriptContractError(RuntimeError):
    """Includes or a header that do not hold together, or a call that does not match its header."""


# -- loading

_INCLUDE_LINE = re.compile(r"\s*-{2,3}\s*@include\b.*")
_INCLUDE = re.compile(r'\s*-{2,3}\s*@include\s+"([\w-]+)"\s*')


def resolve_includes(source: str, read_include: Callable[[str], str], origin: str) -> str:
    """``source`` with its includes inlined; ScriptContractError for a malformed, missing or circular one."""
    seen: set[str] = set()

    def expand(text: str, stack: tuple[str, ...]) -> list[str]:
        lines: list[str] = []
        for number, line in enumerate(text.splitlines(), 1):
            if not _INCLUDE_LINE.fullmatch(line):
                lines.append(line)
                continue
            where = f"{' -> '.join(stack)}, line {number}"
            match = _INCLUDE.fullmatch(line)
            if match is None:
                raise ScriptContractError(f'{where}: malformed include {line.strip()!r} (want: -- @include "<name>")')
            name = match[1]
            if name in stack:
                raise ScriptContractError(f"{where}: circular include {' -> '.join((*stack, name))}")
            if name in seen:
                continue
            seen.add(name)
            try:
                included = read_include(name)
            except FileNotFoundError:
                raise ScriptContractError(f'{where}: -- @include "{name}": no file includes/{name}.lua') from None
            lines += expand(included, (*stack, name))
        return lines

    return "\n".join(expand(source, (origin,))) + "\n"


def _read_packaged(path: str) -> str:
    file = resources.files("setqueue").joinpath("lua", *path.split("/"))
    if not file.is_file():
        raise FileNotFoundError(path)
    return file.read_text()


def load(name: str, read: Callable[[str], str] = _read_packaged) -> str:
    """``lua/<name>.lua`` with its includes resolved; ``read`` reads a path under ``lua/``."""
    return resolve_includes(read(f"{name}.lua"), lambda include: read(f"includes/{include}.lua"), f"{name}.lua")


@dataclass(frozen=True, slots=True)
class Contract:
    keys: tuple[str, ...]  # the names of KEYS[1], ...
    args: tuple[str, ...]
    key_tail: str | None  # the constant starting a variable-length list in KEYS (at len(keys) + 1)
    arg_tail: str | None


_TAIL = re.compile(r"local\s+([A-Z][A-Z0-9_]*)\s*=\s*(\d+)\s*--\s*(KEYS|ARGV)\[\1\.\.\].*")
_LOCALS = re.compile(r"local\s+(\w+(?:\s*,\s*\w+)*)\s*=\s*(.+?)\s*(?:--.*)?")
_ENTRY = re.compile(r"(?:tonumber\(\s*)?(KEYS|ARGV)\[(\d+)\](?:\s*\))?")
_INDEXED = re.compile(r"\b(KEYS|ARGV)\[([^\]]*)\]")
_ARITHMETIC = re.compile(r"[-+*/%]")


def parse_contract(name: str, source: str) -> Contract:
    """The names a script's header gives KEYS and ARGV; ScriptContractError where it breaks the module
    docstring's rules."""
    named: dict[str, list[tuple[int, str]]] = {"KEYS": [], "ARGV": []}
    tails: dict[str, tuple[str, int]] = {}
    lines = source.splitlines()
    body_starts = len(lines)
    for number, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith(("--", "#!")):
            continue
        tail = _TAIL.fullmatch(line)
        if tail is not None:
            if tail[3] in tails:
                raise ScriptContractError(f"{name}.lua: two variable-length lists in {tail[3]}")
            tails[tail[3]] = (tail[1], int(tail[2]))
            continue
        statement = _LOCALS.fullmatch(line)
        if statement is None:
            body_starts = number
            break
        names = [n.strip() for n in statement[1].split(",")]
        values = [v.strip() for v in statement[2].split(",")]
        entries = [entry for entry in map(_ENTRY.fullmatch, values) if entry is not None]
        if not entries:
            body_starts = number
            break
        if len(names) != len(values) or len(entries) != len(values):
            raise ScriptContractError(f"{name}.lua line {number + 1}: name each KEYS/ARGV entry alone: {line}")
        for local, entry in zip(names, entries, strict=True):
            named[entry[1]].append((int(entry[2]), local))
    for table, listed in named.items():
        if [index for index, _ in listed] != list(range(1, len(listed) + 1)):
            raise ScriptContractError(f"{name}.lua: the header names {table} out of order: {listed}")
        if table in tails and tails[table][1] != len(listed) + 1:
            constant, first = tails[table]
            raise ScriptContractError(
                f"{name}.lua: {constant} = {first}, but the header names {len(listed)} {table} entries before it"
            )
    for number, raw in enumerate(lines, 1):
        code = raw.split("--", 1)[0]
        for table, index in _INDEXED.findall(code):
            if _ARITHMETIC.search(index):
                raise ScriptContractError(f"{name}.lua line {number}: {table}[{index}]: index arithmetic")
            if index.strip().isdigit() and number > body_starts:
                raise ScriptContractError(f"{name}.lua line {number}: {table}[{index}] below the header")
    return Contract(
        keys=tuple(local for _, local in named["KEYS"]),
        args=tuple(local for _, local in named["ARGV"]),
        key_tail=tails["KEYS"][0] if "KEYS" in tails else None,
        arg_tail=tails["ARGV"][0] if "ARGV" in tails else None,
    )


# The KEYS a call names itself (its request record, one claim's lock, its dependency list); the rest
# are layout keys.
PER_CALL_KEYS = ("request", "lock", "staging")


def layout_key_names() -> frozenset[str]:
    """The ``QueueKeys`` properties that name one key."""
    return frozenset(
        name for name, value in vars(QueueKeys).items() if isinstance(value, property) and name != "prefix"
    )


def check_layout(name: str, contract: Contract, layout: frozenset[str]) -> None:
    """Every KEYS name is a layout key or a per-call one."""
    unknown = [key for key in contract.keys if key not in layout and key not in PER_CALL_KEYS]
    if unknown:
        raise ScriptContractError(
            f"{name}.lua names KEYS {unknown} that the key layout (setqueue.keys.QueueKeys) does not have"
        )


SOURCES: dict[str, str] = {name: load(name) for name in NAMES}
CONTRACTS: dict[str, Contract] = {name: parse_contract(name, SOURCES[name]) for name in NAMES}
for _name, _contract in CONTRACTS.items():
    check_layout(_name, _contract, layout_key_names())


# ack.lua without allow-oom: an ack keeping results is sent as this first (see ack.lua).
ACK_KEEPING_RESULTS = "#!lua\n" + SOURCES["ack"].partition("\n")[2]


# -- calling


def new_request_id() -> str:
    """A fresh id for one claim, ack_many, fail or release: passing it again retries that call."""
    return os.urandom(12).hex()


_identity: tuple[int, str] = (0, "")


def identity() -> str:
    """``host:pid`` of this process (recomputed after a fork)."""
    global _identity
    pid = os.getpid()
    if _identity[0] != pid:
        _identity = (pid, f"{socket.gethostname()}:{pid}")
    return _identity[1]


def new_token() -> str:
    """A fresh claim token ending in ``@host:pid``, so history can name the worker that held a claim."""
    return f"{new_request_id()}@{identity()}"


def check_call(name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
    """ScriptContractError, before anything is sent, when a call's KEYS or ARGV count does not match the
    script's header."""
    c = CONTRACTS[name]
    for table, given, named, tail in (("KEYS", keys, c.keys, c.key_tail), ("ARGV", args, c.args, c.arg_tail)):
        if len(given) != len(named) and not (tail and len(given) > len(named)):
            wanted = f"{len(named)}{' or more' if tail else ''}"
            raise ScriptContractError(f"{name}.lua takes {wanted} {table} ({', '.join(named)}), given {len(given)}")


class Held(Protocol):
    """A lease as the scripts see it."""

    @property
    def id(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def enqueued_at(self) -> float | None: ...
    @property
    def attempt(self) -> int: ...
    @property
    def payload(self) -> str | None: ...


L = TypeVar("L")


@dataclass(frozen=True, slots=True)
class ClaimHeader:
    """A claim's reply besides its jobs (see claim.lua's Returns), times in seconds."""

    now: float  # the Redis clock
    next_at: float | None  # when more could be claimed, if the claim came back short (None: when woken)
    held: str | None  # what held jobs back: "paused", "rate", "group" (None: nothing)
    limited: bool  # a rate or group limits exist (workers then claim only for free slots)


# claim.lua's reply: CLAIM_HEADER fields (now ms, next ms, held, limited), then CLAIM_JOB fields per
# job (id, attempt, enqueue ms, rank, payload, own options; attempt, enqueue ms and rank as numbers or
# as the strings Redis holds them in).
CLAIM_HEADER = 4
CLAIM_JOB = 6
# stats.lua's reply: its first STATS_RECORDED fields end with the releases recorded (see stats.lua).
STATS_RECORDED = 10


def _claims(keys: QueueKeys, tokens: Iterable[str]) -> tuple[dict[str, int], list[str], list[Any]]:
    """The claims list (lua/includes/claims.lua): token -> claim number, lock keys, ``T, token, ...``."""
    numbers: dict[str, int] = {}
    for token in tokens:
        numbers.setdefault(token, len(numbers) + 1)
    return numbers, [keys.lock(token) for token in numbers], [len(numbers), *numbers]


class QueueCommands:
    """The script calls of one queue (one shard), sans-I/O: each method is a generator of ``Steps``
    that builds KEYS from the script's header and the key layout and ARGV in header order, yields one
    ``RunScript`` and decodes its reply. Batching is the caller's (at most MAX_IDS_PER_CALL ids a call).

    ``wait``: confirm every writing script on replicas (``ReplicaWait``); None: do not wait."""

    def __init__(self, keys: QueueKeys, wait: ReplicaWait | None = None) -> None:
        self.k = keys
        self.wait = wait
        # Per script: its KEYS with the layout's filled in, and where the per-call ones go.
        self._templates: dict[str, tuple[list[str], dict[str, int]]] = {}
        for name, contract in CONTRACTS.items():
            per_call = {key: index for index, key in enumerate(contract.keys) if key in PER_CALL_KEYS}
            template = ["" if key in per_call else getattr(keys, key) for key in contract.keys]
            self._templates[name] = (template, per_call)

    def _keys(self, name: str, tail: Sequence[str] = (), **per_call: str) -> list[str]:
        """KEYS of one call in header order: layout keys, the per-call ones given, then ``tail``."""
        template, slots = self._templates[name]
        if per_call.keys() != slots.keys():
            raise ScriptContractError(f"{name}.lua takes the per-call keys {sorted(slots)}, given {sorted(per_call)}")
        keys = template.copy()
        for key, index in slots.items():
            keys[index] = per_call[key]
        keys += tail
        return keys

    def _run(self, name: str, keys: Sequence[str], args: Sequence[Any], source: str | None = None) -> RunScript:
        check_call(name, keys, args)
        wait = None if name in READ_ONLY else self.wait
        return RunScript(name, SOURCES[name] if source is None else source, keys, args, wait)

    def _request(self, request_id: str | None) -> str:
        return self.k.request(request_id or new_request_id())

    def enqueue(
        self,
        jobs: Sequence[tuple[str, str | None]],
        *,
        with_payloads: bool,
        request_ttl_ms: int,
        wake_cap: int,
        delay_ms: int = 0,
        at_ms: int | None = None,
        priority: int = 0,
        job_options: str = "",
        group: str = "",
        if_exists: str = "ignore",
        dependencies: tuple[int, str] | None = None,
        links: Sequence[str] = (),
        request_id: str | None = None,
    ) -> Steps[Enqueued]:
        """enqueue.lua: how many of ``jobs`` (id, payload or None) were new (a rerun counts as new), and
        what registering here did (``Enqueued``); ``if_exists``: what a known id does (see enqueue.lua's
        header); ``dependencies``: (how many, "fail" or "run") when the jobs wait for some (they go to
        waiting); their ``links`` ("<queue> <id>"), when all are of this queue and few, registered in
        this call (only with if_exists "ignore"), else staged in ``staging(request_id)`` beforehand for
        ``register`` to copy and register; ``request_id``: as for ack, and the generation of the links
        the call makes. ScriptContractError for a reply of another shape."""
        request_id = request_id or new_request_id()
        count, mode = dependencies if dependencies is not None else ("", "")
        args: list[Any] = [
            request_ttl_ms,
            wake_cap,
            "1" if with_payloads else "0",
            delay_ms,
            "" if at_ms is None else at_ms,
            priority,
            job_options,
            group,
            if_exists,
            count,
            mode,
            request_id,  # the generation of the links the call makes
            "\n".join(links),
            self.k.ended_channel,
        ]
        for job_id, payload in jobs:
            args.append(job_id)
            if with_payloads:
                args.append(payload)
        keys = self._keys("enqueue", request=self._request(request_id))
        match json.loads((yield self._run("enqueue", keys, args))):
            case ["unknown", dependency]:
                return Enqueued(0, Told(), [], unknown=text(dependency))
            case ["staged"]:
                return Enqueued(0, Told(), [], staged=True)
            case [added]:  # no links touched
                return Enqueued(int(added), Told(), [])
            case [added, released, failed, releases]:
                return Enqueued(int(added), Told(int(released), int(failed)), _strings(releases))
            case reply:
                raise ScriptContractError(f"enqueue.lua replied {reply!r}")

    def claim(
        self,
        most: int,
        make: Callable[[str, str, int, str | None, float | None, float, int, str | None], L],
        *,
        request_ttl_ms: int,
        lease_ms: int,
        promote: int,
        wake_cap: int,
        token: str | None = None,
    ) -> Steps[tuple[list[L], ClaimHeader]]:
        """claim.lua: up to ``most`` jobs, each as ``make(id, token, attempt, payload, enqueued_at,
        claimed_at, priority, own options)``, in line order, and the reply's header."""
        k = self.k
        # A caller's request id gets "@host:pid" too: the same id, the same token, so a resend is recognised.
        token = new_token() if token is None else token if "@" in token else f"{token}@{identity()}"
        keys = self._keys("claim", request=k.request(token), lock=k.lock(token))
        args = [request_ttl_ms, token, lease_ms, most, promote, wake_cap, self.k.name]
        reply = yield self._run("claim", keys, args)
        now_ms, next_ms, held, limited = reply[:CLAIM_HEADER]
        now = now_ms / 1000
        header = ClaimHeader(now, next_ms / 1000 if next_ms >= 0 else None, text(held) or None, limited == 1)
        jobs = reply[CLAIM_HEADER:]
        leases = []
        for start in range(0, len(jobs), CLAIM_JOB):
            job_id, attempt, enqueued_text, rank, payload, own = jobs[start : start + CLAIM_JOB]
            enqueued_ms = float(enqueued_text)
            enqueued_at = enqueued_ms / 1000 if enqueued_ms >= 0 else None
            priority = priority_of_rank(float(rank))
            payload_text = None if payload is None else text(payload)
            own_text = None if own is None else text(own)
            leases.append(make(text(job_id), token, int(attempt), payload_text, enqueued_at, now, priority, own_text))
        return leases, header

    def renew(self, leases: Sequence[Held], *, lease_ms: int) -> Steps[list[int]]:
        """renew.lua: per lease 1 renewed, 0 lost, 2 cancelled."""
        claims, locks, listed = _claims(self.k, (lease.token for lease in leases))
        args: list[Any] = [lease_ms, *listed]
        for lease in leases:
            args += [lease.id, claims[lease.token]]
        reply = yield self._run("renew", self._keys("renew", locks), args)
        return [int(r) for r in reply]

    def ack(
        self,
        leases: Sequence[Held],
        results: Sequence[str | None],
        *,
        request_ttl_ms: int,
        done_max_count: int,
        payload_keep_bytes: int,
        result_ttl_ms: int,
        wake_cap: int,
        request_id: str | None = None,
    ) -> Steps[AckReply]:
        """ack.lua (``AckReply``). ``results``: encoded, None for nothing to keep. A payload of at most
        ``payload_keep_bytes`` (UTF-8) stays with its job in done."""
        claims, locks, listed = _claims(self.k, (lease.token for lease in leases))
        keys = self._keys("ack", locks, request=self._request(request_id))
        per_lease: list[Any] = []
        for lease, result in zip(leases, results, strict=True):
            enqueued = lease.enqueued_at
            enqueued_ms = "" if enqueued is None else round(enqueued * 1000)
            payload = lease.payload
            keep = payload is not None and len(payload.encode("utf-8")) <= payload_keep_bytes
            per_lease += [lease.id, claims[lease.token], enqueued_ms, lease.attempt, result or "", "1" if keep else ""]

        def args(drop_results: bool) -> list[Any]:
            channel = self.k.ended_channel
            drop = "1" if drop_results else "0"
            return [
                request_ttl_ms,
                done_max_count,
                result_ttl_ms,
                channel,
                wake_cap,
                drop,
                self.k.name,
                LINKS_PER_CALL,
                *listed,
                *per_lease,
            ]

        dropped = False
        if result_ttl_ms > 0 and any(results):
            try:  # refused whole, writing nothing, when Redis is full
                reply = yield self._run("ack", keys, args(drop_results=False), source=ACK_KEEPING_RESULTS)
            except redis.OutOfMemoryError:
                dropped = True  # the same request record: the refused call wrote none
                reply = yield self._run("ack", keys, args(drop_results=True))
        else:
            reply = yield self._run("ack", keys, args(drop_results=False))
        first, *lines = text(reply).split("\n")
        now_ms, flags, released, failed = first.split(" ")
        told, read = [], {}
        for line in lines:  # "<id>", or "<id>\0<dependent elsewhere>\0..." when all were read
            job_id, *elsewhere = line.split("\0")
            told.append(job_id)
            if elsewhere:
                read[job_id] = elsewhere
        flagged = [flag == "1" for flag in flags]
        return AckReply(int(now_ms) / 1000, flagged, dropped, told, read, int(released), int(failed))

    def fail(
        self,
        items: Sequence[tuple[Held, str, str, int]],
        *,
        request_ttl_ms: int,
        max_attempts: int,
        wake_cap: int,
        request_id: str | None = None,
    ) -> Steps[tuple[list[str], list[str]]]:
        """fail.lua for each (lease, mode "retry"/"dead"/"release", reason, delay ms): each outcome, and
        the dead-lettered ids whose dependents are to be told (``release``)."""
        claims, locks, listed = _claims(self.k, (item[0].token for item in items))
        keys = self._keys("fail", locks, request=self._request(request_id))
        args: list[Any] = [request_ttl_ms, max_attempts, wake_cap, self.k.ended_channel, *listed]
        for lease, mode, reason, delay_ms in items:
            args += [lease.id, claims[lease.token], mode, reason, delay_ms]
        reply = yield self._run("fail", keys, args)
        first, *told = text(reply).split("\n")
        return first.split(" "), told

    def sweep(
        self,
        candidates: Sequence[str],
        owners: Sequence[str | None],
        *,
        request_ttl_ms: int,
        max_attempts: int,
        wake_cap: int,
        done_max_age_ms: int,
        trim_limit: int,
    ) -> Steps[tuple[list[str], list[str], int, int, list[str]]]:
        """sweep.lua: requeued and dead-lettered ids of ``candidates`` (with owners as read; None: none),
        how many ids were trimmed from done, how many promoted from scheduled, and the dead-lettered ids
        whose dependents are to be told (``release``)."""
        claims, locks, listed = _claims(self.k, (o for o in owners if o is not None))
        keys = self._keys("sweep", locks, request=self._request(None))
        args: list[Any] = [
            request_ttl_ms,
            max_attempts,
            wake_cap,
            done_max_age_ms,
            trim_limit,
            identity(),
            self.k.ended_channel,
            self.k.name,
            *listed,
        ]
        for candidate, owner in zip(candidates, owners, strict=True):
            args += [candidate, 0 if owner is None else claims[owner]]
        reply = yield self._run("sweep", keys, args)
        requeued, dead, trimmed, promoted, told = json.loads(reply)
        return list(requeued), list(dead), int(trimmed), int(promoted), _strings(told)

    def requeue_failed(self, ids: Sequence[str], *, request_ttl_ms: int, wake_cap: int) -> Steps[int]:
        """requeue_failed.lua: how many of ``ids`` moved from failed back to todos."""
        keys = self._keys("requeue_failed", request=self._request(None))
        reply = yield self._run("requeue_failed", keys, [request_ttl_ms, wake_cap, identity(), *ids])
        return int(json.loads(reply)[0])

    def delete(
        self, job_id: str, token: str | None, *, request_ttl_ms: int, wake_cap: int
    ) -> Steps[tuple[str | None, bool]]:
        """delete.lua: the state ``job_id`` was in, or None, and whether its dependents are to be told
        (``release``); ``token``: its owner as read (None: none)."""
        args = [request_ttl_ms, job_id, token or "", wake_cap]
        return (yield from self._end("delete", token, args))

    def cancel(
        self, job_id: str, token: str | None, *, request_ttl_ms: int, wake_cap: int
    ) -> Steps[tuple[str | None, bool]]:
        """cancel.lua: as ``delete``, cancelling; a running job's worker is told on the cancel channel."""
        k = self.k
        args = [request_ttl_ms, job_id, token or "", identity(), k.ended_channel, k.cancel_channel, wake_cap]
        return (yield from self._end("cancel", token, args))

    def _end(self, name: str, token: str | None, args: list[Any]) -> Steps[tuple[str | None, bool]]:
        keys = self._keys(name, request=self._request(None), lock=self.k.lock(token or "-"))
        reply = yield self._run(name, keys, args)
        state, told = json.loads(reply)
        return state or None, bool(told)

    def drain(self) -> Steps[int]:
        """drain.lua: the releases acks recorded, moved to the line (up to DRAIN_MOST); how many joined."""
        return int((yield self._run("drain", self._keys("drain"), [self.k.name])))

    def stats(self) -> Steps[tuple[dict[str, int], int, dict[int, int]]]:
        """stats.lua: state sizes, results kept, limits; oldest pending age (ms); todos per priority.
        Releases acks recorded are moved to the line first (drain.lua, when stats.lua counts any), so
        that a released job counts in todos once its dependency's ack has returned."""
        reply = yield self._run("stats", self._keys("stats"), [])
        *_, recorded = reply[:STATS_RECORDED]
        if recorded:
            yield from self.drain()
            reply = yield self._run("stats", self._keys("stats"), [])
        todos, in_progress, done, failed, age_ms, scheduled, cancelled, results, waiting, _recorded, *rest = reply
        limits, by_priority = rest[: len(LIMIT_STATS)], rest[len(LIMIT_STATS) :]
        sizes = {**dict(zip(LIMIT_STATS, limits, strict=True)), "results_kept": results}
        sizes.update(zip(STATES, (todos, in_progress, done, failed, scheduled, cancelled, waiting), strict=True))
        return sizes, age_ms, dict(zip(by_priority[::2], by_priority[1::2], strict=True))

    def set_limits(self, what: str, value: str, *, wake_cap: int) -> Steps[bool]:
        """set_limits.lua: set one limits field (``what``: pause, resume, rate, group_concurrency,
        group_rate, group:<name>) to ``value``; whether it changed the queue's state (pause/resume)."""
        reply = yield self._run("set_limits", self._keys("set_limits"), [wake_cap, what, value])
        return bool(reply)

    def list_groups(self, most: int) -> Steps[tuple[int, list[tuple[str, int, int, str]]]]:
        """list_groups.lua: how many groups there are, and up to ``most`` as (name, waiting, running, state)."""
        reply = yield self._run("list_groups", self._keys("list_groups"), [most])
        total, *flat = reply
        rows = [
            (text(name), int(waiting), int(running), text(state))
            for name, waiting, running, state in zip(flat[0::4], flat[1::4], flat[2::4], flat[3::4], strict=True)
        ]
        return int(total), rows

    def progress(self, lease: Held, fraction: float, message: str) -> Steps[bool]:
        """progress.lua: keep a progress report; False when the lease no longer owns the job."""
        keys = self._keys("progress")
        reply = yield self._run("progress", keys, [lease.id, lease.token, repr(fraction), message])
        return bool(reply)

    def periodic(
        self, runs: Sequence[tuple[str, int, str, str | None]], *, request_ttl_ms: int, wake_cap: int
    ) -> Steps[tuple[list[str], list[str]]]:
        """periodic.lua for each (schedule name, slot ms, run id, payload): the names whose run was
        created, and those seen for the first time (slot recorded, no run)."""
        keys = self._keys("periodic", request=self._request(None))
        args: list[Any] = [request_ttl_ms, wake_cap]
        for name, slot_ms, run_id, payload in runs:
            args += [name, slot_ms, run_id, "" if payload is None else payload]
        reply = yield self._run("periodic", keys, args)
        created, first_seen = json.loads(reply)
        return [text(n) for n in created or ()], [text(n) for n in first_seen or ()]

    # -- dependencies (lua/includes/links.lua)

    def register(
        self, job_id: str, generation: str, start: int | None, *, page: int, wake_cap: int
    ) -> Steps[RegisterPage]:
        """register.lua: copy and register the page of waiting job ``job_id``'s dependencies from index
        ``start`` of its enqueue call's staging list (``generation``: that call's request id; None
        start: finish, once the caller registered the others)."""
        k = self.k
        args = [k.name, wake_cap, k.ended_channel, job_id, "end" if start is None else start, page, generation]
        keys = self._keys("register", staging=k.staging(generation))
        reply = json.loads((yield self._run("register", keys, args)))
        next_start, generation, elsewhere, releases, released, failed, busy = reply
        return RegisterPage(
            None if next_start < 0 else int(next_start),
            str(generation),
            _strings(elsewhere),
            _strings(releases),
            Told(int(released), int(failed)),
            _strings(busy),
        )

    def lookup(self, job_ids: Sequence[str]) -> Steps[list[str | None]]:
        """lookup.lua: the state of each of ``job_ids`` (keys.STATES), None for one no state holds."""
        reply = yield self._run("lookup", self._keys("lookup"), list(job_ids))
        return [text(state) or None for state in reply]

    def depend(self, dependent: str, job_ids: Sequence[str]) -> Steps[list[str]]:
        """depend.lua: ``dependent`` ("<queue> <generation> <id>") waits for ``job_ids`` of this queue;
        per id how it ended ("done", "failed", "cancelled", "unknown"), "busy" (an earlier run of it is
        still being forgotten: nothing written, ask again once that is done) or "" (registered: it
        tells)."""
        reply = yield self._run("depend", self._keys("depend"), [dependent, *job_ids])
        return _strings(json.loads(reply))

    def arrive(self, arrivals: Sequence[tuple[str, str, str, str]], *, wake_cap: int) -> Steps[tuple[list[str], Told]]:
        """arrive.lua for each (dependent id, its generation, dependency link, outcome): the ids whose own
        dependents are to be told now (``release``), and how many were released and failed."""
        args: list[Any] = [wake_cap, self.k.ended_channel]
        for arrival in arrivals:
            args += arrival
        releases, released, failed = json.loads((yield self._run("arrive", self._keys("arrive"), args)))
        return _strings(releases), Told(int(released), int(failed))

    def release(
        self, jobs: Sequence[tuple[str, str | None]], *, page: int, wake_cap: int
    ) -> Steps[tuple[list[ReleaseRead], list[str], Told]]:
        """release.lua: tell ended jobs' dependents, at most ``page`` of them: per (id, after) the
        dependents following ``after`` (the last one told; "" first; None: finish, once the caller told
        the others). Returns what was read of each, ids whose dependents are to be told in turn, and how
        many dependents were released and failed."""
        k = self.k
        args: list[Any] = [k.name, wake_cap, k.ended_channel, page]
        for job_id, after in jobs:
            args += [job_id, "end" if after is None else after]
        reads, releases, released, failed = json.loads((yield self._run("release", self._keys("release"), args)))
        out = [
            ReleaseRead(text(job_id), text(last), bool(more), text(outcome), _strings(elsewhere))
            for job_id, last, more, outcome, elsewhere in reads
        ]
        return out, _strings(releases), Told(int(released), int(failed))

    def forget(self, job_ids: Sequence[str], *, page: int) -> Steps[list[str]]:
        """forget.lua: drop at most ``page`` entries of ``job_ids`` that are in ``forgetting`` (forgotten with
        many dependencies or dependents); the ids still in it afterwards."""
        reply = yield self._run("forget", self._keys("forget"), [page, *job_ids])
        return _strings(json.loads(reply))


@dataclass(frozen=True, slots=True)
class Told:
    """What a script's telling did to dependents: how many it released (to the line or scheduled) and
    how many it failed (a dependency that did not end done, with if_dependency_fails "fail")."""

    released: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class AckReply:
    """ack.lua's reply: the Redis clock (s), per lease whether acked, whether results were dropped
    because Redis is full, the ids whose dependents are still to be told (``release``), of those the
    ones whose dependents were all read, with their dependents in other queues ("<queue> <generation>
    <id>", to tell there and then only finish), and how many dependents it released and failed itself."""

    now: float
    acked: list[bool]
    dropped: bool
    told: list[str]
    read: dict[str, list[str]]
    released: int
    failed: int


@dataclass(frozen=True, slots=True)
class Enqueued:
    """enqueue.lua's reply: how many ids were new; with links registered in the call, what that told
    (dependencies that had ended: released or failed jobs) and the ids whose own dependents are then
    to be told; or, nothing written, the first ``unknown`` dependency, or ``staged``: register the
    staged way (a dependency, or a new id, whose earlier run is still being forgotten)."""

    added: int
    told: Told
    releases: list[str]
    unknown: str | None = None
    staged: bool = False


@dataclass(frozen=True, slots=True)
class LinkPlan:
    """How the jobs of an enqueue register with their dependencies: ``links`` ("<queue> <id>", each
    once, in order), in the enqueue call itself (``one_call``: enqueue.lua's given_links) or staged
    first and registered after (register.lua)."""

    links: list[str]
    one_call: bool


class EnqueueCall(Protocol):
    """One enqueue.lua call with all but its links bound (``functools.partial`` of
    ``QueueCommands.enqueue``): ``links`` to register in the call, or none (staged beforehand)."""

    def __call__(self, *, links: Sequence[str] = ()) -> Steps[Enqueued]: ...


@dataclass(frozen=True, slots=True)
class RegisterPage:
    """register.lua's reply: where the next page starts (None: no more), the job's generation, the
    dependencies of other queues in this page ("<queue> <id>"), ids whose dependents are to be told,
    and dependencies of this queue whose earlier run is still being forgotten (the caller finishes
    that, then asks for the same page again: ``next_start`` is where this one started)."""

    next_start: int | None
    generation: str
    elsewhere: list[str]
    releases: list[str]
    told: Told
    busy: list[str]


@dataclass(frozen=True, slots=True)
class ReleaseRead:
    """What release.lua read of one ended job's dependents: the last one told (``after``), whether
    more may follow it, how the job ended ("": it is not being released), and its dependents in other
    queues read now ("<queue> <generation> <id>")."""

    id: str
    after: str
    more: bool
    outcome: str
    elsewhere: list[str]


def _strings(items: Any) -> list[str]:
    """A JSON array from a script as a list of str (cjson encodes an empty Lua table as {})."""
    return [text(item) for item in items] if isinstance(items, list) else []
