"""Helpers shared by the security tests: one ASGI client for every HTTP surface (REST,
AG-UI, OpenAI-compatible and A2A all go through `agentsite.asgi.application`, as under
Daphne), websockets through Channels' communicator, and body checks."""

from __future__ import annotations

import json
from typing import Any

import httpx
from channels.testing import WebsocketCommunicator

from agentsite.asgi import application

TIMEOUT_S = 10.0
ORIGIN = (b"origin", b"http://testserver")
HOST = (b"host", b"testserver")  # an Origin must be the Host's own origin


def client(token: str | None = None, **headers: str) -> httpx.AsyncClient:
    """An httpx client wired to the ASGI application in this process (no socket)."""
    sent = {"Authorization": f"Bearer {token}"} if token else {}
    sent.update(headers)
    transport = httpx.ASGITransport(app=application)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=sent, timeout=TIMEOUT_S)


async def post_json(path: str, body: Any, token: str | None, **headers: str) -> httpx.Response:
    raw = body if isinstance(body, bytes | str) else json.dumps(body)
    async with client(token, **headers) as http:
        return await http.post(path, content=raw, headers={"Content-Type": "application/json"})


def rpc(method: str, params: Any, *, id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": method, "params": params}


def a2a_message(text: str, *, context_id: str = "", message_id: str = "m1") -> dict[str, Any]:
    message: dict[str, Any] = {"role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}]}
    if context_id:
        message["contextId"] = context_id
    return {"message": message}


async def a2a(agent: str, body: Any, token: str | None) -> httpx.Response:
    return await post_json(f"/a2a/{agent}", body, token, **{"A2A-Version": "1.0"})


async def open_socket(path: str, token: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application, path, headers=[ORIGIN, HOST, (b"authorization", f"Bearer {token}".encode())]
    )
    connected, _ = await communicator.connect(timeout=TIMEOUT_S)
    assert connected, "the handshake was refused"
    return communicator


async def close_code(communicator: WebsocketCommunicator) -> int | None:
    """The close code the server sent, or None when the socket stayed open."""
    output = await communicator.receive_output(timeout=TIMEOUT_S)
    return int(output["code"]) if output["type"] == "websocket.close" else None


def assert_clean(response: httpx.Response) -> None:
    """No server error and nothing of the server's insides in the body."""
    assert response.status_code < 500, (response.status_code, response.text[:500])
    assert "Traceback" not in response.text and 'File "/' not in response.text, response.text[:500]


def sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    """The `data:` payloads of a buffered server-sent-events body."""
    events = []
    for block in response.text.split("\n\n"):
        if block.startswith("data: ") and block != "data: [DONE]":
            events.append(json.loads(block[len("data: ") :]))
    return events
