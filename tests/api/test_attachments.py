"""Issue 20, item 3: images and files in messages, on /v1 with the official `openai`
client against the scripted upstream. An image part reaches the upstream as an image part
(a data URL of the same bytes), is stored as an artifact of the session (the ledger holds a
reference, never the bytes) and downloads for its owner only; each refused part (too large,
a type outside the allow list, a data URL that does not decode, too many) answers its status
with nothing stored."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from asgiref.sync import sync_to_async

from agentsite.asgi import application
from runs.core.llm.base import Model
from sessions_app import models as session_orm
from tests.support.openai_asgi import agents_on, client_for, sessions_of, stored_events, token_of
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

# A 1x1 transparent PNG.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_message(url: str, text: str = "What is in this picture?") -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}],
    }


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


@sync_to_async
def artifact_rows() -> int:
    return session_orm.Artifact.objects.count()


async def download(user: Any, url: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://localhost") as http:
        return await http.get(url, headers={"Authorization": f"Bearer {await token_of(user)}"})


async def test_an_image_part_reaches_the_upstream_as_an_image_and_is_an_artifact_of_the_session(
    alice: Any, bob: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("A single transparent pixel.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    raw = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=[image_message(data_url(PNG))],  # type: ignore[list-item]
    )
    assert raw.parse().choices[0].message.content == "A single transparent pixel."
    openai_server.assert_consumed()

    # The upstream got the text, the image as an image_url part with the same bytes, and the note.
    user = [m for m in openai_server.requests[0]["messages"] if m["role"] == "user"][-1]
    assert [p["type"] for p in user["content"]] == ["text", "image_url", "text"]
    assert user["content"][0]["text"] == "What is in this picture?"
    assert user["content"][1]["image_url"]["url"] == data_url(PNG)
    assert user["content"][2]["text"].startswith("Attached files: ")
    assert f"(image/png, {len(PNG)} B)" in user["content"][2]["text"]

    # The ledger references the artifact; no base64 in the stored event.
    session_id = raw.headers["X-Session-Id"]
    turn = next(e for e in await stored_events(session_id) if e.is_user_message)
    assert turn.message is not None and turn.text == "What is in this picture?"
    (part,) = turn.message.parts
    assert (part.type, part.mime, part.size) == ("image", "image/png", len(PNG))
    assert part.artifact is not None and part.artifact.version == 0
    assert base64.b64encode(PNG).decode()[:40] not in json.dumps(turn.to_dict())

    # Downloadable as an artifact of the session, by its owner only.
    url = f"/api/sessions/{session_id}/artifacts/{part.artifact.filename}?version=0"
    got = await download(alice, url)
    assert got.status_code == 200 and got.content == PNG and got.headers["content-type"] == "image/png"
    assert (await download(bob, url)).status_code == 404


async def test_a_text_file_part_is_sent_as_text_and_an_image_url_as_given(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Two rows.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    csv = b"host,status\nweb-1,down\n"
    await client.chat.completions.create(
        model="support",
        messages=[
            {
                "role": "user",
                "content": [  # type: ignore[list-item,misc]
                    {"type": "text", "text": "Read this"},
                    {"type": "file", "file": {"filename": "hosts.csv", "file_data": data_url(csv, "text/csv")}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/graph.png", "detail": "low"}},
                ],
            }
        ],
    )
    user = [m for m in openai_server.requests[0]["messages"] if m["role"] == "user"][-1]
    assert user["content"][1] == {"type": "text", "text": "File hosts.csv (text/csv):\nhost,status\nweb-1,down\n"}
    assert user["content"][2] == {
        "type": "image_url",
        "image_url": {"url": "https://example.com/graph.png", "detail": "low"},
    }
    assert "hosts.csv (text/csv, 23 B)" in user["content"][3]["text"]


@pytest.mark.parametrize(
    ("part", "status", "code"),
    [
        (
            {"type": "image_url", "image_url": {"url": data_url(b"PK\x03\x04 a zip, not an image")}},
            415,
            "unsupported_media_type",
        ),
        ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@not base64@@"}}, 400, "invalid_base64"),
        ({"type": "image_url", "image_url": {"url": "data:image/png,base64"}}, 415, "unsupported_media_type"),
        ({"type": "image_url", "image_url": {"url": "data:nonsense"}}, 400, "invalid_data_url"),
        ({"type": "image_url", "image_url": {"url": data_url(PNG + b"\0" * 200)}}, 413, "attachment_too_large"),
        (
            {"type": "file", "file": {"filename": "x.exe", "file_data": base64.b64encode(b"MZ\x90\x00\x03").decode()}},
            415,
            "unsupported_media_type",
        ),
        ({"type": "file", "file": {"file_id": "file-abc"}}, 400, "unsupported_content"),
    ],
)
async def test_a_refused_part_answers_its_status_and_stores_nothing(
    alice: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    settings: Any,
    part: dict[str, Any],
    status: int,
    code: str,
) -> None:
    settings.AGENTSITE_UPLOAD_MAX_BYTES = 200
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    # A good image first: validating every part before storing any keeps it out too.
    good = {"type": "image_url", "image_url": {"url": data_url(PNG)}}
    with pytest.raises(openai.APIStatusError) as refused:
        await client.chat.completions.create(
            model="support",
            messages=[  # type: ignore[list-item,misc]
                {"role": "user", "content": [{"type": "text", "text": "look"}, good, part]},
            ],
        )
    assert refused.value.status_code == status
    error = (
        refused.value.body["error"]
        if isinstance(refused.value.body, dict) and "error" in refused.value.body
        else refused.value.body
    )
    assert (
        isinstance(error, dict)
        and error["code"] == code
        and error["param"]
        == "messages[0].content[2]"
        + (
            ".file"
            if code == "unsupported_content"
            else ".file.file_data"
            if part["type"] == "file"
            else ".image_url.url"
        )
    )
    assert openai_server.requests == []
    assert await sessions_of(alice) == [] and await artifact_rows() == 0


async def test_more_attachments_than_the_limit_answer_413_and_store_nothing(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None], settings: Any
) -> None:
    settings.AGENTSITE_UPLOAD_MAX_COUNT = 2
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    image = {"type": "image_url", "image_url": {"url": data_url(PNG)}}
    with pytest.raises(openai.APIStatusError) as refused:
        await client.chat.completions.create(
            model="support",
            messages=[  # type: ignore[list-item,misc]
                {"role": "user", "content": [image, image, image]},
            ],
        )
    assert refused.value.status_code == 413
    assert "3 attachments; the limit is 2" in str(refused.value)
    assert await sessions_of(alice) == [] and await artifact_rows() == 0


async def test_an_image_in_an_assistant_message_is_refused(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    with pytest.raises(openai.BadRequestError, match="only a user message may carry images and files"):
        await client.chat.completions.create(
            model="support",
            messages=[  # type: ignore[list-item,misc]
                {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": data_url(PNG)}}]},
                {"role": "user", "content": "hi"},
            ],
        )


async def test_an_image_in_the_seeded_history_is_stored_and_shown_again(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Still one pixel.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    raw = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=[  # type: ignore[list-item,misc]
            image_message(data_url(PNG)),
            {"role": "assistant", "content": "A single transparent pixel."},
            {"role": "user", "content": "Are you sure?"},
        ],
    )
    assert raw.parse().choices[0].message.content == "Still one pixel."
    users = [m for m in openai_server.requests[0]["messages"] if m["role"] == "user"]
    assert users[0]["content"][1] == {"type": "image_url", "image_url": {"url": data_url(PNG)}}
    assert users[-1]["content"] == "Are you sure?"
    seeded = next(e for e in await stored_events(raw.headers["X-Session-Id"]) if e.is_user_message)
    assert seeded.message is not None and seeded.message.parts[0].artifact is not None
    assert await artifact_rows() == 1


async def test_a_file_name_with_control_characters_is_stored_without_them_and_such_a_url_is_refused(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Read.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    raw = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=[
            {  # type: ignore[list-item,misc]
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {
                            "filename": "re\u0001po\u0007rt\u200b.txt",
                            "file_data": base64.b64encode(b"all good").decode(),
                        },
                    }
                ],
            }
        ],
    )
    turn = next(e for e in await stored_events(raw.headers["X-Session-Id"]) if e.is_user_message)
    assert turn.message is not None and turn.message.parts[0].name == "report.txt"
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="support",
            messages=[  # type: ignore[list-item,misc]
                image_message("https://example.com/a\u0007.png"),
            ],
        )
    assert refused.value.code == "invalid_image_url"
