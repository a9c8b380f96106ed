"""The OpenAI-compatible endpoint, driven by the official `openai` client against a live Daphne."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from rest_framework.authtoken.models import Token

from tests.support.daphne import LiveServer, live_daphne

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TLS_QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"


@pytest.fixture
def server(tmp_path: Path, transactional_db: Any) -> Iterator[LiveServer]:
    with live_daphne(tmp_path) as live:
        yield live


def token_for(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def client_for(server: LiveServer, user: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=token_for(user), max_retries=0, timeout=30)


def ledger(server: LiveServer, user: Any, session_id: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{server.url}/api/sessions/{session_id}/events/?limit=500",
        headers={"Authorization": f"Bearer {token_for(user)}"},
    )
    assert response.status_code == 200, response.text
    return response.json()["results"]


def test_models_are_the_agents(server: LiveServer, alice: Any) -> None:
    models = {m.id: m for m in client_for(server, alice).models.list()}
    assert "support" in models
    assert models["support"].model_extra["backing_model"] == "offline"


def test_a_non_streaming_completion_runs_the_agent_with_its_tools(server: LiveServer, alice: Any) -> None:
    raw = client_for(server, alice).chat.completions.with_raw_response.create(
        model="support", messages=[{"role": "user", "content": TLS_QUESTION}]
    )
    completion = raw.parse()
    answer = completion.choices[0].message.content or ""
    assert "expired" in answer and completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    session_id = raw.headers["X-Session-Id"]
    events = ledger(server, alice, session_id)
    assert any(e["role"] == "tool" and e.get("tool_name") == "inspect_certificate" for e in events)
    assert [e for e in events if e["role"] == "assistant" and e.get("text")][-1]["text"] == answer


def test_streaming_sends_role_deltas_finish_and_the_whole_answer(server: LiveServer, alice: Any) -> None:
    stream = client_for(server, alice).chat.completions.create(
        model="support",
        messages=[{"role": "user", "content": TLS_QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert len([c for c in with_choices if c.choices[0].delta.content]) > 3
    assert with_choices[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert "expired" in text


def test_the_async_client_streams_too(server: LiveServer, alice: Any) -> None:
    token = token_for(alice)

    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=token, max_retries=0)
        stream = await client.chat.completions.create(
            model="support",
            messages=[{"role": "user", "content": "Search the logs of auth-gateway for errors"}],
            stream=True,
        )
        parts = [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        await client.close()
        return "".join(parts)

    assert "search_logs" in asyncio.run(main())


def test_x_session_id_continues_a_session_and_earlier_messages_seed_a_new_one(server: LiveServer, alice: Any) -> None:
    client = client_for(server, alice)
    first = client.chat.completions.with_raw_response.create(
        model="support",
        messages=[
            {"role": "user", "content": "We run the payments service behind nginx."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "Look up ticket INC-1042"},
        ],
    )
    session_id = first.headers["X-Session-Id"]
    second = client.chat.completions.with_raw_response.create(
        model="support",
        messages=[{"role": "user", "content": "And ticket INC-1187?"}],
        extra_headers={"X-Session-Id": session_id},
    )
    assert second.headers["X-Session-Id"] == session_id
    users = [e["text"] for e in ledger(server, alice, session_id) if e["role"] == "user"]
    assert users == ["We run the payments service behind nginx.", "Look up ticket INC-1042", "And ticket INC-1187?"]


def test_errors_come_in_openais_format(server: LiveServer, alice: Any, bob: Any) -> None:
    client = client_for(server, alice)
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-17", messages=[{"role": "user", "content": "hi"}])
    assert unknown.value.body["code"] == "model_not_found"  # type: ignore[index]  # OpenAI's error body
    with pytest.raises(openai.BadRequestError) as n_two:
        client.chat.completions.create(model="support", n=2, messages=[{"role": "user", "content": "hi"}])
    assert n_two.value.body["param"] == "n"  # type: ignore[index]  # OpenAI's error body
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="support", messages=[{"role": "user", "content": "hi"}], tool_choice="sometimes"
        )  # type: ignore[arg-type]  # bad on purpose
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()

    bobs = client_for(server, bob).chat.completions.with_raw_response.create(
        model="support", messages=[{"role": "user", "content": "bob's secret"}]
    )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="support",
            messages=[{"role": "user", "content": "let me in"}],
            extra_headers={"X-Session-Id": bobs.headers["X-Session-Id"]},
        )

    bad_json = httpx.post(
        f"{server.url}/v1/chat/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {token_for(alice)}", "Content-Type": "application/json"},
    )
    assert bad_json.status_code == 400 and bad_json.json()["error"]["type"] == "invalid_request_error"
    no_token = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "support", "messages": []})
    assert no_token.status_code == 401 and no_token.json()["error"]["code"] == "invalid_api_key"
