"""Redis stops during a run: the run finishes and is persisted, the socket still ends the
run (from the ledger), health says what is down, and after Redis returns the next turn
streams live again and its jobs reach the broker.

A private `redis-server` (never the shared one) is the channel layer and Celery broker of a
real Daphne process; the model is the real OpenAI provider against the local scripted
server, streaming slowly enough for Redis to die mid-answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token
from websockets.asyncio.client import ClientConnection, connect

from tests.resilience.services import private_redis
from tests.support.daphne import LiveServer, live_daphne
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 30
FIRST = " ".join(f"Step {n}: the certificate chain of checkout-api is incomplete." for n in range(1, 31))
SECOND = " ".join(
    f"Fix {n}: renew the intermediate and redeploy checkout-api with its full chain." for n in range(1, 21)
)


async def frames_until_end(ws: ClientConnection, collected: list[dict[str, Any]]) -> None:
    while not collected or collected[-1]["type"] not in ("RUN_FINISHED", "RUN_ERROR"):
        collected.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))


def socket(server: LiveServer, session_id: str, token: str, after_seq: int = 0) -> Any:
    return connect(
        f"{server.ws_url}/ws/sessions/{session_id}/?after_seq={after_seq}&token={token}",
        origin=server.url,
        open_timeout=TIMEOUT,  # type: ignore[arg-type]  # an Origin is a str
    )


def text_of(frames: list[dict[str, Any]]) -> str:
    assistant = {f["messageId"] for f in frames if f["type"] == "TEXT_MESSAGE_START" and f.get("role") == "assistant"}
    return "".join(f["delta"] for f in frames if f["type"] == "TEXT_MESSAGE_CONTENT" and f["messageId"] in assistant)


def test_a_run_outlives_a_redis_outage_and_the_next_turn_streams_again(tmp_path: Path, alice: Any) -> None:
    token = Token.objects.create(user=alice).key
    with ScriptedOpenAIServer() as model, private_redis() as redis_server:
        model.script(
            ServerStep.answer(FIRST, chunk_size=40, chunk_delay_s=0.1),  # about 5 s
            # About 8 s: the web process retries the layer every 5 s (ChannelLayerSink), so
            # the rest of this answer streams live again.
            ServerStep.answer(SECOND, chunk_size=20, chunk_delay_s=0.1),
        )
        env = {
            "REDIS_URL": redis_server.url,
            "AGENTSITE_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-test",
            "AGENTSITE_MODEL_MAX_RETRIES": "0",
            "AGENTSITE_REDIS_SOCKET_TIMEOUT_S": "6",
            # A post-run job every turn (a summary job is queued only when its trigger could
            # fire, which two short turns never reach): it shows that jobs reach the broker again.
            "AGENTSITE_MEMORY_AUTO": "1",
        }
        with live_daphne(tmp_path, env=env) as server:
            api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
            session_id = api.post("/api/sessions/", json={}).json()["id"]

            async def outage_turn() -> tuple[list[dict[str, Any]], dict[str, Any]]:
                frames: list[dict[str, Any]] = []
                async with socket(server, session_id, token) as ws:
                    await ws.send(json.dumps({"type": "run", "message": "Why does checkout-api fail TLS?"}))
                    while not any(f["type"] == "TEXT_MESSAGE_CONTENT" for f in frames):
                        frames.append(json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
                    redis_server.kill()  # mid-answer
                    health = (await asyncio.to_thread(api.get, "/healthz")).json()
                    await frames_until_end(ws, frames)
                return frames, health

            frames, health = asyncio.run(outage_turn())
            run_id = next(f["run_id"] for f in frames if f["type"] == "run.accepted")

            # The run finished and is in the database, and the socket ended it with the
            # whole answer: the deltas stopped with Redis, the ledger supplied the rest.
            assert frames[-1]["type"] == "RUN_FINISHED", frames[-3:]
            record = api.get(f"/api/runs/{run_id}/").json()
            assert record["status"] == "completed", record
            assert record["answer"] == FIRST
            assert text_of(frames).endswith(FIRST[-60:])
            # Health names what is down, in JSON, while it is down.
            assert health["status"] == "degraded"
            assert health["checks"]["database"] == "ok"
            assert health["checks"]["channel_layer"] != "ok" and health["checks"]["broker"] != "ok"

            redis_server.start()  # Redis returns, on the same port
            deadline = time.monotonic() + TIMEOUT
            while api.get("/healthz").json()["status"] != "ok":  # the web process reconnects by itself
                assert time.monotonic() < deadline, "the web process did not reconnect to Redis"
                time.sleep(0.2)
            events = api.get(f"/api/sessions/{session_id}/events/", params={"limit": 500}).json()["results"]
            last_seq = events[-1]["seq"]

            async def next_turn() -> list[dict[str, Any]]:
                frames: list[dict[str, Any]] = []
                async with socket(server, session_id, token, after_seq=last_seq) as ws:
                    await ws.send(json.dumps({"type": "run", "message": "And the fix?"}))
                    await frames_until_end(ws, frames)
                return frames

            second = asyncio.run(next_turn())
            assert second[-1]["type"] == "RUN_FINISHED"
            deltas = [f for f in second if f["type"] == "TEXT_MESSAGE_CONTENT" and f.get("messageId")]
            assert len(deltas) > 10, "the answer streams live again, delta by delta"
            assert text_of(second) == SECOND

            # The ledger is whole and ordered across the outage; jobs reach the broker again.
            events = api.get(f"/api/sessions/{session_id}/events/", params={"limit": 500}).json()["results"]
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            assert [e["text"] for e in events if e["role"] == "user"] == [
                "Why does checkout-api fail TLS?",
                "And the fix?",
            ]
            import redis

            broker = redis.Redis.from_url(redis_server.url)
            queued = [json.loads(m) for m in broker.lrange("celery", 0, -1)]
            assert any(session_id in json.dumps(m) for m in queued), "the post-run jobs of the next turn were queued"
        model.assert_consumed()
