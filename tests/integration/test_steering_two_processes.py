"""Steering across web processes (issue 19, item 1): two real Daphne processes share the
database and a private Redis (channel layer); a run goes on process A, a message for it is
posted to process B, and the run on A takes it once, before its next model step.

The model is the real OpenAI provider against the local scripted server, slowed down so the
message lands while the run's first model step streams.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rest_framework.authtoken.models import Token

from tests.resilience.services import private_redis
from tests.support.daphne import live_daphne
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TIMEOUT = 30


def wait_until(check: Any, timeout_s: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError("the condition never held")


def test_a_message_posted_to_another_process_reaches_the_run_once(tmp_path: Path, alice: Any) -> None:
    token = Token.objects.create(user=alice).key
    with ScriptedOpenAIServer() as model, private_redis() as redis_server:
        model.script(
            dataclasses.replace(
                ServerStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_1"),
                fragment_size=1,
                chunk_delay_s=0.2,
            ),  # about 5 s
            "INC-1042 and INC-1187 are both open.",
        )
        env = {
            "REDIS_URL": redis_server.url,
            "AGENTSITE_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-test",
            "AGENTSITE_MODEL_MAX_RETRIES": "0",
            "AGENTSITE_MEMORY_AUTO": "0",
        }
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with live_daphne(tmp_path / "a", env=env) as node_a, live_daphne(tmp_path / "b", env=env) as node_b:
            headers = {"Authorization": f"Bearer {token}"}
            a = httpx.Client(base_url=node_a.url, headers=headers, timeout=TIMEOUT)
            b = httpx.Client(base_url=node_b.url, headers=headers, timeout=TIMEOUT)
            run = a.post("/api/runs/", json={"message": "Is INC-1042 open?"}).json()
            wait_until(lambda: model.requests)  # A's first model step is streaming

            queued = b.post(f"/api/runs/{run['id']}/messages/", json={"message": "and INC-1187?"})
            assert queued.status_code == 202, queued.text + node_b.output()[-2000:]
            assert queued.json()["status"] == "queued"

            final = wait_until(lambda: (r := a.get(f"/api/runs/{run['id']}/").json())["status"] != "running" and r)
            assert final["status"] == "completed", final
            assert model.requests[1]["messages"][-1] == {"role": "user", "content": "and INC-1187?"}
            events = b.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
            steered = [e for e in events if e.get("text") == "and INC-1187?"]
            assert len(steered) == 1 and steered[0]["queued_id"] == queued.json()["id"]  # once
            # The run ended: process B now answers 409, naming how it ended.
            late = b.post(f"/api/runs/{run['id']}/messages/", json={"message": "one more"})
            assert late.status_code == 409 and "completed" in late.json()["error"]["message"]
            assert len(model.requests) == 2


def test_an_ag_ui_steer_sent_to_another_process_follows_the_run_from_its_ledger(tmp_path: Path, alice: Any) -> None:
    token = Token.objects.create(user=alice).key
    with ScriptedOpenAIServer() as model, private_redis() as redis_server:
        model.script(
            dataclasses.replace(
                ServerStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_1"),
                fragment_size=1,
                chunk_delay_s=0.2,
            ),
            "Both are open.",
        )
        env = {
            "REDIS_URL": redis_server.url,
            "AGENTSITE_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-test",
            "AGENTSITE_MODEL_MAX_RETRIES": "0",
            "AGENTSITE_MEMORY_AUTO": "0",
        }
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with live_daphne(tmp_path / "a", env=env) as node_a, live_daphne(tmp_path / "b", env=env) as node_b:
            headers = {"Authorization": f"Bearer {token}"}
            a = httpx.Client(base_url=node_a.url, headers=headers, timeout=TIMEOUT)
            run = a.post("/api/runs/", json={"message": "Is INC-1042 open?"}).json()
            wait_until(lambda: model.requests)
            body = {
                "threadId": run["session_id"],
                "runId": "client-2",
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {"agentsite": {"steer": True}},
                "messages": [{"id": "u2", "role": "user", "content": "and INC-1187?"}],
            }
            with httpx.stream(
                "POST", f"{node_b.url}/agui/support", json=body, headers=headers, timeout=TIMEOUT
            ) as response:
                assert response.status_code == 200, response.read()
                events = [
                    json.loads(line[len("data: ") :]) for line in response.iter_lines() if line.startswith("data: ")
                ]
            kinds = [e["type"] for e in events]
            assert events[0]["type"] == "RUN_STARTED" and events[0]["runId"] == run["id"]
            assert kinds[-1] == "RUN_FINISHED"
            consumed = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "agentsite.message.consumed"]
            assert len(consumed) == 1 and consumed[0]["value"]["state"] == "consumed"
            assert any(e["type"] == "TEXT_MESSAGE_CONTENT" and e["delta"] == "and INC-1187?" for e in events)
            assert model.requests[1]["messages"][-1] == {"role": "user", "content": "and INC-1187?"}
