"""Issue 18, item 4: the history an OpenAI client resends is stored as earlier turns of the
session, before the run, so that summaries, compaction and recall treat it as history."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from rest_framework.authtoken.models import Token

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel
from sessions_app import mapping
from sessions_app import models as orm

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def token_of(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


@sync_to_async
def stored_events(session_id: str) -> list[Any]:
    return [mapping.event_from_row(r) for r in orm.Event.objects.filter(session_id=session_id).order_by("seq")]


async def test_resent_messages_become_earlier_completed_turns_and_the_last_one_is_the_run(
    alice: Any, use_model: Callable[[Model], None]
) -> None:
    model = ScriptedModel.of("It was 6432.")
    use_model(model)
    messages = [
        {"role": "user", "content": "The staging database listens on 6432."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "And it sits behind pgbouncer."},
        {"role": "assistant", "content": "Noted too."},
        {"role": "user", "content": "Which port was it?"},
    ]
    response = await AsyncClient().post(
        "/v1/chat/completions",
        data=json.dumps({"model": "support", "messages": messages}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {await token_of(alice)}"},
    )
    assert response.status_code == 200, response.content
    model.assert_consumed()

    stored = await stored_events(response["X-Session-Id"])
    seeded = [e for e in stored if e.extensions.get("seed")]
    assert [e.text for e in seeded] == [m["content"] for m in messages[:-1]]
    turns = [e.invocation_id for e in seeded]
    assert turns[0] == turns[1] != turns[2] == turns[3]  # one turn per user message
    assert [e.done for e in seeded] == [False, True, False, True]
    current = next(e for e in stored if e.text == "Which port was it?")
    assert current.invocation_id not in turns and current.request_id not in {e.request_id for e in seeded}
    # The model saw the resent chat as history and the question last.
    sent = model.requests[0].messages
    assert [m.content for m in sent if m.role != "system"] == [m["content"] for m in messages]
