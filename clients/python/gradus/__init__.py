"""Gradus for Python: typed redis-py helpers for Gradus' own commands, and Django backends.

- :class:`gradus.client.Gradus` — ``lock``/``unlock``, ``session_open``/``session_close``/
  ``session_touch``/``session_destroy``, ``getlease``/``setlease`` on a redis-py client.
- :mod:`gradus.django.sessions` — ``SESSION_ENGINE`` with a middleware that locks the session for
  the request (``SESSION.OPEN`` … ``SESSION.CLOSE``), or runs unlocked.
- :mod:`gradus.django.cache` — ``GradusCache``, a ``CACHES`` backend (``delete_pattern``,
  tenant-scoped ``clear()``, leases on ``get_or_set``).
"""
from gradus.client import (
    Gradus,
    GradusError,
    Lease,
    LockBusy,
    LockLost,
    LockTimeout,
    SessionOpened,
)

__all__ = ["Gradus", "GradusError", "Lease", "LockBusy", "LockLost", "LockTimeout", "SessionOpened"]
__version__ = "0.1.0"
