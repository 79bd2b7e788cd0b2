"""``setqueue pause``, ``resume``, ``limit`` and ``groups``. Every value is checked before anything is
written, and so is the queue: changing the limits of a queue Redis has never heard of is refused (a
mistyped name, far more likely than a plan).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import TextIO

from setqueue.interface import JobQueue
from setqueue.keys import check_utf8, validate_group
from setqueue.limits import GroupInfo, GroupLimits, Limits, Rate, parse_concurrency

OFF = "off"


class UsageError(ValueError):
    """Refused before anything is written."""


def limits_command(args: argparse.Namespace, queue: JobQueue, out: TextIO) -> int:
    if args.command == "groups":
        if not 1 <= args.most <= 10_000:
            raise UsageError(f"--most must be from 1 to 10000, got {args.most}")
        _print_groups(queue.groups(args.most), args.json, out)
        return 0
    change = args.command != "limit" or _changes(args)
    if change and not _known(queue):
        raise UsageError(
            f"queue {queue.name!r} has no jobs and no limits in Redis: is the name right? (--queue or QUEUE_NAME)"
        )
    if args.command == "pause":
        print(f"paused {queue.name}" if queue.pause() else f"{queue.name} was paused already", file=out)
        return 0
    if args.command == "resume":
        print(f"resumed {queue.name}" if queue.resume() else f"{queue.name} was not paused", file=out)
        return 0
    if change:
        _change_limits(args, queue)
    _print_limits(queue.name, queue.limits(), args.json, out)
    return 0


def _changes(args: argparse.Namespace) -> bool:
    given = (args.rate, args.burst, args.group_concurrency, args.group_rate, args.group_burst)
    if args.clear and args.group is None:
        raise UsageError("--clear goes with --group NAME")
    if args.group is not None and any(value is not None for value in given[:2]):
        raise UsageError("--rate and --burst are the queue's: --group changes a group's --group-* limits")
    if args.group is not None and not args.clear and all(value is None for value in given):
        raise UsageError("--group NAME needs --group-concurrency, --group-rate or --clear")
    return args.clear or any(value is not None for value in given)


def _known(queue: JobQueue) -> bool:
    """Redis holds a job of the queue, its line counter, or its limits."""
    for shard in queue.shards:
        k = shard.keys
        if shard.redis.exists(k.seq, k.limits, k.group_limits, k.todos, k.in_progress, k.done, k.failed, k.scheduled):
            return True
    return False


def _rate(text: str | None, burst: int | None, option: str, now: Rate | None) -> Rate | None:
    """Off (None), a new rate, or (--burst alone) the one in force with a new burst."""
    try:
        if text is None:
            if burst is None or now is None:
                if burst is not None:
                    raise ValueError("there is no rate to give a burst to: give the rate too")
                return now
            return Rate(now.count, now.period_ms, burst)
        if text.strip().lower() == OFF:
            if burst is not None:
                raise ValueError("a burst goes with a rate, not with off")
            return None
        return Rate.parse(check_utf8(option, text), burst)
    except ValueError as exc:
        raise UsageError(f"bad {option}: {exc}") from None


def _concurrency(text: str | None, now: int | None) -> int | None:
    if text is None:
        return now
    if text.strip().lower() == OFF:
        return None
    try:
        return parse_concurrency(check_utf8("--group-concurrency", text))
    except ValueError as exc:
        raise UsageError(f"bad --group-concurrency: {exc}") from None


def _change_limits(args: argparse.Namespace, queue: JobQueue) -> None:
    """Every value parsed first, then the writes."""
    now = queue.limits()
    if args.group is not None:
        try:
            group = validate_group(check_utf8("--group", args.group))
        except ValueError as exc:
            raise UsageError(f"bad --group: {exc}") from None
        if args.clear:
            queue.set_group_limits(group)
            return
        own = now.groups.get(group, now.group_default)
        limits = GroupLimits(
            _concurrency(args.group_concurrency, own.concurrency),
            _rate(args.group_rate, args.group_burst, "--group-rate", own.rate),
        )
        queue.set_group_limits(group, concurrency=limits.concurrency, rate=limits.rate)
        return
    rate = _rate(args.rate, args.burst, "--rate", now.rate)
    default = GroupLimits(
        _concurrency(args.group_concurrency, now.group_default.concurrency),
        _rate(args.group_rate, args.group_burst, "--group-rate", now.group_default.rate),
    )
    if args.rate is not None or args.burst is not None:
        queue.set_rate(rate)
    if default != now.group_default:
        queue.set_group_limits(concurrency=default.concurrency, rate=default.rate)


def _describe(limits: GroupLimits) -> str:
    concurrency = "none" if limits.concurrency is None else str(limits.concurrency)
    return f"concurrency {concurrency}, rate {limits.rate or 'none'}"


def _print_limits(name: str, limits: Limits, as_json: bool, out: TextIO) -> None:
    if as_json:
        print(json.dumps({"queue": name, **limits.as_dict()}), file=out)
        return
    print(f"queue {name}", file=out)
    print(f"  {'paused':<16}{'yes' if limits.paused else 'no'}", file=out)
    print(f"  {'rate':<16}{limits.rate or 'none'}", file=out)
    print(f"  {'each group':<16}{_describe(limits.group_default)}", file=out)
    for group, own in sorted(limits.groups.items()):
        print(f"  group {group}: {_describe(own)}", file=out)


def _print_groups(groups: list[GroupInfo], as_json: bool, out: TextIO) -> None:
    if as_json:
        for info in groups:
            print(json.dumps({**dataclasses.asdict(info), "limits": info.limits.as_dict()}), file=out)
        return
    if not groups:
        print("no group has jobs waiting or in progress", file=out)
        return
    width = max(5, *(len(info.name) for info in groups))
    print(f"{'group':<{width}}  {'waiting':>9}  {'running':>7}  {'state':<8} limits", file=out)
    for info in groups:
        print(
            f"{info.name:<{width}}  {info.waiting:>9}  {info.running:>7}  {info.state:<8} {_describe(info.limits)}",
            file=out,
        )
