"""API rate limits that fail open when their shared cache is unreachable.

With `REDIS_URL` set the counters live in Redis (shared by every web process). A Redis
outage must not turn every API request into a 500: while the cache cannot be reached the
request is let through and a warning is logged, as the rest of the platform degrades
(live events fall back to the ledger) rather than stops."""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError
from rest_framework import throttling

logger = logging.getLogger(__name__)

_UNREACHABLE = (RedisError, OSError)


class _FailOpen:
    def allow_request(self, request: Any, view: Any) -> bool:
        try:
            return super().allow_request(request, view)  # type: ignore[misc]
        except _UNREACHABLE as exc:
            logger.warning("API rate limit not applied: its cache is unreachable (%s: %s)", type(exc).__name__, exc)
            return True


class UserRateThrottle(_FailOpen, throttling.UserRateThrottle):
    """DRF's per-user rate, let through while the shared cache is down."""


class AnonRateThrottle(_FailOpen, throttling.AnonRateThrottle):
    """DRF's per-address rate for anonymous requests, let through while the shared cache is down."""
