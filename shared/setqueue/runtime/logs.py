"""Logging of the services: one line per record on stderr, as text or as one JSON object."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the traceback if any); a
    worker process that a supervisor started (PROCESSES > 1) adds its ``child`` index."""

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
    """Log to stderr at ``level``; ``fmt`` is ``text`` or ``json`` (one object per line). ``child``:
    the index of a worker process its supervisor started, shown as ``setqueue-worker[1]`` (text)
    or ``"child": 1`` (json), so that the lines of N processes sharing one stderr tell them apart."""
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
    # redis-py and urllib3-style libraries are chatty at DEBUG; keep them at WARNING unless asked.
    logging.getLogger("redis").setLevel(max(logging.WARNING, logging.getLevelName(level)))


def flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # a closed stream must not stop an exit
            handler.flush()


def plural(n: int, noun: str) -> str:
    """``1 job``, ``3 jobs``: a count and its noun, for log lines."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
