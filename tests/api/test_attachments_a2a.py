"""Issue 27, item 6 (with issue 20, item 3): A2A file parts (`raw`, `url`) are accepted
within the limits of every other surface instead of -32005: a raw image reaches the model
as an image part and is an artifact of the task's session; a type outside the allow list
is -32005, a part over the limit -32602 naming it, and nothing is stored."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from rest_framework.authtoken.models import Token

from runs.core.llm.base import Model
from sessions_app import models as session_orm
from tests.api.test_attachments import PNG, data_url
from tests.security.support import a2a, rpc
from tests.support.openai_asgi import agents_on, stored_events
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False


@pytest.fixture
def alice_token(alice: Any) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


def send(*parts: dict[str, Any]) -> dict[str, Any]:
    return rpc("SendMessage", {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": list(parts)}})


@sync_to_async
def stored() -> tuple[int, int]:
    return session_orm.Session.objects.count(), session_orm.Artifact.objects.count()


async def test_a_raw_image_part_reaches_the_model_and_is_an_artifact_of_the_session(
    alice_token: str, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("One pixel.")
    agents_on(openai_server, use_model)
    response = await a2a(
        "support",
        send(
            {"text": "What is this?"},
            {"raw": base64.b64encode(PNG).decode(), "filename": "dot.png", "mediaType": "image/png"},
            {"url": "https://example.com/chart.png", "mediaType": "image/png"},
        ),
        alice_token,
    )
    body = response.json()
    assert "result" in body, body
    user = [m for m in openai_server.requests[0]["messages"] if m["role"] == "user"][-1]
    assert [p["type"] for p in user["content"]] == ["text", "image_url", "image_url", "text"]
    assert user["content"][1]["image_url"]["url"] == data_url(PNG)
    assert user["content"][2]["image_url"]["url"] == "https://example.com/chart.png"
    session_id = body["result"]["task"]["contextId"]
    turn = next(e for e in await stored_events(session_id) if e.is_user_message)
    assert turn.message is not None and [p.name for p in turn.message.parts] == ["dot.png", "chart.png"]
    assert turn.message.parts[0].artifact is not None and turn.message.parts[1].url == "https://example.com/chart.png"
    assert await stored() == (1, 1)


@pytest.mark.parametrize(
    ("part", "code"),
    [
        (
            {"raw": base64.b64encode(b"\x7fELF\x02\x01\x01").decode(), "filename": "tool", "mediaType": "image/png"},
            -32005,
        ),
        ({"url": "https://example.com/report.pdf", "mediaType": "application/pdf"}, -32005),
        ({"raw": base64.b64encode(PNG + b"\0" * 300).decode(), "mediaType": "image/png"}, -32602),
        ({"url": "data:image/png;base64,@@@", "mediaType": "image/png"}, -32602),
    ],
)
async def test_a_refused_file_part_is_a_json_rpc_error_and_stores_nothing(
    alice_token: str,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    settings: Any,
    part: dict[str, Any],
    code: int,
) -> None:
    settings.AGENTSITE_UPLOAD_MAX_BYTES = 200
    agents_on(openai_server, use_model)
    response = await a2a(
        "support",
        send(
            {"text": "look"},
            {"raw": base64.b64encode(PNG).decode(), "mediaType": "image/png"},
            part,
        ),
        alice_token,
    )
    error = response.json()["error"]
    assert error["code"] == code
    assert "params.message.parts[2]" in error["message"]
    assert openai_server.requests == [] and await stored() == (0, 0)
