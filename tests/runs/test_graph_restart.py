"""The demo graph over real Daphne processes: node progress and the approval prompt reach a
websocket client as AG-UI events, and a run paused in one server process is approved through
the REST API of a *new* server process (the first one is gone) and finishes there."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import Event as AguiEvent
from pydantic import TypeAdapter
from rest_framework.authtoken.models import Token
from websockets.asyncio.client import connect

from sessions_app import services as session_services
from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

AGUI_EVENT: TypeAdapter[Any] = TypeAdapter(AguiEvent)
TIMEOUT = 15
QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"


async def frames_until_finished(server: LiveServer, session_id: str, token: str) -> list[dict[str, Any]]:
    """Start a troubleshoot run over the session's websocket; its frames up to RUN_FINISHED."""
    async with connect(
        f"{server.ws_url}/ws/sessions/{session_id}/",
        origin=server.url,  # type: ignore[arg-type]  # an Origin is a str
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=TIMEOUT,
    ) as ws:
        await ws.send(json.dumps({"type": "run", "message": QUESTION, "agent": "troubleshoot"}))
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1]["type"] != "RUN_FINISHED":
            frame = json.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
            if frame["type"] not in ("run.accepted", "error"):
                AGUI_EVENT.validate_python(frame)
            assert frame["type"] != "error", frame
            frames.append(frame)
    return frames


def node_steps(frames: list[dict[str, Any]], kind: str) -> list[str]:
    return [f["stepName"] for f in frames if f["type"] == kind and "graph" in (f.get("metadata") or {})]


def test_a_run_paused_in_one_server_is_approved_and_finished_by_the_next(tmp_path: Path, alice: Any) -> None:
    token = Token.objects.get_or_create(user=alice)[0].key
    session_id = session_services.session_create(user=alice, agent="troubleshoot").id
    headers = {"Authorization": f"Bearer {token}"}

    with live_daphne(tmp_path) as first:
        frames = asyncio.run(frames_until_finished(first, session_id, token))
    # The first server is gone now.

    started = node_steps(frames, "STEP_STARTED")
    assert started[0] == "plan" and set(started[1:3]) == {"collect_logs", "check_certificate"}
    assert started[3:] == ["decide", "draft_report", "approve"]
    assert node_steps(frames, "STEP_FINISHED")[-1] == "approve"
    interrupt = next(f for f in frames if f["type"] == "CUSTOM")
    assert interrupt["name"] == "agentsite.graph.interrupt" and interrupt["value"]["node"] == "approve"
    finished = frames[-1]
    assert finished["outcome"]["type"] == "interrupt"
    run_id = finished["runId"]

    with live_daphne(tmp_path) as second:
        api = httpx.Client(base_url=second.url, headers=headers, timeout=TIMEOUT)
        waiting = api.get(f"/api/runs/{run_id}/").json()
        assert waiting["interrupt"]["id"] == interrupt["value"]["interruptId"]
        response = api.post(f"/api/runs/{run_id}/resume/", json={"value": {"approved": True}, "message": "Approve"})
        assert response.status_code == 201, response.text
        resumed_id = response.json()["id"]
        deadline = time.monotonic() + TIMEOUT
        while (run := api.get(f"/api/runs/{resumed_id}/").json())["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, "the resumed run did not finish"
            time.sleep(0.1)
        assert run["status"] == "completed"
        assert run["answer"].startswith("**Incident report: payments")
        assert run["answer"].endswith("Approved: this report is final.")
        assert api.post(f"/api/runs/{run_id}/resume/", json={"value": "approve"}).status_code == 409
