"""Issue 20, item 3, on AG-UI: a user message's media parts as the ag-ui protocol 1.0
defines them (`image` / `document` with a `data` or `url` source) reach the model; audio,
a type outside the allow list or an oversized part answer 415 / 413 with nothing stored."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from runs.core.llm.base import Model
from sessions_app import models as session_orm
from tests.api.test_attachments import PNG, data_url
from tests.support.openai_asgi import agents_on, stored_events, token_of
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False


def run_input(thread_id: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "r1",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": [{"type": "text", "text": "What is this?"}, *parts]}],
    }


async def post(user: Any, body: dict[str, Any]) -> Any:
    return await AsyncClient().post(
        "/agui/support",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {await token_of(user)}"},
    )


@sync_to_async
def stored() -> tuple[int, int]:
    return session_orm.Session.objects.count(), session_orm.Artifact.objects.count()


def image(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "data", "value": base64.b64encode(data).decode(), "mimeType": mime}}


async def test_an_agui_image_part_reaches_the_model_and_is_an_artifact_of_the_thread(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("One pixel.")
    agents_on(openai_server, use_model)
    response = await post(
        alice,
        run_input(
            "agui-image",
            image(PNG),
            {
                "type": "document",
                "source": {"type": "data", "value": base64.b64encode(b"a,b\n1,2\n").decode(), "mimeType": "text/csv"},
            },
        ),
    )
    assert response.status_code == 200
    stream = b"".join([chunk async for chunk in response.streaming_content]).decode()
    assert "RUN_FINISHED" in stream
    user = [m for m in openai_server.requests[0]["messages"] if m["role"] == "user"][-1]
    assert [p["type"] for p in user["content"]] == ["text", "image_url", "text", "text"]
    assert user["content"][1]["image_url"]["url"] == data_url(PNG)
    assert user["content"][2]["text"].endswith("a,b\n1,2\n")
    turn = next(e for e in await stored_events("agui-image") if e.is_user_message)
    assert turn.message is not None and [p.mime for p in turn.message.parts] == ["image/png", "text/csv"]
    assert await stored() == (1, 2)


@pytest.mark.parametrize(
    ("part", "status"),
    [
        ({"type": "audio", "source": {"type": "data", "value": "AAAA", "mimeType": "audio/wav"}}, 415),
        (image(b"\x7fELF\x02\x01\x01"), 415),
        ({"type": "image", "source": {"type": "file", "value": "file-abc"}}, 415),
        (image(PNG + b"\0" * 300), 413),
        ({"type": "image", "source": {"type": "data", "value": "@@@", "mimeType": "image/png"}}, 400),
    ],
)
async def test_a_refused_agui_part_answers_its_status_and_stores_nothing(
    alice: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    settings: Any,
    part: dict[str, Any],
    status: int,
) -> None:
    settings.AGENTSITE_UPLOAD_MAX_BYTES = 200
    agents_on(openai_server, use_model)
    response = await post(alice, run_input("agui-refused", image(PNG), part))
    assert response.status_code == status, response.content
    assert response.json()["error"]["field"].startswith("messages.0.content.2")
    assert openai_server.requests == [] and await stored() == (0, 0)
