"""Cutting loopback traffic with iptables rules, for the failover and partition tests (as root; the
kernel here has no netem). Every rule a test inserts is deleted when its ``with`` block ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence

import redis

from tests.support.redis_server import need


def replica_links(client: redis.Redis) -> list[int]:
    """The local ports of the replicas' connections to the server ``client`` talks to."""
    return [int(link["addr"].rsplit(":", 1)[1]) for link in client.client_list(_type="replica")]


def replication_rules(master: int, links: Sequence[int]) -> list[list[str]]:
    """Rules that drop what the server on port ``master`` sends its replicas on ``links``."""
    return [["OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(master), "--dport", str(p), "-j", "DROP"] for p in links]


@contextlib.contextmanager
def dropped(rules: Sequence[Sequence[str]], why: str) -> Iterator[None]:
    """Within, iptables holds ``rules`` (each an ``iptables -I`` rule without the ``-I``); all are deleted
    after, whatever happened. ``why`` says what the cut is for, in the failure (under CI) or skip of a
    machine without iptables or root."""
    iptables = shutil.which("iptables") or ""
    if not iptables or os.geteuid() != 0:
        need("iptables", f"{why} drops packets with iptables rules, as root")
    added: list[Sequence[str]] = []
    try:
        for rule in rules:
            subprocess.run([iptables, "-I", *rule], check=True, capture_output=True)
            added.append(rule)
        yield
    finally:
        for rule in added:
            subprocess.run([iptables, "-D", *rule], check=False, capture_output=True)
