"""A session's stream across web processes (issue 23): two real Daphne processes share the
database and a private Redis (channel layer). Sockets of the process that runs the run take
its events straight from its sink (`runs.fanout.LOCAL`); a socket of the other process takes
them from the channel layer. Every socket shows every saved event once, in seq order, and
the same text; then the other process runs one, and the roles swap."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from rest_framework.authtoken.models import Token
from websockets.asyncio.client import ClientConnection, connect

from tests.resilience.services import private_redis
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 30
PROMPT = "Search the logs of payments for errors"


def socket(server: LiveServer, session_id: str, token: str) -> Any:
    return connect(f"{server.ws_url}/ws/sessions/{session_id}/?token={token}", open_timeout=TIMEOUT)


async def frames_until_finished(ws: ClientConnection) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] != "RUN_FINISHED":
        frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
        if frame["type"] != "run.accepted":
            frames.append(frame)
    return frames


def shown(frames: list[dict[str, Any]]) -> tuple[list[int], dict[str, str]]:
    """The seqs of the saved events shown (one per event: consecutive frames of one event
    share its seq) and the text shown per message."""
    seqs = [f["metadata"]["seq"] for f in frames if "seq" in (f.get("metadata") or {})]
    events = [seq for index, seq in enumerate(seqs) if index == 0 or seqs[index - 1] != seq]
    texts: dict[str, str] = {}
    for f in frames:
        if f["type"] == "TEXT_MESSAGE_CONTENT":
            texts[f["messageId"]] = texts.get(f["messageId"], "") + f["delta"]
    return events, texts


def test_sockets_here_and_in_another_process_show_every_event_once_in_order(tmp_path: Any, alice: Any) -> None:
    token = Token.objects.create(user=alice).key
    with private_redis() as redis_server:
        env = {"REDIS_URL": redis_server.url, "AGENTSITE_MODEL": "offline", "AGENTSITE_MEMORY_AUTO": "0"}
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with live_daphne(tmp_path / "a", env=env) as node_a, live_daphne(tmp_path / "b", env=env) as node_b:
            headers = {"Authorization": f"Bearer {token}"}
            session_id = httpx.post(f"{node_a.url}/api/sessions/", json={}, headers=headers, timeout=TIMEOUT).json()[
                "id"
            ]

            async def one_run(starter: int, *, after_one: bool) -> list[list[dict[str, Any]]]:
                """A run started on socket `starter` of (A, A, B); every socket's frames."""
                async with (
                    socket(node_a, session_id, token) as a1,
                    socket(node_a, session_id, token) as a2,
                    socket(node_b, session_id, token) as b1,
                ):
                    sockets = (a1, a2, b1)
                    if after_one:  # each socket replays the ledger first: the run before this one
                        for ws in sockets:
                            await frames_until_finished(ws)
                    await asyncio.sleep(0.5)  # every socket has joined its group
                    await sockets[starter].send(json.dumps({"type": "run", "message": PROMPT}))
                    return list(await asyncio.gather(*(frames_until_finished(ws) for ws in sockets)))

            on_a = async_to_sync(one_run)(0, after_one=False)  # the run on A: a1, a2 from A's sink, b1 through Redis
            on_b = async_to_sync(one_run)(2, after_one=True)  # the run on B: b1 from B's sink, a1, a2 through Redis
            ledger = httpx.get(
                f"{node_b.url}/api/sessions/{session_id}/events/?limit=500", headers=headers, timeout=TIMEOUT
            ).json()["results"]

    first_run = [e["seq"] for e in ledger if e["seq"] <= max(shown(on_a[0])[0])]
    second_run = [e["seq"] for e in ledger if e["seq"] > max(first_run)]
    for frames, expected in [*((f, first_run) for f in on_a), *((f, second_run) for f in on_b)]:
        seqs, _ = shown(frames)
        assert seqs == expected  # every saved event, once each, in order
    for per_socket in (on_a, on_b):
        texts = [shown(f)[1] for f in per_socket]
        assert texts[0] == texts[1] == texts[2] and any(texts[0].values())  # the same text everywhere
    assert on_a[0] == on_a[1]  # two sockets of the process that runs it: the very same frames
