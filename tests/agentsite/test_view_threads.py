"""Synchronous pages and API views are served from the pool's threads under ASGI, which keep
their database connections (issue 23): Django ran each on a thread made for its request, so
every request opened (and PostgreSQL started a backend for) a new connection."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import Client
from rest_framework.authtoken.models import Token

from agentsite.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


async def test_api_requests_under_asgi_reuse_the_pool_threads_connections(
    monkeypatch: pytest.MonkeyPatch, alice: Any
) -> None:
    token = (await Token.objects.aget_or_create(user=alice))[0].key
    opened: list[str] = []
    connect = BaseDatabaseWrapper.connect

    def counted(self: Any) -> None:
        opened.append(threading.current_thread().name)
        connect(self)

    monkeypatch.setattr(BaseDatabaseWrapper, "connect", counted)
    transport = httpx.ASGITransport(app=application)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost", headers=headers) as client:
        for index in range(10):
            created = await client.post("/api/sessions/", json={"title": f"t{index}"})
            assert created.status_code == 201, created.text
            listed = await client.get(f"/api/sessions/{created.json()['id']}/events/")
            assert listed.status_code == 200, listed.text

    # Only the pools' threads connect (a thread an earlier test used has its connection
    # already), each at most once: a connection kept, not one per request (before: one on a
    # new thread for each of the 20 requests).
    assert all(name.startswith(("agentsite-view", "agentsite-db")) for name in opened), opened
    assert len(opened) == len(set(opened)), opened


def test_under_wsgi_a_view_runs_on_the_requests_own_thread(alice: Any) -> None:
    """The synchronous test client (WSGI): the view sees the request thread's connection,
    as Django serves it."""
    client = Client()
    client.force_login(alice)
    seen: list[str] = []
    from sessions_app import apis

    get = apis.SessionListCreateApi.get

    def spied(self: Any, request: Any) -> Any:
        seen.append(threading.current_thread().name)
        return get(self, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(apis.SessionListCreateApi, "get", spied)
        assert client.get("/api/sessions/").status_code == 200
    assert seen == [threading.current_thread().name]


async def test_djangos_middleware_run_in_one_hop_under_asgi_and_still_act(
    monkeypatch: pytest.MonkeyPatch, alice: Any
) -> None:
    # Each of Django's middleware hopped to the request's thread for each of its methods (19
    # thread hops per API request); marked synchronous, the run of them is entered once.
    import asgiref.sync

    token = (await Token.objects.aget_or_create(user=alice))[0].key
    hops: list[str] = []
    call = asgiref.sync.SyncToAsync.__call__

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await call(self, *args, **kwargs)

    monkeypatch.setattr(asgiref.sync.SyncToAsync, "__call__", counted)
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        auth = {"Authorization": f"Bearer {token}"}
        assert (await client.get("/api/sessions/", headers=auth)).status_code == 200  # the process's first
        hops.clear()
        listed = await client.get("/api/sessions/", headers=auth)
        assert listed.status_code == 200, listed.text
        # Left: the request signals, the chain, CSRF's process_view, the view, the render, the close.
        assert len(hops) <= 6, hops
        assert not [h for h in hops if h.endswith(("process_request", "process_response"))], hops
        # The middleware still act: the clickjacking header, the session cookie's CSRF check.
        assert listed.headers["X-Frame-Options"] == "DENY"
        login = await client.get("/login/")
        assert login.status_code == 200 and "csrftoken" in login.cookies
        refused = await client.post("/login/", data={"username": "alice", "password": "x"})
        assert refused.status_code == 403
