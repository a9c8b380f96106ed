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
from redis.commands.core import Script


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

    def log_request(self, key: str, *, now: float, window_s: float, limit: int) -> tuple[bool, int, float | None]:
        """One request against a sliding log of request times (DRF's throttle rule: at most
        `limit` requests within `window_s`; a refused request is not logged), in one atomic
        Redis call. Returns whether it is allowed, the requests in the window after it, and
        the oldest one's time. DRF's own throttle reads the whole log from the cache and
        writes it back, unpickled and pickled, per request: two round trips and a list as
        long as the rate (thousands of entries) each time."""
        redis_key = self.make_and_validate_key(f"ratelog:{key}")
        client = self._cache.get_client(redis_key, write=True)  # a new client on the shared pool
        allowed, count, oldest = _SLIDING_LOG(keys=[redis_key], args=[repr(now), repr(window_s), limit], client=client)
        return bool(allowed), int(count), float(oldest) if oldest else None


# Newest request first: the oldest is at the tail, where expired entries are dropped.
_SLIDING_LOG = Script(
    None,
    b"""
local now, window, limit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
while true do
    local last = redis.call('LINDEX', KEYS[1], -1)
    if not last or tonumber(last) > now - window then break end
    redis.call('RPOP', KEYS[1])
end
local count = redis.call('LLEN', KEYS[1])
if count >= limit then
    return {0, count, redis.call('LINDEX', KEYS[1], -1)}
end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000))
return {1, count + 1, redis.call('LINDEX', KEYS[1], -1)}
""",
)  # EVALSHA, loading the script once per server
