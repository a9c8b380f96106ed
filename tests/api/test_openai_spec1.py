"""SPEC 1.2.1 on /v1: a message with an empty (or missing) role and a payload is a user
message, as the runner takes it; one without a payload is still refused, naming its role."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from runs.core.llm.base import Model
from tests.support.openai_asgi import agents_on, client_for, stored_events
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


async def test_spec_1_2_1_a_message_with_an_empty_or_missing_role_and_a_payload_is_a_user_message(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Paris.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    messages: Any = [
        {"content": "Remember: answer in one word."},  # no role at all
        {"role": "assistant", "content": "Understood."},
        {"role": "", "content": [{"type": "text", "text": "The capital of France?"}]},
    ]

    raw = await client.chat.completions.with_raw_response.create(model="support", messages=messages)

    assert raw.parse().choices[0].message.content == "Paris."
    sent = [(m["role"], m["content"]) for m in openai_server.requests[0]["messages"] if m["role"] != "system"]
    assert sent == [
        ("user", "Remember: answer in one word."),
        ("assistant", "Understood."),
        ("user", "The capital of France?"),
    ]
    stored = await stored_events(raw.headers["X-Session-Id"])
    turn = [e for e in stored if e.role == "user" and not e.extensions.get("seed")]
    assert [(e.author, e.text) for e in turn] == [("user", "The capital of France?")]


async def test_spec_1_2_1_an_empty_role_without_a_payload_is_refused_naming_the_role(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    messages: Any = [{"role": "user", "content": "hi"}, {"role": "", "content": ""}]

    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="support", messages=messages)

    assert refused.value.status_code == 400
    body: Any = refused.value.body
    assert body["param"] == "messages[1].role" and "must be one of" in body["message"]
    assert openai_server.requests == []
