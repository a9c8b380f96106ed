"""Issue 20, item 3, on REST: `POST /api/runs/` with `attachments` (base64 data, an image
URL, or a file already stored in the session); the same checks as /v1, nothing stored
from a refused request."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from sessions_app import models as session_orm
from tests.api.test_attachments import PNG, data_url
from tests.support.openai_asgi import agents_on
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False


def test_rest_base64_image_reaches_the_model_and_the_event_references_its_artifact(
    alice_api: Any, bob_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("A pixel.")
    agents_on(openai_server, use_model)
    response = alice_api.post(
        "/api/runs/",
        {
            "message": "",
            "wait": True,
            "attachments": [{"type": "image", "name": "dot.png", "data": base64.b64encode(PNG).decode()}],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed" and run["answer"] == "A pixel."
    user = [m for m in openai_server.requests[0]["messages"] if m["role"] == "user"][-1]
    assert [p["type"] for p in user["content"]] == ["image_url", "text"]
    assert user["content"][0]["image_url"]["url"] == data_url(PNG)
    assert user["content"][1]["text"] == f"Attached files: dot.png (image/png, {len(PNG)} B)"

    events = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
    (part,) = next(e for e in events if e["role"] == "user")["attachments"]
    assert (part["type"], part["name"], part["mime"], part["size"]) == ("image", "dot.png", "image/png", len(PNG))
    url = part["download_url"]
    assert url == f"/api/sessions/{run['session_id']}/artifacts/{part['artifact']['filename']}?version=0"
    got = alice_api.get(url, HTTP_ACCEPT="*/*")
    assert got.status_code == 200 and b"".join(got.streaming_content) == PNG
    assert bob_api.get(url, HTTP_ACCEPT="*/*").status_code == 404


def test_rest_a_file_already_in_the_session_is_attached_by_name(
    alice_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("First.", "It lists one host.")
    agents_on(openai_server, use_model)
    first = alice_api.post("/api/runs/", {"message": "hello", "wait": True}, format="json").json()
    session_id = first["session_id"]
    stored = alice_api.generic(
        "POST",
        f"/api/sessions/{session_id}/artifacts/hosts.json",
        b'{"hosts": ["web-1"]}',
        content_type="application/json",
    )
    assert stored.status_code == 201
    response = alice_api.post(
        "/api/runs/",
        {
            "message": "what is in it?",
            "session_id": session_id,
            "wait": True,
            "attachments": [{"type": "file", "artifact": "hosts.json"}],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    user = [m for m in openai_server.requests[1]["messages"] if m["role"] == "user"][-1]
    assert user["content"][1] == {"type": "text", "text": 'File hosts.json (application/json):\n{"hosts": ["web-1"]}'}

    missing = alice_api.post(
        "/api/runs/",
        {
            "message": "and this?",
            "session_id": session_id,
            "attachments": [{"type": "file", "artifact": "nope.pdf"}],
        },
        format="json",
    )
    assert missing.status_code == 400
    assert missing.json()["error"]["field"] == "attachments[0].artifact"


@pytest.mark.parametrize(
    ("attachment", "status", "field"),
    [
        ({"type": "image", "data": base64.b64encode(b"just some text").decode()}, 415, "attachments[0].data"),
        ({"type": "file", "data": base64.b64encode(b"\x7fELF\x02\x01").decode()}, 415, "attachments[0].data"),
        ({"type": "file", "data": "not*base64"}, 400, "attachments[0].data"),
        ({"type": "image", "data": base64.b64encode(PNG + b"\0" * 300).decode()}, 413, "attachments[0].data"),
        ({"type": "video", "data": "AAAA"}, 400, "attachments[0].type"),
        ({"type": "file", "artifact": "report.pdf"}, 400, "attachments[0].artifact"),
    ],
)
def test_rest_a_refused_attachment_answers_its_status_and_stores_nothing(
    alice: Any,
    alice_api: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    settings: Any,
    attachment: dict[str, Any],
    status: int,
    field: str,
) -> None:
    settings.AGENTSITE_UPLOAD_MAX_BYTES = 200
    agents_on(openai_server, use_model)
    response = alice_api.post(
        "/api/runs/",
        {
            "message": "look",
            "attachments": [{"type": "image", "data": base64.b64encode(PNG).decode()}, attachment],
        },
        format="json",
    )
    expected_field = field.replace("[0]", "[1]")
    assert response.status_code == status, response.content
    assert response.json()["error"]["field"] == expected_field
    assert not session_orm.Session.objects.filter(user=alice).exists()
    assert session_orm.Artifact.objects.count() == 0 and openai_server.requests == []


def test_rest_more_attachments_than_the_limit_is_413(
    alice: Any,
    alice_api: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    settings.AGENTSITE_UPLOAD_MAX_COUNT = 1
    agents_on(openai_server, use_model)
    image = {"type": "image", "data": base64.b64encode(PNG).decode()}
    response = alice_api.post("/api/runs/", {"message": "look", "attachments": [image, image]}, format="json")
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_many_attachments"
    assert session_orm.Artifact.objects.count() == 0


def test_the_ledger_page_admin_and_inspector_show_an_attachment_with_its_download_link(
    alice: Any,
    alice_api: Any,
    admin_client: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
) -> None:
    from django.test import Client

    openai_server.script("A pixel.")
    agents_on(openai_server, use_model)
    run = alice_api.post(
        "/api/runs/",
        {
            "message": "look",
            "wait": True,
            "attachments": [{"type": "image", "name": "dot.png", "data": base64.b64encode(PNG).decode()}],
        },
        format="json",
    ).json()
    session_id = run["session_id"]
    (part,) = next(
        e for e in alice_api.get(f"/api/sessions/{session_id}/events/").json()["results"] if e["role"] == "user"
    )["attachments"]

    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/sessions/{session_id}/").content.decode()
    assert (
        f'<a href="{part["download_url"]}" download><img class="attachment-thumb" src="{part["download_url"]}"' in page
    )
    assert "dot.png" in page and "image/png" in page

    admin_page = admin_client.get(f"/admin/sessions_app/session/{session_id}/change/").content.decode()
    assert "dot.png" in admin_page and f"image/png, {len(PNG)} bytes" in admin_page

    blocks = alice_api.get(f"/api/sessions/{session_id}/context/").json()["blocks"]
    shown = next(b for b in blocks if b.get("attachments"))
    assert shown["attachments"][0]["artifact"] == part["artifact"]
    assert shown["attachments"][0]["tokens"] == 765 and shown["tokens"] > 765


async def test_the_websocket_run_frame_takes_attachments_and_refuses_a_bad_one_storing_nothing(
    alice: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    settings: Any,
) -> None:
    import json

    from asgiref.sync import sync_to_async
    from rest_framework.authtoken.models import Token

    from sessions_app import services as session_services
    from tests.security.support import open_socket

    openai_server.script("A pixel.")
    agents_on(openai_server, use_model)
    session_id = (await sync_to_async(session_services.session_create)(user=alice, agent="support")).id
    token = (await sync_to_async(Token.objects.get_or_create)(user=alice))[0].key
    socket = await open_socket(f"/ws/sessions/{session_id}/", token)
    try:
        bad = {"type": "file", "name": "x.bin", "data": base64.b64encode(b"\x7fELF\x02").decode()}
        await socket.send_json_to({"type": "run", "message": "", "attachments": [bad]})
        refused = await socket.receive_json_from(timeout=10)
        assert refused["type"] == "error" and refused["error"]["code"] == "unsupported_media_type", refused
        assert refused["error"]["field"] == "attachments[0].data"
        assert await sync_to_async(session_orm.Artifact.objects.count)() == 0

        good = {"type": "image", "name": "dot.png", "data": data_url(PNG)}
        await socket.send_json_to({"type": "run", "message": "", "attachments": [good]})
        frames = []
        while not any(f.get("type") == "RUN_FINISHED" for f in frames):
            frames.append(await socket.receive_json_from(timeout=20))
        assert frames[0]["type"] == "run.accepted"
    finally:
        await socket.disconnect()
    user = [m for m in openai_server.requests[0]["messages"] if m["role"] == "user"][-1]
    assert user["content"][0] == {"type": "image_url", "image_url": {"url": data_url(PNG)}}
    assert json.dumps(user).count("Attached files: dot.png") == 1
    assert await sync_to_async(session_orm.Artifact.objects.count)() == 1
