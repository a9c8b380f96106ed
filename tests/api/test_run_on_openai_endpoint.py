"""A run through the REST API on a real OpenAI-compatible endpoint (a local scripted one)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.openai_provider import OpenAIModel
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_support_agent_runs_a_real_tool_over_the_openai_protocol(
    alice_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(
        ServerStep.error(429, "slow down", headers={"Retry-After": "0"}),
        ServerStep.call("inspect_certificate", {"host": "payments.internal.example.com"}, id="call_cert"),
        "The certificate of payments.internal.example.com expired on 2026-11-14; renew it.",
    )
    use_model(OpenAIModel(model="gpt-4o-mini", base_url=openai_server.base_url, api_key="sk-test", backoff_base_s=0.01))
    response = alice_api.post(
        "/api/runs/", {"message": "Why does payments.internal.example.com fail TLS?", "wait": True}, format="json"
    )
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed"
    assert run["answer"].startswith("The certificate of payments.internal.example.com expired")
    openai_server.assert_consumed()

    # What the endpoint really received: the instruction, the user turn, then the tool result.
    first, second = openai_server.requests[1], openai_server.requests[2]
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][-1] == {"role": "user", "content": "Why does payments.internal.example.com fail TLS?"}
    assert {t["function"]["name"] for t in first["tools"]} >= {"inspect_certificate", "search_logs", "lookup_ticket"}
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_cert"
    report = json.loads(tool_message["content"])
    assert report["expired"] is True

    events = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
    assert [e["role"] for e in events] == ["user", "assistant", "tool", "assistant", "system"]
    assert json.loads(events[2]["text"])["expired"] is True
