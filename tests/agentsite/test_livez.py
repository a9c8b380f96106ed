"""`GET /livez`, the balancer's check (deploy/haproxy.cfg): answered by the ASGI application
on the event loop while Django's shared thread for synchronous work is held, where `/healthz`
(a Django view) waits for it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import httpx
import pytest
from asgiref.sync import sync_to_async

from agentsite.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://testserver") as c:
        yield c


async def test_livez_answers_while_djangos_shared_thread_is_held(http: httpx.AsyncClient) -> None:
    release = threading.Event()
    held = threading.Event()

    def hold() -> None:  # the shared thread busy for long, as on a loaded node
        held.set()
        release.wait(30)

    holder = asyncio.ensure_future(sync_to_async(hold, thread_sensitive=True)())
    health: asyncio.Future[httpx.Response] | None = None
    try:
        await asyncio.to_thread(held.wait, 10)
        health = asyncio.ensure_future(http.get("/healthz"))
        live = await asyncio.wait_for(http.get("/livez"), timeout=20)
        assert live.status_code == 200
        assert live.json() == {"status": "alive"}
        assert live.headers["content-type"] == "application/json"
        assert not health.done()  # the Django view is queued behind the held thread
    finally:
        release.set()
        await holder
    assert (await asyncio.wait_for(health, timeout=30)).status_code in (200, 503)


async def test_livez_answers_head_and_refuses_other_methods_in_the_envelope(http: httpx.AsyncClient) -> None:
    head = await http.head("/livez")
    assert head.status_code == 200 and head.content == b""
    refused = await http.post("/livez")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "GET, HEAD"
    assert refused.json()["error"]["code"] == "method_not_allowed"
