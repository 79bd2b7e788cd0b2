"""`setqueue` (or `python -m setqueue`): look at and repair a queue from the command line.

Commands and options: ``setqueue --help`` and docs/reference.md. Exit codes: 0 ok, 1 not found (or
doctor found a problem), 2 usage or bad setting, 3 Redis unreachable (or refused the command), 4 the
job failed or was cancelled (result), 124 the job had not ended within --wait (result).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import datetime
import itertools
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn, TextIO

import redis

from setqueue.client import OptionError, PasswordRequired, TlsFiles, redact_url
from setqueue.embedded import INSTALL_HINT
from setqueue.factory import open_queue
from setqueue.interface import JobQueue
from setqueue.jobs import JobFailed, JobRef, ResultGone, UnknownJob, job_options
from setqueue.keys import (
    IF_DEPENDENCY_FAILS,
    MAX_PRIORITY,
    MIN_PRIORITY,
    STATES,
    check_utf8,
    parse_queue_names,
    validate_group,
    validate_job_id,
    validate_priority,
)
from setqueue.records import job_items
from setqueue.registry import live_worker_count
from setqueue.replication import NotReplicated
from setqueue.runtime import demo_command
from setqueue.runtime.acl import explain_refusal, setuser
from setqueue.runtime.cli_limits import UsageError, limits_command
from setqueue.runtime.pressure import read_memory
from setqueue.runtime.settings import SETTING_BY_NAME, SettingError, check_tls, default, validate_redis_url
from setqueue.runtime.tls import tls_refusal
from setqueue.tasks import IF_EXISTS, Sent, Task
from setqueue.version import __version__

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE, EXIT_REDIS, EXIT_JOB_FAILED, EXIT_NOT_ENDED = 0, 1, 2, 3, 4, 124
PROG = "setqueue"


class CliError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def one_line(text: str) -> str:
    """What a user typed may hold line breaks or control codes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class _Parser(argparse.ArgumentParser):
    """A usage error is one line, as every other error of the command is, not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {one_line(message)} (see {self.prog} --help)\n")


def _command(sub: Any, name: str, about: str, more: str = "") -> argparse.ArgumentParser:
    """Its description: the help, capitalised, then ``more``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=about, description=about[0].upper() + about[1:] + more)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Inspect and repair a setqueue queue.",
        epilog="Exit codes: 0 ok, 1 not found, 2 usage or bad setting, 3 Redis unreachable.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    for option, name, metavar, about in (
        ("--redis-url", "REDIS_URL", None, "Redis URL"),
        ("--queue", "QUEUE_NAME", None, "queue name"),
        ("--shards", "QUEUE_SHARDS", "N", "shards of the queue"),
        ("--wait-replicas", "WAIT_REPLICAS", "N", "replicas that must confirm each write (else exit code 3)"),
    ):
        parser.add_argument(
            option,
            default=os.environ.get(name, default(name)),
            metavar=metavar,
            help=f"{about} (default: ${name} or {SETTING_BY_NAME[name].default})",
        )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    push = _command(
        sub,
        "push",
        "enqueue job ids, with payloads if given; prints how many were new",
        ". Without ID (or with -), stdin lines 'id' or 'id<TAB>payload', or with --jsonl "
        '{"id": ..., "payload": ...}. A bad line is reported with its number and nothing is written.',
    )
    push.add_argument("ids", nargs="*", metavar="ID", help="job ids; none or - reads stdin")
    push.add_argument("--payload", metavar="TEXT", help="the payload of the one ID given")
    push.add_argument("--jsonl", action="store_true", help="stdin holds JSON lines")
    _job_option_arguments(push)

    send = _command(
        sub,
        "send",
        "send a call of a task by name; prints its job id and whether it is new",
        ". Each ARG is one JSON value (a string with its quotes: '\"ada\"'); --kw NAME=JSON gives a keyword "
        "argument. The worker serving the task checks that they fit its function.",
    )
    send.add_argument("task", metavar="NAME", help="the task's name")
    send.add_argument("args", nargs="*", metavar="ARG", help="a positional argument, as JSON")
    send.add_argument("--kw", action="append", default=[], metavar="NAME=JSON", help="a keyword argument")
    send.add_argument("--id", metavar="ID", help="the job's id (default: a new one that sorts by time)")
    _job_option_arguments(send)

    stats = sub.add_parser("stats", help="sizes of each state and the oldest pending age")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.add_argument(
        "--watch", nargs="?", type=float, const=2.0, default=None, metavar="SECONDS", help="refresh every SECONDS (2)"
    )

    sub.add_parser("inspect", help="everything the queue knows about one id (JSON)").add_argument("id", metavar="ID")
    requeue = _command(sub, "requeue-failed", "move dead-lettered jobs back to todos, their attempt count reset")
    requeue.add_argument("ids", nargs="*", metavar="ID", help="default: every failed job")
    sub.add_parser("delete", help="remove a job whatever its state").add_argument("id", metavar="ID")
    cancel = _command(sub, "cancel", "cancel jobs: a waiting one never starts, a running one is stopped")
    cancel.add_argument("ids", nargs="+", metavar="ID")
    result = _command(
        sub,
        "result",
        "what a job's handler returned (JSON), once it ended",
        ". Exit code 4: failed or cancelled; 124: not ended.",
    )
    result.add_argument("id", metavar="ID")
    result.add_argument("--wait", metavar="DURATION", help="wait this long at most (default: do not wait)")

    schedules = _command(
        sub, "schedules", "the periodic jobs in force (UTC)", ". add and remove change them for every cleaner."
    )
    schedules.add_argument("--json", action="store_true", help="one JSON object per schedule")
    change = schedules.add_subparsers(dest="change", metavar="add|remove")
    add = change.add_parser("add", help="register or change a periodic job")
    add.add_argument("name", metavar="NAME")
    add.add_argument("cron", metavar="CRON", help="5-field cron (UTC) or @hourly, @daily, ...")
    change.add_parser("remove", help="stop a periodic job").add_argument("name", metavar="NAME")

    sub.add_parser("pause", help="stop the queue's jobs from starting (running ones finish)")
    sub.add_parser("resume", help="let a paused queue's jobs start again")
    limit = _command(
        sub,
        "limit",
        "show or change limits, live for every worker",
        ". A rate is COUNT/PERIOD (100/s, 6000/min, 5/10s) or off. Options not given keep their value.",
    )
    limit.add_argument("--rate", metavar="RATE", help="most job starts of the queue, or off")
    limit.add_argument("--burst", type=int, metavar="N", help="starts at once (default: count/10)")
    limit.add_argument("--group-concurrency", metavar="N", help="most jobs of one group at once, or off")
    limit.add_argument("--group-rate", metavar="RATE", help="most job starts of one group, or off")
    limit.add_argument("--group-burst", type=int, metavar="N", help="a group's starts at once")
    limit.add_argument("--group", metavar="NAME", help="change that group's own limits")
    limit.add_argument("--clear", action="store_true", help="with --group: back to the default limits")
    limit.add_argument("--json", action="store_true", help="one JSON object")

    groups = sub.add_parser("groups", help="the job groups with jobs waiting or in progress")
    groups.add_argument("--json", action="store_true", help="one JSON object per group")
    groups.add_argument("--most", type=int, default=50, metavar="N", help="at most N groups (50)")

    _command(sub, "doctor", "check what the queue needs from Redis", ". Exit code 1 when a check failed.")
    demo = _command(
        sub,
        "demo",
        "run the whole system on an embedded server: no Docker, no Redis installed",
        f". Needs {INSTALL_HINT}; takes no --redis-url. Ctrl-C or SIGTERM stops everything it started.",
    )
    demo_command.add_arguments(demo)
    acl = _command(sub, "acl-rule", "print the ACL SETUSER command of a least-privilege setqueue user")
    acl.add_argument("user", nargs="?", default="setqueue", metavar="USER")
    return parser


def _read_jobs(stream: TextIO, jsonl: bool) -> list[tuple[str, str | None]]:
    jobs: list[tuple[str, str | None]] = []
    for number, line in enumerate(stream, 1):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        try:
            job_id, payload = _parse_json_line(text) if jsonl else _parse_line(text)
            validate_job_id(job_id)
        except (TypeError, ValueError) as exc:
            raise CliError(f"line {number}: {exc}; nothing was enqueued", EXIT_USAGE) from None
        jobs.append((job_id, payload))
    return jobs


def _parse_line(text: str) -> tuple[str, str | None]:
    """'id' or 'id<TAB>payload' (the rest of the line, tabs included)."""
    job_id, tab, payload = text.partition("\t")
    return job_id.strip(), payload if tab else None


def _parse_json_line(text: str) -> tuple[str, str | None]:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        raise ValueError('expected an object with a string "id", like {"id": "job-1", "payload": "..."}')
    unknown = sorted(set(record) - {"id", "payload"})
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} (only id and payload)")
    payload = record.get("payload")
    if payload is None or isinstance(payload, str):
        return record["id"], payload
    return record["id"], json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, option: str = "--delay") -> float:
    raw = text.strip().lower()
    unit = DURATION_UNITS.get(raw[-1:])
    number = raw[:-1] if unit is not None else raw
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 <= seconds <= 366 * 86400):
        raise CliError(f"{option} {text!r} is not a duration like 90s, 15m, 2h or 3d (at most a year)", EXIT_USAGE)
    return seconds


def parse_time(text: str) -> float:
    try:
        parsed = datetime.datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise CliError(f"--at {text!r} is not an ISO 8601 time with a zone, like 2026-12-01T09:00:00Z", EXIT_USAGE)
    return parsed.timestamp()


def _job_option_arguments(parser: argparse.ArgumentParser) -> None:
    """The job options push and send take alike."""
    parser.add_argument(
        "--priority", type=int, default=0, metavar="N", help=f"{MIN_PRIORITY} to {MAX_PRIORITY}, higher first"
    )
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--delay", metavar="DURATION", help="due after 90s, 15m, 2h, 3d (or seconds)")
    when.add_argument("--at", metavar="TIME", help="due at an ISO 8601 time with a zone")
    parser.add_argument("--max-attempts", type=int, metavar="N", help="the jobs' own claims (1 to 1000)")
    parser.add_argument("--timeout", metavar="DURATION", help="the jobs' own time limit (0 = none)")
    parser.add_argument(
        "--retry-timeouts",
        action=argparse.BooleanOptionalAction,
        help="the jobs' own: a timeout is retried, or (--no-...) dead-letters them (default: RETRY_TIMEOUTS)",
    )
    parser.add_argument("--group", metavar="NAME", help="the jobs' group: groups take turns")
    parser.add_argument(
        "--if-exists",
        choices=IF_EXISTS,
        default="ignore",
        help="a known id: left as it is (ignore), made this call's while it waits (replace), or run again "
        "once it ended (rerun)",
    )
    # Both append to one list, so the dependencies keep the order given (a job's handler reads them so).
    parser.add_argument(
        "--depends-on",
        action="append",
        dest="depends_on",
        default=[],
        metavar="ID",
        help="the jobs wait for this job of the same queue (the whole text is the id, colons and all); repeatable",
    )
    parser.add_argument(
        "--depends-on-in",
        action="append",
        dest="depends_on",
        nargs=2,
        metavar=("QUEUE", "ID"),
        help="the jobs wait for job ID of queue QUEUE (any queue of the same Redis or Cluster, sharded or not); "
        "repeatable",
    )
    parser.add_argument(
        "--if-dependency-fails",
        choices=IF_DEPENDENCY_FAILS,
        default=None,
        help="a dependency that failed, was cancelled or deleted: the jobs fail too (fail, the default), or run "
        "once every dependency ended, whichever way (run)",
    )


def _job_options(args: argparse.Namespace) -> dict[str, Any]:
    """The job options given to push or send, checked: enqueue's keyword arguments. CliError (exit 2)."""
    delay = None if args.delay is None else parse_duration(args.delay)
    at = None if args.at is None else parse_time(args.at)
    timeout = None if args.timeout is None else parse_duration(args.timeout, "--timeout")
    try:
        validate_priority(args.priority)
        job_options(args.max_attempts, timeout)
        if args.group is not None:
            validate_group(check_utf8("--group", args.group))
    except ValueError as exc:
        raise CliError(f"bad --priority, --max-attempts, --timeout or --group: {exc}", EXIT_USAGE) from None
    dependencies = _dependencies(args.depends_on)
    if args.if_dependency_fails is not None and not dependencies:
        raise CliError("--if-dependency-fails goes with --depends-on or --depends-on-in", EXIT_USAGE)
    dependency_options: dict[str, Any] = {}
    if dependencies:
        dependency_options = {
            "depends_on": dependencies,
            "if_dependency_fails": args.if_dependency_fails or "fail",
        }
    return {
        "delay": delay,
        "at": at,
        "priority": args.priority,
        "max_attempts": args.max_attempts,
        "timeout": timeout,
        "group": args.group,
        "retry_timeouts": args.retry_timeouts,
        "if_exists": args.if_exists,
        **dependency_options,
    }


def _dependencies(given: list[str | list[str]]) -> list[str | JobRef]:
    """The dependencies given with --depends-on ID (an id of the same queue, taken whole) and --depends-on-in
    QUEUE ID (a ``JobRef``), in the order given, checked for form (CliError, exit 2); whether each exists
    is the enqueue's to check, before it writes anything."""
    dependencies: list[str | JobRef] = []
    for each in given:
        try:
            if isinstance(each, str):
                dependencies.append(validate_job_id(check_utf8("--depends-on", each)))
            else:
                queue, job_id = each
                dependencies.append(JobRef(check_utf8("--depends-on-in", queue), job_id))
        except (TypeError, ValueError) as exc:
            flag = "--depends-on" if isinstance(each, str) else "--depends-on-in"
            raise CliError(f"bad {flag}: {exc}", EXIT_USAGE) from None
    return dependencies


def _push(args: argparse.Namespace, queue: JobQueue, stdin: TextIO) -> tuple[int, int]:
    """(new, submitted)."""
    from_stdin = not args.ids or args.ids == ["-"]
    if args.jsonl and not from_stdin:
        raise CliError("--jsonl reads stdin: give no ID (or -)", EXIT_USAGE)
    if args.payload is not None:
        if from_stdin or len(args.ids) != 1:
            raise CliError("--payload goes with exactly one ID", EXIT_USAGE)
        jobs: list[tuple[str, str | None]] = [(args.ids[0], args.payload)]
    elif from_stdin:
        jobs = _read_jobs(stdin, args.jsonl)
    else:
        jobs = [(job_id, None) for job_id in args.ids]
    options = _job_options(args)
    with _bad_ids_are_usage_errors():
        # All checked before anything is written.
        job_items(dict(jobs), queue.shards[0].payload_max_bytes)
        added = 0
        # In order: each run of lines with (or without) a payload is one enqueue call.
        for with_payload, run in itertools.groupby(jobs, key=lambda job: job[1] is not None):
            batch = list(run)
            ids: dict[str, str] | list[str] = (
                {job_id: payload for job_id, payload in batch if payload is not None}
                if with_payload
                else [job_id for job_id, _ in batch]
            )
            try:
                added += queue.enqueue(ids, **options)
            except UnknownJob as exc:  # a dependency: this call was refused before it wrote anything
                before = f"; {added} new ids went in before it (a dependency deleted meanwhile?)" if added else ""
                what = "this enqueue was refused whole" if added else "nothing was enqueued"
                raise CliError(f"unknown dependency: {exc}; {what}{before}", EXIT_USAGE) from None
            except redis.OutOfMemoryError:
                before = f"; {added} new ids went in before it (pushing them again is safe)" if added else ""
                raise CliError(f"{OUT_OF_MEMORY}: this enqueue was refused whole{before}", EXIT_REDIS) from None
    return added, len(jobs)


def _send(args: argparse.Namespace, queue: JobQueue) -> Sent[Any]:
    """One call of the task named, its arguments parsed from JSON; everything checked before anything
    is written (CliError, exit 2)."""
    options = _job_options(args)
    values: list[Any] = []
    for n, text in enumerate(args.args, 1):
        values.append(_json_argument(f"ARG {n}", text))
    named: dict[str, Any] = {}
    for given in args.kw:
        name, equals, text = given.partition("=")
        if not equals or not name.isidentifier():
            raise CliError(f"--kw {one_line(given)!r}: give NAME=JSON, NAME a Python identifier", EXIT_USAGE)
        named[name] = _json_argument(f"--kw {name}", text)
    try:
        task = Task.named(args.task).options(id=args.id, **options)
        return queue.send(task, *values, **named)
    except UnknownJob as exc:  # a dependency: refused before anything was written
        raise CliError(f"unknown dependency: {exc}; nothing was sent", EXIT_USAGE) from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, OptionError):
            raise
        raise CliError(f"cannot send {args.task!r}: {exc}", EXIT_USAGE) from None
    except redis.OutOfMemoryError:
        raise CliError(f"{OUT_OF_MEMORY}: this send was refused", EXIT_REDIS) from None


def _json_argument(where: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        hint = f" (a string needs its quotes: '\"{one_line(text)}\"')" if text and text[0] not in '[{"' else ""
        raise CliError(f"{where} {one_line(text)!r} is not JSON{hint}", EXIT_USAGE) from None


OUT_OF_MEMORY = (
    "Redis is out of memory (maxmemory reached) and refuses new jobs until workers and the cleaner free room "
    "(setqueue doctor shows how full it is)"
)


@contextlib.contextmanager
def _bad_ids_are_usage_errors() -> Iterator[None]:
    """A malformed job id becomes a usage error; an OptionError (a bad URL only Redis could tell) passes on."""
    try:
        yield
    except OptionError:
        raise
    except (TypeError, ValueError) as exc:
        raise CliError(f"bad job id: {exc}", EXIT_USAGE) from None


def _with_utc_times(info: dict[str, Any]) -> dict[str, Any]:
    """A job's fields, each ``*_at`` (Unix seconds) followed by the same in ISO 8601 UTC."""
    shown: dict[str, Any] = {}
    for name, value in info.items():
        shown[name] = value
        if name.endswith("_at") and isinstance(value, float):
            moment = datetime.datetime.fromtimestamp(value, datetime.UTC)
            shown[f"{name}_utc"] = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return shown


def _print_stats(queue: JobQueue, as_json: bool, out: TextIO) -> None:
    """One JSON object, or a block of text per queue served."""
    stats = queue.stats()
    if as_json:
        print(json.dumps({"queue": queue.name, **stats}), file=out, flush=True)
        return
    for name, each in stats.get("queues", {queue.name: stats}).items():
        print(f"queue {name}", file=out)
        for state in STATES:
            print(f"  {state:<12}{int(each[state]):>12}", file=out)
            if state == "todos" and set(each["todos_by_priority"]) - {0}:
                for priority, count in each["todos_by_priority"].items():
                    print(f"{'    priority':<12}{priority:>3}{count:>11}", file=out)
        print(f"  {'oldest pending':<16}{each['oldest_pending_age_seconds']:>7.1f}s", file=out)
        if each["paused"]:
            print("  paused (setqueue resume starts it again)", file=out)
        if each["groups_waiting"] or each["groups_running"]:
            print(
                f"  groups: {each['groups_waiting']} with jobs waiting ({each['groups_full']} at their concurrency, "
                f"{each['groups_resting']} at their rate), {each['groups_running']} running",
                file=out,
            )
        out.flush()


def run(args: argparse.Namespace, queue: JobQueue, stdin: TextIO, out: TextIO) -> int:  # noqa: PLR0911 (a branch a command)
    if args.command == "push":
        added, submitted = _push(args, queue, stdin)
        print(f"{added} new, {submitted - added} already known", file=out)
        _warn_if_unserved(queue)
        return EXIT_OK

    if args.command == "send":
        sent = _send(args, queue)
        print(f"{sent.id} {'new' if sent.created else 'already known'}", file=out)
        _warn_if_unserved(queue)
        return EXIT_OK

    if args.command == "stats":
        _warn_if_evicting(queue, args.redis_url)
        if args.watch is None:
            _print_stats(queue, args.json, out)
            return EXIT_OK
        if args.watch <= 0:
            raise CliError("--watch needs a positive number of seconds", EXIT_USAGE)
        try:
            while True:
                if not args.json and out.isatty():
                    out.write("\x1b[H\x1b[J")
                if not args.json:
                    print(time.strftime("%H:%M:%S"), file=out)
                _print_stats(queue, args.json, out)
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return EXIT_OK

    if args.command == "inspect":
        with _bad_ids_are_usage_errors():
            info = queue.inspect(args.id)
        if info is None:
            raise CliError(f"job {args.id!r} not found in queue {queue.name!r}", EXIT_NOT_FOUND)
        shown = dataclasses.asdict(info)
        if info.waiting_on is not None:  # how many of its dependencies ended, whichever way
            shown["waiting_on"]["ended"] = info.waiting_on.ended
        print(json.dumps(_with_utc_times(shown), indent=2), file=out)
        return EXIT_OK

    if args.command == "requeue-failed":
        with _bad_ids_are_usage_errors():
            if args.ids:
                moved = queue.requeue_failed(args.ids)
            else:
                moved = 0
                for _ in range(10_000):  # in pages of 1000 until failed is empty
                    step = queue.requeue_failed(limit=1000)
                    moved += step
                    if step == 0:
                        break
        print(f"requeued {moved}", file=out)
        if args.ids and moved < len(set(args.ids)):
            print(f"{len(set(args.ids)) - moved} of the ids given were not in failed", file=sys.stderr)
        return EXIT_OK

    if args.command == "delete":
        with _bad_ids_are_usage_errors():
            state = queue.delete(args.id)
        if state is None:
            raise CliError(f"job {args.id!r} not found in queue {queue.name!r}", EXIT_NOT_FOUND)
        print(f"deleted {args.id} (was in {state})", file=out)
        return EXIT_OK

    if args.command == "cancel":
        return _cancel(args.ids, queue, out)

    if args.command == "result":
        return _result(args, queue, out)

    if args.command == "schedules":
        return _schedules(args, queue, out)

    if args.command in ("pause", "resume", "limit", "groups"):
        try:
            return limits_command(args, queue, out)
        except UsageError as exc:
            raise CliError(str(exc), EXIT_USAGE) from None

    if args.command == "doctor":
        from setqueue.runtime.doctor import doctor  # noqa: PLC0415 - only this command needs it

        return doctor(queue, args.redis_url.startswith(("rediss:", "rediss+sentinel:")), out)

    raise CliError(f"unknown command {args.command}", EXIT_USAGE)  # pragma: no cover - argparse checks


def _warn_if_unserved(queue: JobQueue) -> None:
    """Jobs pushed into a queue no live worker serves wait in silence (a typo in --queue?): say so. The
    registry of live workers tells; a worker with WORKER_HEARTBEAT_SECONDS=0 is not in it."""
    name = queue.queues[0].name  # where push puts new ids
    try:
        if live_worker_count(queue.redis, name):
            return
    except redis.RedisError:
        return  # the push went through; this is only a hint
    print(
        f"{PROG}: warning: no live worker serves queue {one_line(repr(name))}: its jobs wait until one does "
        "(a typo? setqueue doctor lists the queues with work and no worker)",
        file=sys.stderr,
        flush=True,
    )


def _warn_if_evicting(queue: JobQueue, url: str) -> None:
    try:
        warning = read_memory(queue.redis).eviction_warning(redact_url(url))
    except (redis.ConnectionError, redis.TimeoutError):
        return  # the command itself says so
    if warning is not None:
        print(f"{PROG}: warning: {one_line(warning)}", file=sys.stderr, flush=True)


def _cancel(ids: list[str], queue: JobQueue, out: TextIO) -> int:
    """Exit 1 when any was not found (the others are cancelled), named on one line of stderr."""
    with _bad_ids_are_usage_errors():
        for job_id in ids:  # all checked before anything is written
            validate_job_id(job_id)
    missing: list[str] = []
    for job_id in dict.fromkeys(ids):
        state = queue.cancel(job_id)
        if state is None:
            missing.append(job_id)
        elif state in ("done", "failed", "cancelled"):
            print(f"{job_id} had ended ({state}): nothing changed", file=out)
        else:
            print(f"cancelled {job_id} (was {'running' if state == 'in_progress' else 'in ' + state})", file=out)
    if not missing:
        return EXIT_OK
    named = ", ".join(repr(job_id) for job_id in missing)
    print(
        f"{PROG}: job{'s' if len(missing) > 1 else ''} {one_line(named)} not found in queue {queue.name!r}",
        file=sys.stderr,
    )
    return EXIT_NOT_FOUND


def _result(args: argparse.Namespace, queue: JobQueue, out: TextIO) -> int:
    wait = 0.0 if args.wait is None else parse_duration(args.wait, "--wait")
    try:
        with _bad_ids_are_usage_errors():
            value = queue.result(args.id, timeout=wait)
    except TimeoutError:
        info = queue.inspect(args.id)
        state = "" if info is None else f" (it is in {info.state})"
        raise CliError(f"job {args.id!r} has not ended{state}", EXIT_NOT_ENDED) from None
    except JobFailed as exc:
        raise CliError(str(exc).partition("\n")[0], EXIT_JOB_FAILED) from None
    except (UnknownJob, ResultGone) as exc:
        raise CliError(str(exc), EXIT_NOT_FOUND) from None
    if isinstance(value, bytes):
        binary = getattr(out, "buffer", None)
        if binary is not None:
            out.flush()
            binary.write(value)
            binary.flush()
            return EXIT_OK
        value = {"bytes_base64": base64.b64encode(value).decode("ascii")}
    print(json.dumps(value, ensure_ascii=False), file=out)
    return EXIT_OK


def _schedules(args: argparse.Namespace, queue: JobQueue, out: TextIO) -> int:
    """``schedules add|remove``, or each schedule with its last slot handled and its next (Redis clock)."""
    if len(queue.shards) != 1:
        raise CliError("schedules: periodic jobs live in one unsharded queue (--shards 1)", EXIT_USAGE)
    home = queue.shards[0]
    # Here: croniter takes a fifth of a second to import.
    from setqueue.runtime.periodic import (  # noqa: PLC0415
        add_schedule,
        iso,
        next_run,
        redis_now,
        registered,
        remove_schedule,
    )

    if args.change == "add":
        try:
            schedule = add_schedule(home, args.name, args.cron)
        except ValueError as exc:
            raise CliError(f"bad schedule: {exc}", EXIT_USAGE) from None
        now = redis_now(home.redis)
        slot = next_run(schedule, now, home.periodic_slots().get(schedule.name))
        due = " (due now: the cleaners' next round creates it)" if slot <= now else ""
        print(f"{schedule.name}: {schedule.expr} (UTC), next run {iso(slot)}{due}", file=out)
        return EXIT_OK
    if args.change == "remove":
        try:
            removed = remove_schedule(home, args.name)
        except ValueError as exc:
            raise CliError(f"bad schedule: {exc}", EXIT_USAGE) from None
        if not removed:
            raise CliError(f"no periodic job {args.name!r} in queue {home.name!r}", EXIT_NOT_FOUND)
        print(f"removed {args.name}", file=out)
        return EXIT_OK
    schedules, problems = registered(home)
    for problem in problems:
        print(f"{PROG}: {one_line(problem)}", file=sys.stderr)
    if not schedules:
        if not args.json:
            print(f"no periodic jobs in queue {home.name}", file=out)
        return EXIT_OK
    now = redis_now(home.redis)
    last_slots = home.periodic_slots()
    rows: list[dict[str, str | None]] = []
    for schedule in schedules:
        last = last_slots.get(schedule.name)
        rows.append(
            {
                "name": schedule.name,
                "cron": schedule.expr,
                "last_slot": None if last is None else iso(last),
                "next_run": iso(next_run(schedule, now, last)),
            }
        )
    if args.json:
        for row in rows:
            print(json.dumps(row), file=out)
        return EXIT_OK
    widths = [max(len(str(row[c] or "-")) for row in [*rows, _HEADER]) for c in _HEADER]
    for row in [_HEADER, *rows]:
        print("  ".join(str(row[c] or "-").ljust(w) for c, w in zip(_HEADER, widths, strict=True)).rstrip(), file=out)
    return EXIT_OK


_HEADER: dict[str, str | None] = {
    "name": "NAME",
    "cron": "CRON (UTC)",
    "last_slot": "LAST SLOT",
    "next_run": "NEXT RUN",
}


# How an error names a setting the CLI reads.
_FLAGS = {"QUEUE_SHARDS": "--shards / QUEUE_SHARDS", "WAIT_REPLICAS": "--wait-replicas / WAIT_REPLICAS"}
_ENV_ONLY = (
    "WAIT_TIMEOUT_SECONDS",
    "PAYLOAD_MAX_BYTES",
    "REDIS_TLS_CA_FILE",
    "REDIS_TLS_CERT_FILE",
    "REDIS_TLS_KEY_FILE",
)


def _usage_error(exc: SettingError) -> CliError:
    flag = exc.name if exc.name in _ENV_ONLY else _FLAGS.get(exc.name, "--redis-url / REDIS_URL")
    return CliError(str(exc).replace(f"setting {exc.name}", flag), EXIT_USAGE)


def _redis_problem(exc: redis.RedisError, url: str) -> str:
    """One line for the user (exit code 3)."""
    where = redact_url(url)
    if isinstance(exc, PasswordRequired):
        return f"Redis at {where} requires a password: set it in --redis-url or REDIS_URL"
    if isinstance(exc, redis.AuthenticationError):
        return f"Redis at {where} refused the user or password: {exc}"
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return tls_refusal(exc, url) or f"cannot reach Redis at {where}: {exc}"
    if isinstance(exc, redis.OutOfMemoryError):
        return f"{OUT_OF_MEMORY}: the command was refused"
    refused = explain_refusal(exc)
    if refused is not None:
        return f"Redis at {where} refused the command: {refused}"
    return f"Redis refused the command: {type(exc).__name__}: {exc}"


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, out: TextIO | None = None) -> int:  # noqa: PLR0911
    parser = build_parser()
    args = parser.parse_args(argv)
    out = out if out is not None else sys.stdout
    stdin = stdin if stdin is not None else sys.stdin
    if args.command == "acl-rule":  # needs no Redis
        if not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", args.user):
            print(
                f"{PROG}: acl-rule: {one_line(repr(args.user))} is not a user name (letters, digits, _ . @ -)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        print(setuser(args.user), file=out)
        return EXIT_OK
    if args.command == "demo":  # runs its own server
        return demo_command.main(args, parse_duration)
    queue: JobQueue | None = None
    try:
        try:
            url = validate_redis_url(args.redis_url)
            names = parse_queue_names(args.queue)
            shards = SETTING_BY_NAME["QUEUE_SHARDS"].parse(str(args.shards).strip())
            wait_replicas = SETTING_BY_NAME["WAIT_REPLICAS"].parse(str(args.wait_replicas).strip())
            wait_timeout = SETTING_BY_NAME["WAIT_TIMEOUT_SECONDS"].read(os.environ)
            payload_max_bytes = SETTING_BY_NAME["PAYLOAD_MAX_BYTES"].read(os.environ)
            tls: TlsFiles = {
                "tls_ca_file": SETTING_BY_NAME["REDIS_TLS_CA_FILE"].read(os.environ) or None,
                "tls_cert_file": SETTING_BY_NAME["REDIS_TLS_CERT_FILE"].read(os.environ) or None,
                "tls_key_file": SETTING_BY_NAME["REDIS_TLS_KEY_FILE"].read(os.environ) or None,
            }
            check_tls(url, tls)
        except SettingError as exc:
            raise _usage_error(exc) from None
        except ValueError as exc:
            raise CliError(f"invalid --queue / QUEUE_NAME: {exc}", EXIT_USAGE) from None
        queue = open_queue(
            url,
            names,
            shards=shards,
            wait_replicas=wait_replicas,
            wait_timeout_seconds=wait_timeout,
            payload_max_bytes=payload_max_bytes,
            **tls,
        )
        try:
            # What only Redis can tell: a cluster node with db 3, another number of shards.
            queue.ping()
            return run(args, queue, stdin, out)
        except OptionError as exc:
            raise _usage_error(SettingError.of(exc)) from None
        except NotReplicated as exc:  # a TimeoutError, but Redis is there: say what happened
            raise CliError(str(exc), EXIT_REDIS) from None
    except CliError as exc:
        print(f"{PROG}: {one_line(str(exc))}", file=sys.stderr)
        return exc.code
    except redis.RedisError as exc:
        print(f"{PROG}: {one_line(_redis_problem(exc, args.redis_url))}", file=sys.stderr)
        return EXIT_REDIS
    except BrokenPipeError:  # `setqueue stats --watch | head`
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    finally:
        if queue is not None:
            queue.close()
