"""API rate limits that fail open when their shared cache is unreachable.

With `REDIS_URL` set the counters live in Redis (shared by every web process). A Redis
outage must not turn every API request into a 500: while the cache cannot be reached the
request is let through and a warning is logged, as the rest of the platform degrades
(live events fall back to the ledger) rather than stops."""

from __future__ import annotations

import logging
from typing import Any

from django.core.cache import caches
from redis.exceptions import RedisError
from rest_framework import throttling

from agentsite.cache import SharedRedisCache

logger = logging.getLogger(__name__)

_UNREACHABLE = (RedisError, OSError)


class _OneTrip:
    """DRF's rule, checked and logged in one atomic Redis call when the cache is the shared
    Redis one (`SharedRedisCache.log_request`); DRF's own get-then-set elsewhere."""

    def allow_request(self, request: Any, view: Any) -> bool:
        backend = caches["default"]
        if self.rate is None or not isinstance(backend, SharedRedisCache):  # type: ignore[attr-defined]
            return super().allow_request(request, view)  # type: ignore[misc,no-any-return]
        self.key = self.get_cache_key(request, view)  # type: ignore[attr-defined]
        if self.key is None:
            return True
        self.now = self.timer()  # type: ignore[attr-defined]
        allowed, count, oldest = backend.log_request(
            self.key,
            now=self.now,
            window_s=self.duration,  # type: ignore[attr-defined]
            limit=self.num_requests,  # type: ignore[attr-defined]
        )
        # What DRF's `wait` reads on a refusal: how many requests the window holds, the
        # oldest last (not built for an allowed request: it can hold thousands).
        self.history = [] if allowed else [oldest or self.now] * count
        return allowed


class _FailOpen:
    def allow_request(self, request: Any, view: Any) -> bool:
        try:
            return super().allow_request(request, view)  # type: ignore[misc]
        except _UNREACHABLE as exc:
            logger.warning("API rate limit not applied: its cache is unreachable (%s: %s)", type(exc).__name__, exc)
            return True


class UserRateThrottle(_FailOpen, _OneTrip, throttling.UserRateThrottle):
    """DRF's per-user rate, let through while the shared cache is down."""


class AnonRateThrottle(_FailOpen, _OneTrip, throttling.AnonRateThrottle):
    """DRF's per-address rate for anonymous requests, let through while the shared cache is down."""
