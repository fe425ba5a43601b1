"""Typed methods for Gradus' native commands on a redis-py client.

Locks (and session locks) belong to the connection that took them: Gradus releases them when
that connection closes. Use :meth:`Gradus.dedicated` for a lock held across several calls, so the
lock lives on one connection that is closed (releasing it) if the holder dies; and give the
client a ``socket_timeout`` longer than the longest ``wait_ms`` (the wait happens server-side,
with the reply outstanding).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, List, Optional, Union

import redis

Value = Union[bytes, str, int, float]


class GradusError(redis.RedisError):
    """A Gradus-specific failure (subclasses say which)."""


class LockTimeout(GradusError):
    """The wait for a lock (or session lock) ran out while another holder kept it."""


class LockBusy(GradusError):
    """Too many callers already wait for this lock (MAXWAITERS): the redirect-loop guard."""


class LockLost(GradusError):
    """The token no longer holds the lock (its lease ran out, or its connection dropped):
    nothing was written or released."""


@dataclass(frozen=True)
class SessionOpened:
    """The reply of SESSION.OPEN: the lock's fencing token and the session's data (None: no session)."""

    token: int
    data: Optional[bytes]


@dataclass(frozen=True)
class Lease:
    """The reply of GETLEASE.

    - ``value`` set, ``token`` None, not stale: a fresh hit.
    - ``value`` None, ``token`` set: a miss and the lease is yours — compute, then :meth:`Gradus.setlease`.
    - ``value`` None, ``token`` None: a miss while someone else holds the lease — retry shortly.
    - ``stale``: the value was marked stale; with a token, refreshing it is yours.
    """

    value: Optional[bytes]
    token: Optional[int]
    stale: bool

    @property
    def hit(self) -> bool:
        return self.value is not None and self.value != b"" and not self.stale

    @property
    def won(self) -> bool:
        return self.token is not None


def _translate(err: redis.ResponseError) -> Exception:
    text = str(err)
    if text.startswith("LOCKBUSY"):
        return LockBusy(text)
    if text.startswith("WRONGTOKEN") or text.startswith("NOLOCK"):
        return LockLost(text)
    return err


def _lock_args(wait_ms: int, lease_ms: Optional[int], max_waiters: Optional[int]) -> List[Value]:
    args: List[Value] = ["WAIT", int(wait_ms)]
    if lease_ms is not None:
        args += ["LEASE", int(lease_ms)]
    if max_waiters is not None:
        args += ["MAXWAITERS", int(max_waiters)]
    return args


class Gradus:
    """Gradus' own commands on a redis-py client (``redis.Redis``)."""

    def __init__(self, client: redis.Redis):
        self.client = client

    @classmethod
    def from_url(cls, url: str, **kwargs) -> "Gradus":
        """``redis://[user:password@]host:port/db`` (a tenant user and its keyspace's SELECT index)."""
        return cls(redis.Redis.from_url(url, **kwargs))

    def dedicated(self) -> "Gradus":
        """A Gradus on one connection of this client's pool, kept until :meth:`close`: a lock
        taken through it is held by that connection alone."""
        return Gradus(redis.Redis(connection_pool=self.client.connection_pool, single_connection_client=True))

    def close(self) -> None:
        self.client.close()

    def _call(self, *args: Value):
        try:
            return self.client.execute_command(*args)
        except redis.ResponseError as err:
            raise _translate(err) from None

    # -- locks

    def lock(self, name: str, *, wait_ms: int = 0, lease_ms: Optional[int] = None,
             max_waiters: Optional[int] = None) -> Optional[int]:
        """LOCK: the fencing token, or None when ``wait_ms`` ran out (0: try once).
        Raises :class:`LockBusy` when ``max_waiters`` callers already wait."""
        reply = self._call("LOCK", name, *_lock_args(wait_ms, lease_ms, max_waiters))
        return None if reply is None else int(reply)

    def unlock(self, name: str, token: int) -> None:
        """UNLOCK; :class:`LockLost` if the token no longer holds it."""
        self._call("UNLOCK", name, int(token))

    @contextlib.contextmanager
    def locked(self, name: str, *, wait_ms: int, lease_ms: Optional[int] = None,
               max_waiters: Optional[int] = None) -> Iterator[int]:
        """``with gradus.locked("cron:mail", wait_ms=5000, lease_ms=60000) as token: ...`` on a
        dedicated connection (closed at the end, so the lock cannot outlive the block);
        :class:`LockTimeout` when the wait runs out."""
        conn = self.dedicated()
        try:
            token = conn.lock(name, wait_ms=wait_ms, lease_ms=lease_ms, max_waiters=max_waiters)
            if token is None:
                raise LockTimeout(f"lock {name!r} stayed held for {wait_ms} ms")
            try:
                yield token
            finally:
                with contextlib.suppress(LockLost):
                    conn.unlock(name, token)
        finally:
            conn.close()

    # -- sessions

    def session_open(self, sid: str, *, wait_ms: int, lease_ms: Optional[int] = None,
                     max_waiters: Optional[int] = None) -> Optional[SessionOpened]:
        """SESSION.OPEN (lock + read in one round trip): None when ``wait_ms`` ran out."""
        reply = self._call("SESSION.OPEN", sid, *_lock_args(wait_ms, lease_ms, max_waiters))
        if not reply:
            return None
        return SessionOpened(int(reply[0]), reply[1])

    def session_close(self, sid: str, token: int, data: Optional[Union[bytes, str]] = None,
                      ttl: Optional[int] = None) -> None:
        """SESSION.CLOSE: write ``data`` (if given), set the TTL (seconds, if given) and unlock —
        only if ``token`` still holds the lock, else :class:`LockLost` and nothing is written."""
        args: List[Value] = ["SESSION.CLOSE", sid, int(token)]
        if data is not None:
            args += ["DATA", data]
        if ttl is not None:
            args += ["TTL", int(ttl)]
        self._call(*args)

    def session_touch(self, sid: str, ttl: int) -> bool:
        """SESSION.TOUCH: extend the TTL without rewriting the data; False if there is no session."""
        return bool(self._call("SESSION.TOUCH", sid, "TTL", int(ttl)))

    def session_destroy(self, sid: str, token: Optional[int] = None) -> bool:
        """SESSION.DESTROY: delete the data (and release the lock if ``token`` holds it)."""
        args: List[Value] = ["SESSION.DESTROY", sid]
        if token is not None:
            args.append(int(token))
        return bool(self._call(*args))

    # -- leases (stampede protection)

    def getlease(self, key: str, lease_ms: int) -> Lease:
        """GETLEASE: see :class:`Lease`."""
        value, token, stale = self._call("GETLEASE", key, int(lease_ms))
        return Lease(value, None if token is None else int(token), bool(stale))

    def setlease(self, key: str, token: int, value: Union[bytes, str], *, ex: Optional[int] = None,
                 px: Optional[int] = None) -> bool:
        """SETLEASE: store the recomputed value; False when the lease is no longer current."""
        args: List[Value] = ["SETLEASE", key, int(token), value]
        if ex is not None:
            args += ["EX", int(ex)]
        elif px is not None:
            args += ["PX", int(px)]
        return self._call(*args) is not None
