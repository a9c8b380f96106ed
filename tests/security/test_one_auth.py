"""One authentication module (runs.auth): every surface takes the same API token and
refuses the same bad ones, the REST API, `/v1`, A2A and the websocket alike."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator

from agentsite.asgi import application
from sessions_app import services as session_services
from tests.security.support import HOST, ORIGIN, TIMEOUT_S, a2a, a2a_message, client, close_code, rpc

pytestmark = pytest.mark.django_db(transaction=True)


async def _http_surfaces(token: str) -> dict[str, httpx.Response]:
    async with client(token) as http:
        answers = {"rest": await http.get("/api/sessions/"), "openai": await http.get("/v1/models")}
    answers["a2a"] = await a2a("support", rpc("SendMessage", a2a_message("hi")), token)
    return answers


async def _socket_close_code(session_id: str, token: str) -> int | None:
    socket = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/",
        headers=[ORIGIN, HOST, (b"authorization", f"Bearer {token}".encode())],
    )
    connected, code = await socket.connect(timeout=TIMEOUT_S)
    if connected:
        code = await close_code(socket)
    await socket.disconnect()
    return int(code) if code is not None else None


async def test_a_valid_token_is_taken_by_every_surface(alice: Any, alice_token: str) -> None:
    answers = await _http_surfaces(alice_token)

    assert {name: r.status_code for name, r in answers.items()} == {"rest": 200, "openai": 200, "a2a": 200}


async def test_the_token_of_a_deactivated_user_is_refused_by_every_surface(alice: Any, alice_token: str) -> None:
    session = await sync_to_async(lambda: session_services.session_create(user=alice, agent="support").id)()
    await sync_to_async(lambda: type(alice).objects.filter(pk=alice.pk).update(is_active=False))()

    answers = await _http_surfaces(alice_token)

    for name, response in answers.items():
        assert response.status_code == 401, (name, response.text)
        assert "inactive" in response.text, (name, response.text)
    assert await _socket_close_code(session, alice_token) == 4401


async def test_an_unknown_token_is_refused_by_every_surface_saying_so(alice: Any) -> None:
    session = await sync_to_async(lambda: session_services.session_create(user=alice, agent="support").id)()

    answers = await _http_surfaces("not-a-token")

    for name, response in answers.items():
        assert response.status_code == 401, (name, response.text)
        assert "Invalid token" in response.text, (name, response.text)
    assert await _socket_close_code(session, "not-a-token") == 4401
