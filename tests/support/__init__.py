"""What the tests share: real parts and the means to watch them.

- ``redis_server``: a redis-server process on a free port (``RedisServer``, ``PersistentRedisServer``),
  ``need`` (a missing part fails under CI, never skips), ``REPO_ROOT``, ``queue_members``;
- ``procs``: the services as real processes (``Proc``), their /metrics and /healthz, ``wait_until``;
- ``jobs``: job handlers for real workers, with an execution log counted from the handler's side;
- ``actors``: the library's actors (producer, worker, cleaner) as plain processes;
- ``cluster``: a real multi-node Redis Cluster.
"""

from tests.support.redis_server import (
    REPO_ROOT,
    PersistentRedisServer,
    RedisServer,
    free_port,
    need,
    queue_members,
    redis_server_binary,
)

__all__ = [
    "REPO_ROOT",
    "PersistentRedisServer",
    "RedisServer",
    "free_port",
    "need",
    "queue_members",
    "redis_server_binary",
]
