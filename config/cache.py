"""Django's cache on Redis, shared by every web process and worker (CACHES in settings): the API
throttle counts a user's requests across processes and hosts, not per process.

The cache is not a source of truth: with Redis down a read is a miss and a write is dropped (said
once a minute in the log) rather than an error, so a broker outage still gets the API's own 503
"try again" and never a 500 from the throttle. The throttle then counts nothing until Redis is back.
"""

from __future__ import annotations

import logging
import time

from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

logger = logging.getLogger("askdb.cache")
_WARN_EVERY_S = 60.0
_last_warning = [0.0]


def _warn(operation: str, exc: Exception) -> None:
    now = time.monotonic()
    if now - _last_warning[0] >= _WARN_EVERY_S:
        _last_warning[0] = now
        logger.warning("cache %s failed, carrying on without the cache: %s", operation, exc)


def _guarded(name: str, fallback):
    method = getattr(RedisCache, name)

    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (RedisError, OSError) as exc:
            _warn(name, exc)
            return fallback(*args, **kwargs) if callable(fallback) else fallback

    call.__name__ = name
    call.__doc__ = method.__doc__
    return call


def _default(key, default=None, *args, **kwargs):
    return default


class SharedRedisCache(RedisCache):
    get = _guarded("get", _default)
    get_many = _guarded("get_many", {})
    has_key = _guarded("has_key", False)
    set = _guarded("set", None)
    set_many = _guarded("set_many", lambda data, *a, **k: list(data))
    add = _guarded("add", False)
    touch = _guarded("touch", False)
    delete = _guarded("delete", False)
    delete_many = _guarded("delete_many", None)
    clear = _guarded("clear", False)
