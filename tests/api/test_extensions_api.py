"""The demo's extensions on `/v1` with the official `openai` client (issue 20, item 4): the
redactor keeps a planted card number and password out of every upstream request (agent
steps, memory extraction, summary), and the approval policy holds a destructive tool back
until the user approves it. The scripted upstream asserts what it received."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from agentsite.composition import build_model
from runs.core.llm.base import Model
from sessions_app import mapping
from sessions_app import models as session_orm
from sessions_app.core.events import Event
from sessions_app.memory_tasks import memory_extract_task
from sessions_app.summaries import session_summarize
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

CARD = "4111 1111 1111 1111"
PASSWORD = "hunter2-Secret"


@pytest.fixture
def upstream(
    settings: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> ScriptedOpenAIServer:
    """Every model this deployment builds (agents, summaries, memory) on the scripted server."""
    settings.AGENTSITE_MODEL = settings.AGENTSITE_SUMMARY_MODEL = "gpt-4o-mini"
    settings.OPENAI_BASE_URL = openai_server.base_url
    settings.OPENAI_API_KEY = "sk-test"
    settings.AGENTSITE_MODEL_MAX_RETRIES = 0
    settings.AGENTSITE_MEMORY_AUTO = False  # the extraction is run below, by hand, in order
    use_model(build_model())
    return openai_server


@sync_to_async
def _token(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


async def _client(user: Any) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=application), timeout=30)
    return openai.AsyncOpenAI(
        base_url="http://localhost/v1", api_key=await _token(user), max_retries=0, http_client=http
    )


@sync_to_async
def _events(session_id: str) -> list[Event]:
    return [mapping.event_from_row(r) for r in session_orm.Event.objects.filter(session_id=session_id).order_by("seq")]


async def test_the_redactor_keeps_a_planted_card_number_out_of_every_upstream_request(
    alice: Any, upstream: ScriptedOpenAIServer, settings: Any
) -> None:
    upstream.script(
        ServerStep.call("lookup_ticket", {"ticket_id": "INC-1042"}, id="call_t"),
        "The duplicate charge is tracked in INC-1042; finance will refund it.",
        ServerStep.calls(("memory_add", {"memory": "Was charged twice", "kind": "fact", "topics": ["billing"]})),
        "Summary: the user was charged twice; INC-1042 tracks the refund.",
    )
    client = await _client(alice)
    message = f"My card {CARD} was charged twice. My portal login is password={PASSWORD}, see INC-1042."
    raw = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=[{"role": "user", "content": message}],
    )
    session_id = raw.headers["X-Session-Id"]
    assert "refund" in (raw.parse().choices[0].message.content or "")

    # The post-run jobs, each through its own model client: memory extraction, then a summary.
    assert (await sync_to_async(memory_extract_task)(session_id))["status"] == "extracted"
    settings.AGENTSITE_SUMMARY_EVENT_THRESHOLD = 1
    stored = await _events(session_id)
    outcome = await sync_to_async(session_summarize)(
        session_id=session_id,
        filter_key=django_settings.AGENTSITE_APP,
        last_seq=stored[-1].seq or 0,
    )
    assert outcome is not None and outcome.primary.reason == "updated"
    upstream.assert_consumed()

    assert len(upstream.requests) == 4
    for request in upstream.requests:
        sent = json.dumps(request)
        assert "4111" not in sent and PASSWORD not in sent
    assert "[REDACTED CARD]" in json.dumps(upstream.requests[0]) and "password=[REDACTED]" in json.dumps(
        upstream.requests[0]
    )
    assert "[REDACTED CARD]" in json.dumps(upstream.requests[2])  # the memory extraction saw the masked turn
    # The ledger keeps what the user wrote, and says what left masked.
    assert stored[0].text == message
    step = next(e for e in stored if e.role == "assistant" and e.is_tool_call)
    assert step.extensions["callbacks"] == [
        {
            "point": "before_model",
            "callback": "redactor",
            "change": "request",
            "note": "masked 1 card number, 1 secret",
        }
    ]


async def test_a_destructive_tool_needs_the_users_approval(alice: Any, upstream: ScriptedOpenAIServer) -> None:
    upstream.script(
        ServerStep.call("restart_service", {"name": "payments"}, id="call_r1"),
        "Restarting payments drops in-flight requests: reply 'approve restart_service' to go ahead.",
        ServerStep.call("restart_service", {"name": "payments"}, id="call_r2"),
        "payments was restarted.",
    )
    client = await _client(alice)
    raw = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=[{"role": "user", "content": "Restart payments, it is stuck."}],
    )
    session_id = raw.headers["X-Session-Id"]
    refused = upstream.requests[1]["messages"][-1]
    assert refused["role"] == "tool" and refused["tool_call_id"] == "call_r1"
    assert "needs the user's approval" in refused["content"] and "Nothing was done" in refused["content"]

    await client.chat.completions.create(
        model="support",
        messages=[{"role": "user", "content": "approve restart_service"}],
        extra_headers={"X-Session-Id": session_id},
    )
    upstream.assert_consumed()
    ran = upstream.requests[3]["messages"][-1]
    assert ran["tool_call_id"] == "call_r2" and json.loads(ran["content"]) == {
        "service": "payments",
        "restarted": True,
        "dropped_requests": 0,
    }
    vetoes = [e for e in await _events(session_id) if e.is_tool_result and e.extensions.get("callbacks")]
    assert [
        (e.message.tool_call_id if e.message else None, e.extensions["callbacks"][0]["change"]) for e in vetoes
    ] == [
        ("call_r1", "veto"),
    ]
