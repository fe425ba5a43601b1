"""Settings of the test project. The environment chooses the session engine and where Gradus is:

GRADUS_URL      redis://[user:pass@]host:port/db of the session keyspace
GRADUS_CACHE_A  / GRADUS_CACHE_B   cache URLs of two tenants (aliases "alpha" and "beta")
SESSIONS        gradus (locked, the default) | gradus-unlocked | django-cache (Django's stock cache engine)
"""
import os

SECRET_KEY = "test-only-secret-key-not-for-production-0123456789"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "testsite.urls"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.sessions"]
DATABASES = {}

GRADUS_URL = os.environ["GRADUS_URL"]
SESSIONS = os.environ.get("SESSIONS", "gradus")

CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "alpha": {"BACKEND": "gradus.django.cache.GradusCache", "LOCATION": os.environ.get("GRADUS_CACHE_A", GRADUS_URL),
              "OPTIONS": {"LEASE_MS": 5000, "LEASE_WAIT_MS": 5000}},
    "beta": {"BACKEND": "gradus.django.cache.GradusCache", "LOCATION": os.environ.get("GRADUS_CACHE_B", GRADUS_URL)},
}

if SESSIONS == "django-cache":
    # Django's stock cache session engine on its stock Redis backend, pointed at the same Gradus.
    CACHES["sessions"] = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": GRADUS_URL}
    SESSION_ENGINE = "django.contrib.sessions.backends.cache"
    SESSION_CACHE_ALIAS = "sessions"
    SESSION_MIDDLEWARE = "django.contrib.sessions.middleware.SessionMiddleware"
else:
    SESSION_ENGINE = "gradus.django.sessions"
    SESSION_MIDDLEWARE = "gradus.django.sessions.SessionMiddleware"
    GRADUS_SESSIONS = {
        "URL": GRADUS_URL,
        "LOCKING": SESSIONS == "gradus",
        "LOCK_WAIT_MS": 20000,
        "LEASE_MS": 60000,
    }

MIDDLEWARE = [SESSION_MIDDLEWARE]

LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["console"], "level": "ERROR"}},
}
