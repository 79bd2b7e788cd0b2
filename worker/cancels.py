"""How a worker learns at once that a job it runs was cancelled: cancel.lua publishes the id on
the queue's cancel channel (one per shard), and a listener thread here hears it and stops the job.
A message can be missed (the connection dropped at that moment); the lease keeper's next renewal
finds the job cancelled anyway (renew.lua answers so), at most LEASE_SECONDS/3 later. A Redis
user that may not subscribe is no outage: the listener says so once through ``on_refused`` (the
worker stops with exit code 3, as for any command its ACL rule lacks) and listens no more."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis

from setqueue.runtime.acl import explain_refusal
from setqueue.runtime.backoff import Backoff
from setqueue.scripts import text

# How long one wait for a message lasts: the listener looks at its stop flag this often.
LISTEN_SLICE_SECONDS = 1.0


class CancelListener:
    """Calls ``on_cancel(job_id)`` for each id published on ``channels``, from its own thread."""

    def __init__(
        self,
        client: redis.Redis,
        channels: Sequence[str],
        on_cancel: Callable[[str], None],
        log: logging.Logger,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.channels = list(channels)
        self.on_cancel = on_cancel
        self.log = log
        self.on_refused = on_refused
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cancel-listener", daemon=True)

    def start(self) -> CancelListener:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        backoff = Backoff(base=0.1, cap=5.0)
        while not self._stop.is_set():
            pubsub: Any = self.client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(*self.channels)
                backoff.reset()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=LISTEN_SLICE_SECONDS)
                    if message is not None and message.get("type") == "message":
                        self.on_cancel(text(message["data"]))
            except Exception as exc:
                if self._stop.is_set():  # the worker closed the client under us: it is stopping
                    return
                refused = explain_refusal(exc)
                if refused is not None:  # no retry helps
                    if self.on_refused is not None:
                        self.on_refused(f"{refused} (listening for cancelled jobs)")
                    else:
                        self.log.error("the cancel listener stops: %s", refused)
                    return
                if isinstance(exc, redis.RedisError):  # Redis away: listen again; renewals cover the gap
                    self.log.debug("cancel listener: %s; listening again", exc)
                else:  # never die silently: renewals still find cancelled jobs, but say so
                    self.log.exception("the cancel listener failed; listening again")
                self._stop.wait(backoff.next())
            finally:
                pubsub.close()
