"""The Redis cache with one client, and so one connection pool, per process.

Django keeps a cache object per async context (`caches` is context-local): under ASGI every
request builds a new `RedisCache`, whose client builds a new connection pool, so every
request that touched the cache (each API request's rate limit) opened a new Redis
connection: a TCP connect and its handshake commands, then a socket left to the collector.
Issue 23: bench/load.py opened about 0.8 Redis connections per request.

`SharedRedisCache` hands every instance with the same servers and options the process's one
`RedisCacheClient`. Its pools are redis-py's, safe across threads and reset in a forked child.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SharedRedisCache(RedisCache):
    """Django's `RedisCache`, its client shared by every instance configured alike."""

    _clients: ClassVar[dict[str, RedisCacheClient]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @property
    def _cache(self) -> RedisCacheClient:  # type: ignore[override]  # Django's is a cached_property
        key = repr((self._servers, sorted(self._options.items())))
        client = self._clients.get(key)
        if client is None:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    client = self._clients[key] = self._class(self._servers, **self._options)
        return client
