"""What the tests share: real parts (redis-server, the services, a cluster) and the means to watch them."""

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
