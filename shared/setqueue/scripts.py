"""The Lua scripts of ``lua/`` and their Python side: the one place that knows how each is called.

The contract between a script and Python is its header. A comment block documents every key, every
arg and the reply; right below it, locals name each entry of KEYS and ARGV::

    local request, todos, in_progress = KEYS[1], KEYS[2], KEYS[3]
    local FIRST_LOCK = 10  -- KEYS[FIRST_LOCK..] lock key of each claim
    local record_ttl, max_attempts = ARGV[1], tonumber(ARGV[2])

A variable-length list (the lock keys of the claims, the tokens, the leases) starts at a named constant
like ``FIRST_LOCK``, and the body reads it in a loop from there: no body line indexes KEYS or ARGV
with a number or with arithmetic. The names of KEYS are the key layout's: each is a key of
``QueueKeys`` of that name, except the two a call names itself, ``request`` (this call's request
record) and ``lock`` (one claim's lock); so the Python side builds every KEYS list from the header
and the layout, and a header naming a key the layout does not have fails the import of this module.

Helpers several scripts share live in ``lua/includes/<name>.lua`` and are pulled in by a
``-- @include "<name>"`` line (after BullMQ's ``src/commands/includes``): each
include is inlined once per script, an include may include others, and a missing or circular one
fails the import of this module.

:class:`Script` runs one script on one client and checks the number of KEYS and ARGV of every call
against its header. :class:`QueueScripts` holds one wrapper per script: it builds the script's ARGV
and decodes its reply, whose format the script's header states.
"""

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

from setqueue.keys import QueueKeys
from setqueue.replication import ReplicaWait

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
)

# The scripts that write nothing: the only ones a ReplicaWait leaves alone.
READ_ONLY = frozenset({"stats", "list_groups"})


class ScriptContractError(RuntimeError):
    """A script whose includes or header do not hold together, or a call that does not match its header."""


# -- loading ----------------------------------------------------------------------------------

_INCLUDE_LINE = re.compile(r"\s*-{2,3}\s*@include\b.*")
_INCLUDE = re.compile(r'\s*-{2,3}\s*@include\s+"([\w-]+)"\s*')


def resolve_includes(source: str, read_include: Callable[[str], str], origin: str) -> str:
    """``source`` with each ``-- @include "<name>"`` line replaced by the text ``read_include(name)``
    (itself resolved), once per script: a second include of the same name adds nothing. Raises
    :class:`ScriptContractError` on a malformed include line, a missing include (``read_include``
    raises FileNotFoundError) or a circular one."""
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
    """The source of ``lua/<name>.lua`` with its includes resolved. ``read`` reads a path under ``lua/``."""
    return resolve_includes(read(f"{name}.lua"), lambda include: read(f"includes/{include}.lua"), f"{name}.lua")


@dataclass(frozen=True, slots=True)
class Contract:
    """What a script's header says about how it is called."""

    keys: tuple[str, ...]  # the names of KEYS[1], KEYS[2], ...
    args: tuple[str, ...]  # the names of ARGV[1], ARGV[2], ...
    key_tail: str | None  # the constant that starts a variable-length list in KEYS (at len(keys) + 1)
    arg_tail: str | None  # likewise in ARGV


_TAIL = re.compile(r"local\s+([A-Z][A-Z0-9_]*)\s*=\s*(\d+)\s*--\s*(KEYS|ARGV)\[\1\.\.\].*")
_LOCALS = re.compile(r"local\s+(\w+(?:\s*,\s*\w+)*)\s*=\s*(.+?)\s*(?:--.*)?")
_ENTRY = re.compile(r"(?:tonumber\(\s*)?(KEYS|ARGV)\[(\d+)\](?:\s*\))?")
_INDEXED = re.compile(r"\b(KEYS|ARGV)\[([^\]]*)\]")
_ARITHMETIC = re.compile(r"[-+*/%]")


def parse_contract(name: str, source: str) -> Contract:
    """The names a script's header gives KEYS and ARGV. The header is the first lines of the script:
    comments, then ``local <names> = KEYS[i], ...`` (or ``ARGV[i]``, ``tonumber(ARGV[i])``) and the
    constants that start a variable-length list. Each table's entries must be named in order from 1,
    a tail constant must follow the last named entry, and after the header no line may index KEYS or
    ARGV with a number, nor anywhere with arithmetic."""
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


# The KEYS a call names itself: its request record (setqueue:{Q}:req:<request id>) and the lock of
# one claim (setqueue:{Q}:lock:<token>). Every other name in a header's KEYS is a key of the layout.
PER_CALL_KEYS = ("request", "lock")


def layout_key_names() -> frozenset[str]:
    """The keys of a queue's layout: the properties of ``QueueKeys`` that name one key."""
    return frozenset(
        name for name, value in vars(QueueKeys).items() if isinstance(value, property) and name != "prefix"
    )


def check_layout(name: str, contract: Contract, layout: frozenset[str]) -> None:
    """Every KEYS entry a header names is a key of the layout or one a call names itself."""
    unknown = [key for key in contract.keys if key not in layout and key not in PER_CALL_KEYS]
    if unknown:
        raise ScriptContractError(
            f"{name}.lua names KEYS {unknown} that the key layout (setqueue.keys.QueueKeys) does not have"
        )


SOURCES: dict[str, str] = {name: load(name) for name in NAMES}
CONTRACTS: dict[str, Contract] = {name: parse_contract(name, SOURCES[name]) for name in NAMES}
for _name, _contract in CONTRACTS.items():
    check_layout(_name, _contract, layout_key_names())


# ack.lua with the first line "#!lua": refused whole when Redis is full. An ack that keeps results
# is sent as this first, and when Redis refuses it, as ack.lua (allow-oom) without the results. A
# finished job is never held up for lack of memory, and a full Redis does not grow by what
# handlers returned.
ACK_KEEPING_RESULTS = "#!lua\n" + SOURCES["ack"].partition("\n")[2]


# -- calling ----------------------------------------------------------------------------------


def new_request_id() -> str:
    """A fresh id for one call of claim, ack_many, fail or release: passing the same id again
    retries that call (after a lost reply) instead of making a second one."""
    return os.urandom(12).hex()


_identity: tuple[int, str] = (0, "")


def identity() -> str:
    """This process as the history names it: ``host:pid`` (found again after a fork)."""
    global _identity
    pid = os.getpid()
    if _identity[0] != pid:
        _identity = (pid, f"{socket.gethostname()}:{pid}")
    return _identity[1]


def new_token() -> str:
    """A fresh claim token: random, ending in ``@host:pid``, so that whatever becomes of the claim
    (a lease lost, a job failed or cancelled) can say which worker held it."""
    return f"{new_request_id()}@{identity()}"


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Script:
    """One script of ``lua/`` on one client (EVALSHA, loading it on NOSCRIPT). With ``wait`` (see
    ``setqueue.replication``), every call of a script that writes is confirmed by replicas."""

    def __init__(
        self, name: str, client: redis.Redis, wait: ReplicaWait | None = None, *, source: str | None = None
    ) -> None:
        self.name = name
        self._client = client
        self._wait = None if name in READ_ONLY else wait
        self.source = SOURCES[name] if source is None else source  # another first line of the same script
        self.contract = CONTRACTS[name]
        self._keys = len(self.contract.keys)
        self._args = len(self.contract.args)
        self._more_keys = self.contract.key_tail is not None
        self._more_args = self.contract.arg_tail is not None
        self._evalsha = client.register_script(self.source)

    def call(self, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        """Run the script. Raises ScriptContractError, before sending anything, when the number of
        KEYS or ARGV does not match the header."""
        if len(keys) != self._keys and not (self._more_keys and len(keys) > self._keys):
            self._mismatch("KEYS", len(keys))
        if len(args) != self._args and not (self._more_args and len(args) > self._args):
            self._mismatch("ARGV", len(args))
        if self._wait is not None:
            return self._wait.call(self._client, self.name, self._evalsha, keys, args)
        return self._evalsha(keys=keys, args=args)

    def _mismatch(self, table: str, given: int) -> None:
        named = self.contract.keys if table == "KEYS" else self.contract.args
        tail = self.contract.key_tail if table == "KEYS" else self.contract.arg_tail
        wanted = f"{len(named)}{' or more' if tail else ''}"
        raise ScriptContractError(f"{self.name}.lua takes {wanted} {table} ({', '.join(named)}), given {given}")


class Held(Protocol):
    """A lease as the scripts see it (Lease has these)."""

    @property
    def id(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def enqueued_at(self) -> float | None: ...
    @property
    def attempt(self) -> int: ...


L = TypeVar("L")


@dataclass(frozen=True, slots=True)
class ClaimHeader:
    """What a claim says besides its jobs: the Redis clock (seconds); when something could next be
    claimed if it got fewer than asked (None: not known, wait to be woken); what flow control held
    back (None, "paused", "rate" or "group"); whether the queue has a rate or group limits."""

    now: float
    next_at: float | None
    held: str | None
    limited: bool


def _claims(keys: QueueKeys, tokens: Iterable[str]) -> tuple[dict[str, int], list[str], list[Any]]:
    """The list of claims that ack, fail, renew and sweep take (see lua/includes/claims.lua): each
    distinct token -> its claim number (1, 2, ...), the claims' lock keys in that order (the tail of
    KEYS), and ``T, token, ...`` (the start of ARGV's tail)."""
    numbers: dict[str, int] = {}
    for token in tokens:
        numbers.setdefault(token, len(numbers) + 1)
    return numbers, [keys.lock(token) for token in numbers], [len(numbers), *numbers]


class QueueScripts:
    """The scripts of one queue on one client: one wrapper each, which builds its ARGV (in the order
    of the script's header) and decodes its reply (the format the header's "Returns" line states).
    KEYS come from the header and the layout (``_keys``). Each wrapper is one script call; batching
    is the caller's."""

    def __init__(self, client: redis.Redis, keys: QueueKeys, wait: ReplicaWait | None = None) -> None:
        self.k = keys
        self.by_name = {name: Script(name, client, wait) for name in NAMES}
        self._ack_keeping_results = Script("ack", client, wait, source=ACK_KEEPING_RESULTS)
        # Per script, its KEYS with the layout's keys filled in once, and where the per-call ones go.
        self._templates: dict[str, tuple[list[str], dict[str, int]]] = {}
        for name, contract in CONTRACTS.items():
            per_call = {key: index for index, key in enumerate(contract.keys) if key in PER_CALL_KEYS}
            template = ["" if key in per_call else getattr(keys, key) for key in contract.keys]
            self._templates[name] = (template, per_call)

    def _keys(self, name: str, tail: Sequence[str] = (), **per_call: str) -> list[str]:
        """The KEYS of one call of script ``name``, in its header's order: the layout's keys, the
        per-call ones given here (``request=``, ``lock=``), then ``tail`` (a variable-length list)."""
        template, slots = self._templates[name]
        if per_call.keys() != slots.keys():
            raise ScriptContractError(f"{name}.lua takes the per-call keys {sorted(slots)}, given {sorted(per_call)}")
        keys = template.copy()
        for key, index in slots.items():
            keys[index] = per_call[key]
        keys += tail
        return keys

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
    ) -> int:
        """enqueue.lua: how many of the (id, payload) jobs were new (payloads sent if with_payloads);
        due ``delay_ms`` from now by the Redis clock, or at Unix time ``at_ms``; all of ``priority``,
        with the options ``job_options`` (``setqueue.jobs.job_options``; "" for none) and in
        ``group`` ("" for none)."""
        args: list[Any] = [
            request_ttl_ms,
            wake_cap,
            "1" if with_payloads else "0",
            delay_ms,
            "" if at_ms is None else at_ms,
            priority,
            job_options,
            group,
        ]
        for job_id, payload in jobs:
            args.append(job_id)
            if with_payloads:
                args.append(payload)
        keys = self._keys("enqueue", request=self._request(None))
        added: int = json.loads(self.by_name["enqueue"].call(keys, args))[0]
        return added

    def claim(
        self,
        most: int,
        make: Callable[[str, str, int, str | None, float | None, float, int, str, str | None], L],
        *,
        request_ttl_ms: int,
        lease_ms: int,
        promote: int,
        wake_cap: int,
        token: str | None = None,
    ) -> tuple[list[L], ClaimHeader]:
        """claim.lua: up to ``most`` jobs under one fresh token, each made into ``make(id, token,
        attempt, payload, enqueued_at, claimed_at, priority, queue name, its own options as stored
        or None)``, in line order; and the reply's header (the Redis clock now, when something could
        next be claimed, what flow control held back)."""
        k = self.k
        # A token ends in "@host:pid": a caller's request id gets it too (the same id, the same
        # token: a resend is still recognised).
        token = new_token() if token is None else token if "@" in token else f"{token}@{identity()}"
        keys = self._keys("claim", request=k.request(token), lock=k.lock(token))
        reply = self.by_name["claim"].call(keys, [request_ttl_ms, token, lease_ms, most, promote, wake_cap])
        now = reply[0] / 1000
        header = ClaimHeader(now, reply[1] / 1000 if reply[1] >= 0 else None, text(reply[2]) or None, reply[3] == 1)
        leases = [
            make(
                text(job_id),
                token,
                attempt,
                None if payload is None else text(payload),
                enq / 1000 if enq >= 0 else None,
                now,
                priority,
                k.name,
                None if own is None else text(own),
            )
            for job_id, attempt, enq, priority, payload, own in zip(
                reply[4::6], reply[5::6], reply[6::6], reply[7::6], reply[8::6], reply[9::6], strict=True
            )
        ]
        return leases, header

    def renew(self, leases: Sequence[Held], *, lease_ms: int) -> list[int]:
        """renew.lua: for each lease, 1 if it was extended, 0 if it is lost, 2 if it is lost because
        its job was cancelled."""
        claims, locks, listed = _claims(self.k, (lease.token for lease in leases))
        args: list[Any] = [lease_ms, *listed]
        for lease in leases:
            args += [lease.id, claims[lease.token]]
        return [int(r) for r in self.by_name["renew"].call(self._keys("renew", locks), args)]

    def ack(
        self,
        leases: Sequence[Held],
        results: Sequence[str | None],
        *,
        request_ttl_ms: int,
        done_max_count: int,
        result_ttl_ms: int,
        wake_cap: int,
        request_id: str | None = None,
    ) -> tuple[float, list[bool], bool]:
        """ack.lua: the Redis clock (seconds), for each lease whether it was acked (False: stale),
        and whether the results were dropped because Redis is full (the jobs are done all the same).
        ``results``: what each lease's handler returned, encoded (None: nothing to keep)."""
        claims, locks, listed = _claims(self.k, (lease.token for lease in leases))
        keys = self._keys("ack", locks, request=self._request(request_id))
        args: list[Any] = [request_ttl_ms, done_max_count, result_ttl_ms, self.k.ended_channel, wake_cap, "0", *listed]
        for lease, result in zip(leases, results, strict=True):
            enqueued = lease.enqueued_at
            enqueued_ms = "" if enqueued is None else round(enqueued * 1000)
            args += [lease.id, claims[lease.token], enqueued_ms, lease.attempt, result or ""]
        dropped = False
        if result_ttl_ms > 0 and any(results):
            try:  # refused whole, writing nothing, when Redis is full
                reply = self._ack_keeping_results.call(keys, args)
            except redis.OutOfMemoryError:
                dropped = True
                args[5] = "1"  # drop_results; the same request record: the refused call wrote none
                reply = self.by_name["ack"].call(keys, args)
        else:
            reply = self.by_name["ack"].call(keys, args)
        now_ms, flags = text(reply).split(" ")
        return int(now_ms) / 1000, [flag == "1" for flag in flags], dropped

    def fail(
        self,
        items: Sequence[tuple[Held, str, str, int]],
        *,
        request_ttl_ms: int,
        max_attempts: int,
        wake_cap: int,
        request_id: str | None = None,
    ) -> list[str]:
        """fail.lua: for each (lease, mode, reason, retry delay in ms), mode "retry", "dead" or
        "release", the outcome: "retried" (to todos, or to scheduled with a delay), "dead",
        "released" or "stale"."""
        claims, locks, listed = _claims(self.k, (item[0].token for item in items))
        keys = self._keys("fail", locks, request=self._request(request_id))
        args: list[Any] = [request_ttl_ms, max_attempts, wake_cap, self.k.ended_channel, *listed]
        for lease, mode, reason, delay_ms in items:
            args += [lease.id, claims[lease.token], mode, reason, delay_ms]
        return text(self.by_name["fail"].call(keys, args)).split(" ")

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
    ) -> tuple[list[str], list[str], int, int]:
        """sweep.lua: of the in_progress ``candidates``, each with the token that owned it as the caller
        read owners (None: no owner), the ids requeued and dead-lettered; the number of ids dropped
        from done (at most ``trim_limit``, older than ``done_max_age_ms``; 0 = no trimming); and the
        number of due ids promoted from scheduled into todos (at most ``trim_limit``)."""
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
            *listed,
        ]
        for candidate, owner in zip(candidates, owners, strict=True):
            args += [candidate, 0 if owner is None else claims[owner]]
        requeued, dead, trimmed, promoted = json.loads(self.by_name["sweep"].call(keys, args))
        return list(requeued), list(dead), int(trimmed), int(promoted)

    def requeue_failed(self, ids: Sequence[str], *, request_ttl_ms: int, wake_cap: int) -> int:
        """requeue_failed.lua: how many of ``ids`` moved from failed back to todos."""
        keys = self._keys("requeue_failed", request=self._request(None))
        args = [request_ttl_ms, wake_cap, identity(), *ids]
        moved: int = json.loads(self.by_name["requeue_failed"].call(keys, args))[0]
        return moved

    def delete(self, job_id: str, token: str | None, *, request_ttl_ms: int, wake_cap: int) -> str | None:
        """delete.lua: the state ``job_id`` was in, or None if the queue did not know it. ``token``
        names the claim that owned it as the caller read owners (None: no owner)."""
        keys = self._keys("delete", request=self._request(None), lock=self.k.lock(token or "-"))
        args = [request_ttl_ms, job_id, token or "", wake_cap]
        state: str | None = json.loads(self.by_name["delete"].call(keys, args))[0]
        return state or None

    def stats(self) -> tuple[dict[str, int], int, dict[int, int]]:
        """stats.lua: the size of each state (todos, in_progress, done, failed, scheduled,
        cancelled), the results kept and flow control's figures (paused 0 or 1, jobs waiting with a
        group, groups with jobs waiting, of which resting and full, groups with jobs in progress),
        the age (ms) of the oldest pending job, and the jobs in todos per priority (those with any)."""
        reply = self.by_name["stats"].call(self._keys("stats"))
        todos, in_progress, done, failed, age_ms, scheduled, cancelled, results, *rest = reply
        paused, grouped, groups_waiting, groups_resting, groups_full, groups_running, *by_priority = rest
        sizes = {
            "paused": paused,
            "grouped_waiting": grouped,
            "groups_waiting": groups_waiting,
            "groups_resting": groups_resting,
            "groups_full": groups_full,
            "groups_running": groups_running,
            "results_kept": results,
            "todos": todos,
            "in_progress": in_progress,
            "done": done,
            "failed": failed,
            "scheduled": scheduled,
            "cancelled": cancelled,
        }
        return sizes, age_ms, dict(zip(by_priority[::2], by_priority[1::2], strict=True))

    def cancel(self, job_id: str, token: str | None, *, request_ttl_ms: int, wake_cap: int) -> str | None:
        """cancel.lua: the state ``job_id`` was in (cancelled now if it was waiting or running; left
        alone if it had ended), or None if the queue did not know it. ``token`` names the claim that
        owned it as the caller read owners (None: no owner)."""
        keys = self._keys("cancel", request=self._request(None), lock=self.k.lock(token or "-"))
        args = [request_ttl_ms, job_id, token or "", identity(), self.k.ended_channel, self.k.cancel_channel, wake_cap]
        state: str | None = json.loads(self.by_name["cancel"].call(keys, args))[0]
        return state or None

    def set_limits(self, what: str, value: str, *, wake_cap: int) -> bool:
        """set_limits.lua: pause ("pause"), resume ("resume"), or set what flow control holds
        ("rate", "group_concurrency", "group_rate", "group:<name>") to ``value`` ("" removes it).
        Whether anything changed."""
        return bool(self.by_name["set_limits"].call(self._keys("set_limits"), [wake_cap, what, value]))

    def list_groups(self, most: int) -> tuple[int, list[tuple[str, int, int, str]]]:
        """list_groups.lua: how many groups have jobs waiting or in progress, and up to ``most`` of
        them: (name, waiting, running, state)."""
        reply = self.by_name["list_groups"].call(self._keys("list_groups"), [most])
        rows = [
            (text(name), int(waiting), int(running), text(state))
            for name, waiting, running, state in zip(reply[1::4], reply[2::4], reply[3::4], reply[4::4], strict=True)
        ]
        return int(reply[0]), rows

    def progress(self, lease: Held, fraction: float, message: str) -> bool:
        """progress.lua: keep a running job's progress; False when its claim no longer owns it."""
        keys = self._keys("progress")
        return bool(self.by_name["progress"].call(keys, [lease.id, lease.token, repr(fraction), message]))

    def periodic(
        self, runs: Sequence[tuple[str, int, str, str | None]], *, request_ttl_ms: int, wake_cap: int
    ) -> tuple[list[str], list[str]]:
        """periodic.lua: for each (schedule name, latest slot in ms, run id, payload or None), create the
        run unless a run of that slot or a later one was created already. Returns the names whose run
        was created, and the names seen for the first time (their slot recorded, no run created)."""
        keys = self._keys("periodic", request=self._request(None))
        args: list[Any] = [request_ttl_ms, wake_cap]
        for name, slot_ms, run_id, payload in runs:
            args += [name, slot_ms, run_id, "" if payload is None else payload]
        created, first_seen = json.loads(self.by_name["periodic"].call(keys, args))
        return [text(n) for n in created or ()], [text(n) for n in first_seen or ()]
