"""The fault proxy itself (tests/support/faultproxy.py): each fault does what it says, on a real Redis."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support import RedisServer
from tests.support.faultproxy import FaultProxy
from tests.support.waits import wait_until


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[FaultProxy]:
    with FaultProxy(redis_server.port) as p:
        yield p


def client(proxy: FaultProxy, timeout: float = 0.5) -> redis.Redis:
    return redis.Redis.from_url(
        proxy.url(), socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )


def test_it_forwards_both_ways(proxy: FaultProxy) -> None:
    c = client(proxy)
    assert c.set("faultproxy:k", "v")
    assert c.get("faultproxy:k") == b"v"
    assert proxy.open_connections() == 1


def test_latency_delays_each_round_trip(proxy: FaultProxy) -> None:
    c = client(proxy, timeout=5)
    c.ping()
    proxy.set_latency(0.2, jitter=0.1)
    started = time.monotonic()
    c.ping()
    # A lower bound only (a busy machine adds, never removes): 0.2 s less 10%.
    assert time.monotonic() - started >= 0.18


def test_a_blackhole_times_out_without_a_close_and_stays_dead_after_heal(proxy: FaultProxy) -> None:
    c = client(proxy)
    c.ping()
    proxy.blackhole()
    with pytest.raises(redis.TimeoutError):  # no FIN, no RST: only the socket timeout ends the call
        c.ping()
    assert proxy.dropped_bytes > 0 and proxy.poisoned_connections() == 1
    proxy.heal()
    assert client(proxy).ping()  # a new connection goes through
    assert proxy.poisoned_connections() == 1  # the half-open one never comes back


def test_a_one_way_blackhole_drops_only_the_replies(proxy: FaultProxy, redis_server: RedisServer) -> None:
    c = client(proxy)
    c.ping()
    proxy.blackhole(up=False, down=True)
    with pytest.raises(redis.TimeoutError):
        c.set("faultproxy:one-way", "arrived")
    direct = redis.Redis.from_url(redis_server.url)
    assert direct.get("faultproxy:one-way") == b"arrived"  # the write went through; its reply did not


def test_a_reset_connection_is_replaced_and_a_refused_one_is_an_error(proxy: FaultProxy) -> None:
    c = client(proxy)
    c.ping()
    assert proxy.reset_all() == 1
    assert c.ping()  # the pool sees the reset connection before sending, and opens another
    assert proxy.accepted == 2
    proxy.refuse()
    with pytest.raises(redis.ConnectionError):
        client(proxy).ping()
    proxy.refuse(False)
    wait_until(lambda: client(proxy).ping(), 5, "a connection accepted again")


def test_a_bandwidth_limit_slows_a_large_reply(proxy: FaultProxy) -> None:
    c = client(proxy, timeout=10)
    c.set("faultproxy:big", b"x" * 200_000)
    proxy.set_bandwidth(1_000_000)
    started = time.monotonic()
    assert len(c.get("faultproxy:big") or b"") == 200_000
    assert time.monotonic() - started >= 0.15  # 200 kB at 1 MB/s, less a chunk's worth
