"""Back-pressure over a real Daphne (issue 23, item 5): a socket whose client never reads
holds a bounded number of unsent bytes, however many events its session gets, and once the
client reads it receives every saved event exactly once, in order. The bound is read from
the server's own account (logged when the socket closes); `bench/stream.py` measures the
process's memory around such a socket.

The events are written to the ledger and published on the session's group from this test
process, as another web process would: 10,000 of them in a few seconds, far faster than
runs could make them. That needs a channel layer both processes share (Redis).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from channels.layers import get_channel_layer
from django.conf import settings
from rest_framework.authtoken.models import Token
from websockets.asyncio.client import ClientConnection, connect

from runs.fanout import EVENT_MESSAGE, session_group
from sessions_app import services as session_services
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Event, Message
from sessions_app.core.session import SessionKey
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.environ.get("REDIS_URL"), reason="needs a channel layer shared by two processes (REDIS_URL)"
    ),
]

EVENTS = 10_000
BATCH = 100
TEXT = "x" * 200
FRAME_BYTES = 600  # the frames of one such event (step, text start, content, end), about
LIMIT = 16_384
RUN_ID = "run-backpressure"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, django_db_setup: Any) -> Iterator[LiveServer]:
    env = {"AGENTSITE_WS_SEND_BUFFER_BYTES": str(LIMIT), "AGENTSITE_MEMORY_AUTO": "0"}
    with live_daphne(tmp_path_factory.mktemp("daphne"), env=env) as live:
        yield live


async def open_socket(server: LiveServer, session_id: str, token: str, *, reading: bool) -> ClientConnection:
    """A websocket; one that is not `reading` takes at most one frame into its queue and
    keeps a 4 KiB kernel receive buffer, so the server's sends back up at once."""
    sock = socket.socket()
    if not reading:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((server.host, server.port))
    return await connect(
        f"{server.ws_url}/ws/sessions/{session_id}/?token={token}",
        sock=sock,
        max_queue=1 if not reading else 16,
        max_size=None,
        open_timeout=10,
        ping_interval=None,  # a pong would wait unread behind the frames
    )


async def publish(session_id: str, user_id: int) -> None:
    """Save EVENTS assistant messages and publish them live in batches, as a run would."""
    service = DjangoSessionService()
    session = await service.get_session_head(
        SessionKey(app=settings.AGENTSITE_APP, user_id=str(user_id), session_id=session_id)
    )
    assert session is not None
    layer = get_channel_layer()
    for start in range(0, EVENTS, BATCH):
        events = [
            Event(
                author="support",
                request_id=RUN_ID,
                message=Message(role="assistant", content=f"{n} {TEXT}"),
                extensions={"message_id": f"m{n}"},
            )
            for n in range(start, start + BATCH)
        ]
        saved = await service.append_events(session, events)
        await layer.group_send(
            session_group(session_id),
            {
                "type": EVENT_MESSAGE,
                "session_id": session_id,
                "user_id": str(user_id),
                "items": [[RUN_ID, event.to_dict()] for event in saved],
            },
        )


async def connected(ws: ClientConnection, timeout_s: float = 30) -> None:
    """Return once the server has finished the socket's connect (joined the session's group,
    replayed its empty ledger): Channels hands a consumer one message at a time, so the
    answer to a frame sent now comes only after that."""
    await ws.send(json.dumps({"type": "keepalive"}))
    async with asyncio.timeout(timeout_s):
        frame = json.loads(await ws.recv())
    assert frame["type"] == "error" and frame["error"]["code"] == "unknown_type", frame


async def keep_alive(ws: ClientConnection) -> None:
    """Send a frame now and then: Daphne pings a socket that has been silent for 20 s and
    drops it when the pong does not come, and a client that reads nothing never sees the
    ping. (Each frame is answered with an error frame that waits with the rest.)"""
    while True:
        await ws.send(json.dumps({"type": "keepalive"}))
        await asyncio.sleep(5)


async def seqs_until(ws: ClientConnection, last_seq: int, timeout_s: float = 120) -> list[int]:
    """The seq of every assistant message the socket shows (at its end frame), up to `last_seq`."""
    seen: list[int] = []
    async with asyncio.timeout(timeout_s):
        while not seen or seen[-1] < last_seq:
            frame = json.loads(await ws.recv())
            if frame.get("type") == "TEXT_MESSAGE_END":
                seen.append(frame["metadata"]["seq"])
    return seen


async def test_a_socket_that_never_reads_holds_a_bounded_buffer_and_then_gets_every_event_once(
    server: LiveServer, alice: Any
) -> None:
    token = (await Token.objects.aget_or_create(user=alice))[0].key
    session = await asyncio.to_thread(session_services.session_create, user=alice, agent="support")
    slow = await open_socket(server, session.id, token, reading=False)
    fast = await open_socket(server, session.id, token, reading=True)
    await connected(slow)
    await connected(fast)

    keepalive = asyncio.create_task(keep_alive(slow))
    await publish(session.id, alice.pk)
    # The reading socket has seen the last event: the server has handled all of them.
    assert await seqs_until(fast, EVENTS) == list(range(1, EVENTS + 1))
    keepalive.cancel()

    # Now the slow one reads: every saved event arrives, once each, in order.
    assert await seqs_until(slow, EVENTS) == list(range(1, EVENTS + 1))
    await slow.close()
    await fast.close()

    # What waited unsent for it, at most (the server logs it when the socket closes): the
    # bound, plus the frames that finish the event during which it was crossed. Unbounded,
    # all its frames (EVENTS * FRAME_BYTES) would have waited.
    peak = await logged_peak(server, session.id)
    assert peak <= LIMIT + 4 * FRAME_BYTES, f"{peak} bytes waited unsent"


async def logged_peak(server: LiveServer, session_id: str, timeout_s: float = 10) -> int:
    pattern = re.compile(rf"socket of session {re.escape(session_id)}: .* at most (\d+) bytes waited unsent")
    async with asyncio.timeout(timeout_s):
        while not (found := pattern.findall(server.output())):  # noqa: ASYNC110  (a log file to poll, no event)
            await asyncio.sleep(0.1)
    return max(int(value) for value in found)
