"""Views the integration tests drive: a session counter, and cache operations on two tenants' caches."""
import json
import threading
import time

from django.core.cache import caches
from django.http import HttpResponse, JsonResponse

_computed = {"n": 0}
_computed_lock = threading.Lock()


def incr(request):
    """Read the counter, think a little (so unlocked requests interleave), write it back + 1."""
    n = request.session.get("n", 0)
    time.sleep(0.02)
    request.session["n"] = n + 1
    return HttpResponse(str(n + 1))


def login(request):
    """What django.contrib.auth.login does to the session: a new key, the data kept."""
    request.session.cycle_key()
    request.session["user"] = "alice"
    return HttpResponse(request.session.session_key)


def logout(request):
    """What django.contrib.auth.logout does: flush (delete the data, forget the key)."""
    request.session.flush()
    return HttpResponse("bye")


def key(request):
    return HttpResponse(request.session.session_key or "")


def show(request):
    return HttpResponse(str(request.session.get("n", 0)))


def _slow_value():
    with _computed_lock:
        _computed["n"] += 1
    time.sleep(0.3)
    return {"expensive": True}


def cache_op(request, alias, op):
    cache = caches[alias]
    q = request.GET
    if op == "set":
        cache.set(q["key"], json.loads(q["value"]), timeout=int(q.get("timeout", 300)))
        return JsonResponse({"ok": True})
    if op == "get":
        return JsonResponse({"value": cache.get(q["key"])})
    if op == "get_many":
        return JsonResponse({"values": cache.get_many(q.getlist("key"))})
    if op == "clear":
        cache.clear()
        return JsonResponse({"ok": True})
    if op == "delete_pattern":
        return JsonResponse({"deleted": cache.delete_pattern(q["pattern"])})
    if op == "incr":
        return JsonResponse({"value": cache.incr(q["key"])})
    if op == "get_or_set":
        return JsonResponse({"value": cache.get_or_set(q["key"], _slow_value, timeout=300)})
    if op == "computed":
        return JsonResponse({"computed": _computed["n"]})
    return HttpResponse(status=404)
