"""The Redis cache (API rate limits) keeps its connections across requests: Django builds a
cache object per request context under ASGI, and each used to open its own connection."""

from __future__ import annotations

import asyncio
import contextvars
import os
from typing import Any

import httpx
import pytest
import redis.connection
from rest_framework.authtoken.models import Token
from rest_framework.throttling import SimpleRateThrottle

from agentsite.asgi import application

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="the cache is Redis only with REDIS_URL"),
]


async def test_api_requests_in_their_own_contexts_reuse_one_redis_connection(
    monkeypatch: pytest.MonkeyPatch, alice: Any
) -> None:
    token = (await Token.objects.aget_or_create(user=alice))[0].key
    headers = {"Authorization": f"Bearer {token}"}
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", headers=headers) as client:
        first = await client.get("/api/sessions/")
        assert first.status_code == 200, first.text  # the pool's first connection
        connects: list[Any] = []
        real_connect = redis.connection.Connection._connect

        def counted(self: Any) -> Any:
            connects.append(self)
            return real_connect(self)

        monkeypatch.setattr(redis.connection.Connection, "_connect", counted)

        # Each request from a fresh context, as Daphne starts each from its reactor's.
        answers = [
            (await asyncio.create_task(client.get("/api/sessions/"), context=contextvars.Context())).status_code
            for _ in range(10)
        ]
        # ...and every one was counted: at a rate of 11 a minute, the twelfth is refused.
        monkeypatch.setitem(SimpleRateThrottle.THROTTLE_RATES, "user", "11/min")
        twelfth = await client.get("/api/sessions/")

    assert answers == [200] * 10
    assert connects == []  # each request's rate limit was counted on the kept connection
    assert twelfth.status_code == 429
