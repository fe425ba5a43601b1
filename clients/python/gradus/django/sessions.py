"""A Django ``SESSION_ENGINE`` on Gradus' session commands, with the session locked per request.

Django's stock engines do not lock: two concurrent requests of one user both read the session,
and the later write overwrites the earlier one's changes. Here :class:`SessionMiddleware` (in
place of Django's) opens the session with ``SESSION.OPEN`` — lock and read in one round trip,
waiting server-side (FIFO) while another request of the same session holds it — and the response
closes it with ``SESSION.CLOSE`` (write, TTL, unlock). The lock lives on a connection of its own
for the request, so a request that dies frees it when that connection closes; a hung one loses
it when its lease runs out.

Settings::

    SESSION_ENGINE = "gradus.django.sessions"
    MIDDLEWARE = [..., "gradus.django.sessions.SessionMiddleware", ...]   # instead of Django's
    GRADUS_SESSIONS = {
        "URL": "redis://alpha:alpha-pass@127.0.0.1:6379/0",   # a tenant user and its session keyspace
        "LOCKING": True,          # False: plain GET / SET like Django's stock engines
        "LOCK_WAIT_MS": 30000,    # how long a request waits for its session
        "LEASE_MS": 120000,       # a hung request's lock is taken back after this
        "MAX_WAITERS": None,      # e.g. 8: the 9th waiting request fails at once (redirect loops)
        "KEY_PREFIX": "django.session:",
        "CONNECT_TIMEOUT": 2.0,
    }

Failures are exceptions, never a silently new session: Gradus unreachable raises redis-py's
``ConnectionError``; a lock wait that runs out raises :class:`gradus.LockTimeout`; a lock lost
before the write (lease ran out) raises :class:`gradus.LockLost` and nothing is written.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from django.conf import settings
from django.contrib.sessions.backends.base import CreateError, SessionBase
from django.contrib.sessions.middleware import SessionMiddleware as DjangoSessionMiddleware

from gradus.client import Gradus, LockTimeout
from gradus.django._connection import client_for

DEFAULTS: Dict[str, Any] = {
    "URL": "redis://127.0.0.1:6379/0",
    "LOCKING": True,
    "LOCK_WAIT_MS": 30000,
    "LEASE_MS": 120000,
    "MAX_WAITERS": None,
    "KEY_PREFIX": "django.session:",
    "CONNECT_TIMEOUT": 2.0,
    "SOCKET_TIMEOUT": 5.0,
}


def config() -> Dict[str, Any]:
    return {**DEFAULTS, **getattr(settings, "GRADUS_SESSIONS", {})}


class SessionStore(SessionBase):
    """Session data in Gradus under ``KEY_PREFIX + session_key`` (Django's signed encoding)."""

    def __init__(self, session_key: Optional[str] = None):
        super().__init__(session_key)
        self._conf = config()
        # The lock of this request: its own connection and the fencing token (None: not held).
        self._lock_conn: Optional[Gradus] = None
        self._token: Optional[int] = None
        self._locked_key: Optional[str] = None
        self._closing = False

    # -- connections

    def _gradus(self) -> Gradus:
        conf = self._conf
        # A waiting SESSION.OPEN keeps its reply outstanding for up to LOCK_WAIT_MS.
        timeout = max(float(conf["SOCKET_TIMEOUT"]), conf["LOCK_WAIT_MS"] / 1000 + 5)
        return Gradus(client_for(conf["URL"], socket_timeout=timeout,
                                 connect_timeout=float(conf["CONNECT_TIMEOUT"])))

    def _key(self, session_key: str) -> str:
        return self._conf["KEY_PREFIX"] + session_key

    def _holds(self, session_key: Optional[str]) -> bool:
        return self._token is not None and session_key is not None and self._locked_key == session_key

    # -- the request's lock (called by SessionMiddleware)

    def acquire(self) -> None:
        """Lock and read the session of the request's cookie (SESSION.OPEN). A cookie naming no
        session starts an empty one, as Django does."""
        if not self._conf["LOCKING"] or not self._validate_session_key(self.session_key):
            return
        conn = self._gradus().dedicated()
        try:
            opened = conn.session_open(self._key(self.session_key), wait_ms=int(self._conf["LOCK_WAIT_MS"]),
                                       lease_ms=self._conf["LEASE_MS"], max_waiters=self._conf["MAX_WAITERS"])
            if opened is None:
                raise LockTimeout(f"session stayed locked by another request for {self._conf['LOCK_WAIT_MS']} ms")
        except BaseException:
            conn.close()
            raise
        self._lock_conn, self._token, self._locked_key = conn, opened.token, self.session_key
        if opened.data is None:
            self._unlock()
            self._session_key = None
            self._session_cache = {}
        else:
            self._session_cache = self.decode(opened.data.decode())

    def release(self) -> None:
        """Unlock if the response did not write (SESSION.CLOSE without data) and drop the connection."""
        try:
            self._unlock()
        finally:
            self._closing = False

    def _unlock(self) -> None:
        conn, token, key = self._lock_conn, self._token, self._locked_key
        self._lock_conn, self._token, self._locked_key = None, None, None
        if conn is None:
            return
        try:
            if token is not None:
                conn.session_close(self._key(key), token)
        finally:
            conn.close()

    # -- SessionBase

    def load(self) -> Dict[str, Any]:
        data = self._gradus().client.get(self._key(self.session_key)) if self.session_key else None
        if data is None:
            self._session_key = None
            return {}
        return self.decode(data.decode())

    def exists(self, session_key: str) -> bool:
        return bool(self._gradus().client.exists(self._key(session_key)))

    def create(self) -> None:
        for _ in range(100):
            self._session_key = self._get_new_session_key()
            try:
                self.save(must_create=True)
            except CreateError:
                continue
            self.modified = True
            return
        raise RuntimeError("Unable to create a new session key. It is likely that Gradus is unavailable.")

    def save(self, must_create: bool = False) -> None:
        if self.session_key is None:
            return self.create()
        data = self.encode(self._get_session(no_load=must_create))
        ttl = max(1, self.get_expiry_age())
        key = self._key(self.session_key)
        if must_create:
            if not self._gradus().client.set(key, data, ex=ttl, nx=True):
                raise CreateError
        elif self._holds(self.session_key) and self._closing:
            # The response: write, refresh the TTL and unlock in one round trip.
            conn, token = self._lock_conn, self._token
            self._token = None
            conn.session_close(key, token, data, ttl)
        else:
            # Unlocked, or a save in the middle of the request (the lock stays held until the response).
            (self._lock_conn or self._gradus()).client.set(key, data, ex=ttl)

    def delete(self, session_key: Optional[str] = None) -> None:
        if session_key is None:
            if self.session_key is None:
                return
            session_key = self.session_key
        if self._holds(session_key):
            conn, token = self._lock_conn, self._token
            self._token = None
            conn.session_destroy(self._key(session_key), token)
        else:
            self._gradus().client.delete(self._key(session_key))

    @classmethod
    def clear_expired(cls) -> None:
        """Sessions expire by their TTL in Gradus."""


class SessionMiddleware(DjangoSessionMiddleware):
    """Django's SessionMiddleware, plus: lock the session at the request, close it at the response."""

    def process_request(self, request) -> None:
        super().process_request(request)
        if isinstance(request.session, SessionStore):
            request.session.acquire()

    def process_response(self, request, response):
        session = getattr(request, "session", None)
        if not isinstance(session, SessionStore):
            return super().process_response(request, response)
        session._closing = True
        try:
            return super().process_response(request, response)
        finally:
            session.release()
