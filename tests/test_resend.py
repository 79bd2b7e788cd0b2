"""redis-py resends a command after a connection error: a resent claim, ack or fail must not apply
twice. A TCP proxy lets the script run, then cuts the connection before the reply, as a blip does."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from setqueue import FailOutcome, Queue, new_request_id
from tests.support import RedisServer


class ReplyDroppingProxy:
    """Forwards TCP to Redis; once armed, lets the next EVALSHA through, swallows its reply and closes
    the client's connection."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.dropped = 0
        self._armed = threading.Event()
        self._drop_next_reply = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self._armed.set()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._requests, args=(downstream, upstream), daemon=True).start()
            threading.Thread(target=self._replies, args=(upstream, downstream), daemon=True).start()

    def _requests(self, downstream: socket.socket, upstream: socket.socket) -> None:
        try:
            while data := downstream.recv(65536):
                if self._armed.is_set() and b"EVALSHA" in data.upper():
                    self._armed.clear()
                    self._drop_next_reply.set()
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            upstream.close()

    def _replies(self, upstream: socket.socket, downstream: socket.socket) -> None:
        try:
            while data := upstream.recv(65536):
                if self._drop_next_reply.is_set():
                    self._drop_next_reply.clear()
                    self.dropped += 1
                    downstream.shutdown(socket.SHUT_RDWR)
                    downstream.close()
                    return
                downstream.sendall(data)
        except OSError:
            pass
        finally:
            downstream.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[ReplyDroppingProxy]:
    p = ReplyDroppingProxy(redis_server.port)
    yield p
    p.close()


@pytest.fixture
def flaky_queue(proxy: ReplyDroppingProxy, queue_name: str) -> Iterator[Queue]:
    """Through the proxy, with redis-py's default retry."""
    q = Queue.from_url(f"redis://127.0.0.1:{proxy.port}/0", name=queue_name, max_attempts=3, retry_backoff_seconds=0)
    yield q
    q.close()


def test_a_resent_claim_returns_the_same_leases_and_claims_once(
    flaky_queue: Queue, queue: Queue, proxy: ReplyDroppingProxy, client: redis.Redis
) -> None:
    queue.enqueue([f"j{i}" for i in range(10)])
    proxy.arm()
    leases = flaky_queue.claim(4)
    assert proxy.dropped == 1 and proxy.connections >= 2  # the reply was lost and redis-py resent
    assert len(leases) == 4
    stats = queue.stats()
    assert (stats["todos"], stats["in_progress"]) == (6, 4)  # not 8 claimed
    [token] = {lease.token for lease in leases}  # one claim, one lease for its four jobs
    assert client.get(queue.keys.lock(token)) == "4"
    for lease in leases:
        assert client.hget(queue.keys.owners, lease.id) == token
        assert client.hget(queue.keys.attempts, lease.id) == "1"
        assert lease.attempt == 1
    assert [r.acked for r in queue.ack_many(leases)] == [True] * 4


def test_a_resent_ack_reports_success_not_stale(flaky_queue: Queue, queue: Queue, proxy: ReplyDroppingProxy) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    proxy.arm()
    assert flaky_queue.ack(lease) is True
    assert proxy.dropped == 1
    assert queue.stats()["done"] == 1


def test_a_resent_fail_counts_one_failure(flaky_queue: Queue, queue: Queue, proxy: ReplyDroppingProxy) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    proxy.arm()
    assert flaky_queue.fail(lease, "boom") is FailOutcome.RETRIED
    assert proxy.dropped == 1
    [again] = queue.claim()
    assert again.attempt == 2  # one failure recorded, not two (which would have dead-lettered at 3)


def test_a_resent_enqueue_reports_the_ids_it_added(flaky_queue: Queue, queue: Queue, proxy: ReplyDroppingProxy) -> None:
    proxy.arm()
    assert flaky_queue.enqueue(["a", "b", "c"]) == 3
    assert proxy.dropped == 1
    assert queue.stats()["todos"] == 3


# -- a retry by the caller, after redis-py gave up: the same request id


@pytest.fixture
def unretried_queue(proxy: ReplyDroppingProxy, queue_name: str) -> Iterator[Queue]:
    """Through the proxy, without resends: a lost reply is the caller's ConnectionError, as when an
    outage outlasts redis-py's resends and the service retries."""
    client = redis.Redis(port=proxy.port, decode_responses=True, retry=Retry(NoBackoff(), 0))
    q = Queue(client, queue_name, max_attempts=3, retry_backoff_seconds=0)
    yield q
    q.close()


def lost_reply(proxy: ReplyDroppingProxy, call: Callable[[], object]) -> None:
    proxy.arm()
    with pytest.raises(redis.ConnectionError):
        call()
    assert proxy.dropped == 1


def test_an_ack_retried_with_its_request_id_reports_acked_not_stale(
    unretried_queue: Queue, queue: Queue, proxy: ReplyDroppingProxy
) -> None:
    queue.enqueue(["a", "b"])
    leases = queue.claim(2)
    request_id = new_request_id()
    lost_reply(proxy, lambda: unretried_queue.ack_many(leases, request_id=request_id))
    assert [r.acked for r in unretried_queue.ack_many(leases, request_id=request_id)] == [True, True]
    assert [r.acked for r in unretried_queue.ack_many(leases)] == [False, False]  # a new call: stale
    assert queue.stats()["done"] == 2


def test_a_claim_retried_with_its_request_id_gets_its_leases(
    unretried_queue: Queue, queue: Queue, proxy: ReplyDroppingProxy
) -> None:
    queue.enqueue(["a", "b", "c"])
    request_id = new_request_id()
    lost_reply(proxy, lambda: unretried_queue.claim(2, request_id=request_id))
    leases = unretried_queue.claim(2, request_id=request_id)
    assert [lease.id for lease in leases] == ["a", "b"]
    assert queue.stats()["in_progress"] == 2 and [lease.id for lease in queue.claim(5)] == ["c"]


def test_a_fail_retried_with_its_request_id_counts_one_failure(
    unretried_queue: Queue, queue: Queue, proxy: ReplyDroppingProxy
) -> None:
    queue.enqueue(["a"])
    [lease] = queue.claim()
    request_id = new_request_id()
    lost_reply(proxy, lambda: unretried_queue.fail(lease, "boom", request_id=request_id))
    assert unretried_queue.fail(lease, "boom", request_id=request_id) is FailOutcome.RETRIED
    [again] = queue.claim()
    assert again.attempt == 2
