"""One redis-py connection pool per Gradus URL, shared by the Django backends of a process."""
from __future__ import annotations

import threading
from typing import Dict, Tuple

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

_pools: Dict[Tuple, redis.ConnectionPool] = {}
_lock = threading.Lock()


def client_for(url: str, *, socket_timeout: float, connect_timeout: float, max_connections: int = 0) -> redis.Redis:
    """A client on the shared pool for ``url`` with these timeouts.

    Commands are not retried behind the application's back: a lock command retried on a new
    connection would not hold the lock the first connection took."""
    key = (url, socket_timeout, connect_timeout, max_connections)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            kwargs = dict(socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout,
                          retry=Retry(NoBackoff(), 0))
            if max_connections:
                kwargs["max_connections"] = max_connections
            pool = redis.ConnectionPool.from_url(url, **kwargs)
            _pools[key] = pool
    return redis.Redis(connection_pool=pool)
