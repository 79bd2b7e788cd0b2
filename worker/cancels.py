"""cancel.lua publishes a cancelled id on the shard's cancel channel; a listener thread here stops
the job. A missed message (a dropped connection) is caught by the next lease renewal, at most
LEASE_SECONDS/3 later. A user the ACL forbids to subscribe is said once through ``on_refused``
(the worker exits 3) and the listener stops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis

from setqueue.runtime.acl import explain_refusal
from setqueue.runtime.backoff import Backoff
from setqueue.scripts import text

LISTEN_SLICE_SECONDS = 1.0  # how often the listener looks at its stop flag


class CancelListener:
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
                if self._stop.is_set():  # the worker closed the client: it is stopping
                    return
                refused = explain_refusal(exc)
                if refused is not None:  # no retry helps
                    if self.on_refused is not None:
                        self.on_refused(f"{refused} (listening for cancelled jobs)")
                    else:
                        self.log.error("the cancel listener stops: %s", refused)
                    return
                if isinstance(exc, redis.RedisError):  # renewals cover the gap
                    self.log.debug("cancel listener: %s; listening again", exc)
                else:
                    self.log.exception("the cancel listener failed; listening again")
                self._stop.wait(backoff.next())
            finally:
                pubsub.close()
