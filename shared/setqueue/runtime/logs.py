"""Logging of the services: one line per record on stderr, as text or as one JSON object."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per line; a supervisor's worker process adds its ``child`` index."""

    def __init__(self, service: str, child: int | None = None) -> None:
        super().__init__()
        self.service = service
        self.child = child

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "service": self.service,
            **({} if self.child is None else {"child": self.child}),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


def configure_logging(level: str, fmt: str, service: str, stream: Any = None, *, child: int | None = None) -> None:
    """``child``: a supervisor's worker process, shown as ``setqueue-worker[1]`` or ``"child": 1``."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(service, child))
    else:
        name = service if child is None else f"{service}[{child}]"
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s {name} %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S%z")
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # redis-py is chatty at DEBUG.
    logging.getLogger("redis").setLevel(max(logging.WARNING, logging.getLevelName(level)))


def flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # a closed stream must not stop an exit
            handler.flush()


def plural(n: int, noun: str) -> str:
    """``1 job``, ``3 jobs``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
