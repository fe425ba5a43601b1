"""``GradusCache``: a Django ``CACHES`` backend for Gradus.

- ``clear()`` is ``FLUSHDB``: in Gradus it empties the caller's keyspace of its own tenant only, in
  O(1), so one site's purge never touches another site's cache (or any sessions).
- ``delete_pattern("views.*")`` deletes the keys matching a glob (made with the cache's key
  function); a plain prefix (``"prefix*"``) is one server-side ``PURGE``.
- ``get_or_set()`` takes a lease on a miss (``GETLEASE``): one caller computes the value and
  stores it with ``SETLEASE``, the others wait for it instead of all recomputing (a stampede).
- Integers are stored as decimal strings (so ``incr`` is ``INCRBY``), everything else pickled.

Settings::

    CACHES = {
        "default": {
            "BACKEND": "gradus.django.cache.GradusCache",
            "LOCATION": "redis://alpha:alpha-pass@127.0.0.1:6379/1",   # a tenant user, its cache keyspace
            "TIMEOUT": 300,
            "OPTIONS": {"LEASE_MS": 10000, "LEASE_WAIT_MS": 5000, "SOCKET_TIMEOUT": 5, "CONNECT_TIMEOUT": 2},
        }
    }

As with Django's own Redis backend, an unreachable Gradus raises redis-py's ``ConnectionError``.
"""
from __future__ import annotations

import pickle
import time
from typing import Any, Dict, Iterable, List, Optional

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache

from gradus.client import Gradus
from gradus.django._connection import client_for

_GLOB_CHARS = set("*?[]\\")


class GradusCache(BaseCache):
    def __init__(self, server, params: Dict[str, Any]):
        super().__init__(params)
        self._url = server[0] if isinstance(server, (list, tuple)) else server
        options = params.get("OPTIONS", {})
        self._lease_ms = int(options.get("LEASE_MS", 10000))
        self._lease_wait_ms = int(options.get("LEASE_WAIT_MS", 5000))
        self._socket_timeout = float(options.get("SOCKET_TIMEOUT", 5.0))
        self._connect_timeout = float(options.get("CONNECT_TIMEOUT", 2.0))
        self._max_connections = int(options.get("MAX_CONNECTIONS", 0))

    @property
    def _client(self):
        return client_for(self._url, socket_timeout=self._socket_timeout, connect_timeout=self._connect_timeout,
                          max_connections=self._max_connections)

    @property
    def gradus(self) -> Gradus:
        """The typed helper on this cache's connections (locks, leases)."""
        return Gradus(self._client)

    # -- values

    @staticmethod
    def _encode(value: Any) -> bytes:
        if type(value) is int:
            return str(value).encode()
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def _decode(data: Optional[bytes], default: Any = None) -> Any:
        # b"": the empty placeholder a lease leaves while its value is being computed (a miss).
        if data is None or data == b"":
            return default
        if data[:1] == b"\x80":
            return pickle.loads(data)
        return int(data)

    def _ttl(self, timeout) -> Optional[int]:
        """Seconds for SET EX; None: no expiry; 0: already expired."""
        seconds = self.get_backend_timeout(timeout)
        return None if seconds is None else max(0, int(seconds))

    # -- BaseCache

    def get_backend_timeout(self, timeout=DEFAULT_TIMEOUT):
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        return None if timeout is None else max(0, int(timeout))

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None) -> bool:
        k = self.make_and_validate_key(key, version=version)
        ttl = self._ttl(timeout)
        if ttl == 0:
            return False
        return bool(self._client.set(k, self._encode(value), ex=ttl, nx=True))

    def get(self, key, default=None, version=None):
        k = self.make_and_validate_key(key, version=version)
        return self._decode(self._client.get(k), default)

    def set(self, key, value, timeout=DEFAULT_TIMEOUT, version=None) -> None:
        k = self.make_and_validate_key(key, version=version)
        ttl = self._ttl(timeout)
        if ttl == 0:
            self._client.delete(k)
        else:
            self._client.set(k, self._encode(value), ex=ttl)

    def touch(self, key, timeout=DEFAULT_TIMEOUT, version=None) -> bool:
        k = self.make_and_validate_key(key, version=version)
        ttl = self._ttl(timeout)
        if ttl is None:
            return bool(self._client.persist(k)) or bool(self._client.exists(k))
        if ttl == 0:
            return bool(self._client.delete(k))
        return bool(self._client.expire(k, ttl))

    def delete(self, key, version=None) -> bool:
        return bool(self._client.delete(self.make_and_validate_key(key, version=version)))

    def has_key(self, key, version=None) -> bool:
        # STRLEN, not EXISTS: a lease's empty placeholder is not a value.
        return self._client.strlen(self.make_and_validate_key(key, version=version)) > 0

    def get_many(self, keys: Iterable, version=None) -> Dict:
        keys = list(keys)
        if not keys:
            return {}
        made = [self.make_and_validate_key(k, version=version) for k in keys]
        found = {}
        for key, data in zip(keys, self._client.mget(made)):
            value = self._decode(data, self._missing)
            if value is not self._missing:
                found[key] = value
        return found

    _missing = object()

    def set_many(self, data: Dict, timeout=DEFAULT_TIMEOUT, version=None) -> List:
        ttl = self._ttl(timeout)
        pipe = self._client.pipeline(transaction=False)
        for key, value in data.items():
            k = self.make_and_validate_key(key, version=version)
            if ttl == 0:
                pipe.delete(k)
            else:
                pipe.set(k, self._encode(value), ex=ttl)
        pipe.execute()
        return []

    def delete_many(self, keys: Iterable, version=None) -> None:
        made = [self.make_and_validate_key(k, version=version) for k in keys]
        if made:
            self._client.delete(*made)

    def incr(self, key, delta=1, version=None) -> int:
        k = self.make_and_validate_key(key, version=version)
        if not self._client.exists(k):
            raise ValueError("Key '%s' not found." % key)
        return int(self._client.incrby(k, delta))

    def clear(self) -> None:
        """FLUSHDB: this tenant's keyspace only (Gradus scopes it), freed in the background."""
        self._client.flushdb()

    def close(self, **kwargs) -> None:
        """Connections stay in the shared pool (Django calls this at the end of every request)."""

    # -- Gradus additions

    def delete_pattern(self, pattern: str, version=None) -> int:
        """Delete every key matching the glob ``pattern`` (as given to the cache: prefix and
        version are added); returns how many went."""
        made = self.make_key(pattern, version=version)
        body = made[:-1]
        if made.endswith("*") and not (_GLOB_CHARS & set(body)):
            return int(self._client.execute_command("PURGE", body))
        deleted = 0
        batch: List[bytes] = []
        for k in self._client.scan_iter(match=made, count=1000):
            batch.append(k)
            if len(batch) >= 1000:
                deleted += self._client.unlink(*batch)
                batch = []
        if batch:
            deleted += self._client.unlink(*batch)
        return deleted

    def get_or_set(self, key, default, timeout=DEFAULT_TIMEOUT, version=None):
        """The cached value, or ``default`` (called if callable) computed by exactly one caller
        per miss: the caller that wins the lease computes and stores it; the others wait up to
        LEASE_WAIT_MS for that value (then compute it themselves, without storing)."""
        k = self.make_and_validate_key(key, version=version)
        gradus = self.gradus
        deadline = time.monotonic() + self._lease_wait_ms / 1000
        pause = 0.005
        while True:
            lease = gradus.getlease(k, self._lease_ms)
            if lease.value not in (None, b"") and not lease.won:
                return self._decode(lease.value)
            if lease.won:
                value = default() if callable(default) else default
                if value is not None:
                    ttl = self._ttl(timeout)
                    gradus.setlease(k, lease.token, self._encode(value), ex=ttl or None)
                return value
            if time.monotonic() >= deadline:
                return default() if callable(default) else default
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
