"""Malformed input (issue 17): each case is a 4xx in the surface's own error format, never a
500 and never the server's insides.

Deep JSON, NUL characters and lone surrogates on every JSON surface; ids longer than their
column; a huge offset; a word longer than PostgreSQL's tsvector limit; database errors
behind A2A; the browser's session cookie on AG-UI and artifact uploads; chunked bodies.
The NUL, id-length and tsvector cases matter most on PostgreSQL (SQLite stores what
PostgreSQL refuses), and the suite's PostgreSQL pass runs them there.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.middleware.csrf import _get_new_csrf_string
from django.test import AsyncClient

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel
from sessions_app import models as orm
from sessions_app import services as session_services
from sessions_app.core.memory import MemoryDraft, SearchOptions, UserKey
from sessions_app.memory_backends import memory_manager
from tests.security.support import a2a, a2a_message, assert_clean, client, post_json, rpc, sse_events

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = b"[" * 1000 + b"]" * 1000  # 2 KB of JSON nested 1,000 levels


def agui_input(content: str, *, thread_id: str = "t-malformed", message_id: str = "u1") -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "r1",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
        "messages": [{"id": message_id, "role": "user", "content": content}],
    }


def chat(content: str) -> dict[str, Any]:
    return {"model": "support", "messages": [{"role": "user", "content": content}]}


def raw(body: dict[str, Any]) -> bytes:
    """JSON with the escapes as sent: `json.dumps` keeps a lone surrogate as `\\ud800`."""
    return json.dumps(body).encode()


def envelope_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers["Content-Type"].startswith("application/json"), response.headers
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] and error["message"], error
    return error


# -- deep nesting ---------------------------------------------------------------------------------


async def test_json_nested_a_thousand_levels_is_refused_with_400_in_each_surfaces_format(
    alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())  # nothing may reach the model

    rest = await post_json("/api/sessions/", DEEP, alice_token)
    agui = await post_json("/agui/support", DEEP, alice_token)
    openai = await post_json("/v1/chat/completions", DEEP, alice_token)
    a2a_answer = await a2a("support", DEEP, alice_token)
    memory = await post_json("/api/memories/", b'{"memory": "x", "topics": ' + DEEP + b"}", alice_token)

    for response in (rest, agui, memory):
        error = envelope_error(response, 400)
        assert error["code"] == "json_too_deep" and "64" in error["message"], error
    error = envelope_error(openai, 400)
    assert {"message", "type", "param", "code"} <= set(error) and error["code"] == "json_too_deep", error
    assert a2a_answer.status_code == 400, a2a_answer.text[:300]
    assert a2a_answer.json()["error"]["code"] == -32700 and "64" in a2a_answer.json()["error"]["message"]
    assert await sync_to_async(orm.Session.objects.count)() == 0


# -- NUL characters and lone surrogates ----------------------------------------------------------


async def test_nul_and_lone_surrogates_are_refused_with_400_naming_the_field_on_every_surface(
    alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())  # nothing may reach the model
    for bad, what in (("a\x00b", "NUL character"), ("a\ud800b", "lone surrogate")):
        agui = await post_json("/agui/support", raw(agui_input(bad)), alice_token)
        agui_thread = await post_json("/agui/support", raw(agui_input("hi", thread_id=bad)), alice_token)
        openai = await post_json("/v1/chat/completions", raw(chat(bad)), alice_token)
        title = await post_json("/api/sessions/", raw({"title": bad}), alice_token)
        memory = await post_json("/api/memories/", raw({"memory": bad}), alice_token)
        run = await post_json("/api/runs/", raw({"message": bad}), alice_token)
        a2a_answer = await a2a("support", raw(rpc("SendMessage", a2a_message(bad))), alice_token)

        for response, field in (
            (agui, "messages.0.content"),
            (agui_thread, "threadId"),
            (title, "title"),
            (memory, "memory"),
            (run, "message"),
        ):
            error = envelope_error(response, 400)
            assert (error["code"], error.get("field")) == ("invalid_text", field), error
            assert f"{field} contains a {what}" in error["message"], error
        error = envelope_error(openai, 400)
        assert (error["code"], error["param"]) == ("invalid_text", "messages[0].content"), error
        assert f"messages[0].content contains a {what}" in error["message"]
        assert a2a_answer.status_code == 400, a2a_answer.text[:300]
        rpc_error = a2a_answer.json()["error"]
        assert rpc_error["code"] == -32602 and f"params.message.parts[0].text contains a {what}" in rpc_error["message"]
    assert await sync_to_async(orm.Session.objects.count)() == 0
    assert await sync_to_async(orm.Memory.objects.count)() == 0


def test_nul_and_lone_surrogates_in_a_resume_are_refused_with_400_naming_the_field(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())
    paused = alice_api.post(
        "/api/runs/",
        {"message": "payments TLS handshake failures", "agent": "troubleshoot", "wait": True},
        format="json",
    ).json()
    url = f"/api/runs/{paused['id']}/resume/"

    message = alice_api.post(
        url, raw({"value": {"approved": True}, "message": "Approve\x00"}), content_type="application/json"
    )
    value = alice_api.post(
        url, raw({"value": {"approved": True, "comment": "ok\ud800"}}), content_type="application/json"
    )

    assert "interrupt" in alice_api.get(f"/api/runs/{paused['id']}/").json(), "the run must still wait"
    for response, field in ((message, "message"), (value, "value.comment")):
        assert response.status_code == 400, response.content[:300]
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_text", field), error


def test_nul_in_a_url_path_id_is_a_4xx_in_the_envelope(alice: Any, alice_api: Any) -> None:
    session = session_services.session_create(user=alice, agent="support")
    paths = [
        "/api/sessions/a%00b/",
        "/api/sessions/a%00b/events/",
        "/api/sessions/a%00b/context/",
        "/api/sessions/a%00b/artifacts/",
        f"/api/sessions/{session.id}/artifacts/a%00b.txt",
        "/api/runs/a%00b/",
        "/api/memories/a%00b/",
        "/api/skills/a%00b/",
    ]
    for path in paths:
        response = alice_api.get(path)
        assert 400 <= response.status_code < 500, (path, response.status_code, response.content[:300])
        assert response["Content-Type"].startswith("application/json"), (path, response["Content-Type"])
        assert response.json()["error"]["message"], path
    upload = alice_api.post(
        f"/api/sessions/{session.id}/artifacts/a%00b.txt", data=b"x", content_type="application/octet-stream"
    )
    assert upload.status_code == 400 and upload.json()["error"]["code"] in ("invalid_filename", "invalid_text"), (
        upload.content
    )


# -- ids longer than their column, offsets past any integer ------------------------------------------


async def test_an_x_session_id_longer_than_the_column_is_refused_with_400(
    alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())

    response = await post_json("/v1/chat/completions", chat("hello"), alice_token, **{"X-Session-Id": "s" * 65})

    error = envelope_error(response, 400)
    assert (error["param"], error["code"]) == ("X-Session-Id", "invalid_session_id"), error
    assert "64" in error["message"]
    assert await sync_to_async(orm.Session.objects.count)() == 0


def test_a_huge_memories_offset_is_refused_with_400(alice_api: Any) -> None:
    response = alice_api.get("/api/memories/", {"offset": str(10**30)})

    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["field"] == "offset"


# -- words past PostgreSQL's tsvector limit -----------------------------------------------------------


def test_a_memory_with_a_word_over_the_tsvector_limit_is_stored_and_still_searchable(
    alice: Any, alice_api: Any
) -> None:
    text = "deploys use blue green " + "z" * 3000

    created = alice_api.post("/api/memories/", {"memory": text}, format="json")
    found = memory_manager().search(
        UserKey(app="agentsite", user_id=str(alice.pk)), SearchOptions(query="blue green deploys", max_results=5)
    )

    assert created.status_code == 201, created.content[:300]
    assert [entry.text for entry in found] == [text]
    # The same write path memory extraction uses: the next one is not stuck behind it.
    again = memory_manager().add(
        UserKey(app="agentsite", user_id=str(alice.pk)), MemoryDraft(text="canary releases " + "q" * 3000)
    )
    assert again.action == "added"


def test_a_message_with_a_word_over_the_tsvector_limit_runs_and_is_recallable(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("noted"))
    message = "the certificate fingerprint is " + "f" * 3000 + " " + "д" * 1500

    run = alice_api.post("/api/runs/", {"message": message, "wait": True}, format="json")

    assert run.status_code == 201 and run.json()["status"] == "completed", run.content[:300]
    events = alice_api.get(f"/api/sessions/{run.json()['session_id']}/events/").json()["results"]
    assert events[0]["text"] == message


# -- A2A never shows database internals ----------------------------------------------------------------


async def test_a2a_errors_never_show_database_errors_or_sql(
    monkeypatch: pytest.MonkeyPatch, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    from runs.surfaces.a2a import task_store

    use_model(ScriptedModel.of("never"))

    async def failing(*args: Any, **kwargs: Any) -> Any:
        raise DatabaseError('value too long for type character varying(64)\nLINE 1: INSERT INTO "runs_a2atask" ("id"')

    monkeypatch.setattr(task_store.DjangoTaskStore, "get", failing)
    response = await a2a("support", rpc("GetTask", {"id": "task-1"}), alice_token)

    assert_clean(response)
    body = response.text
    assert "error" in response.json(), body
    assert "INSERT" not in body and "varying" not in body and "LINE 1" not in body, body
    assert response.json()["error"]["code"] == -32603


# -- the browser's session cookie --------------------------------------------------------------------


async def _browser(user: Any) -> tuple[AsyncClient, str]:
    """A logged-in browser that enforces CSRF, with its token (cookie and header)."""
    browser = AsyncClient(enforce_csrf_checks=True)
    await browser.aforce_login(user)
    token = _get_new_csrf_string()
    browser.cookies["csrftoken"] = token
    return browser, token


async def test_agui_with_the_browser_session_cookie_and_csrf_token_streams_the_run(
    alice: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of("Hello from the browser."))
    browser, token = await _browser(alice)

    response = await browser.post(
        "/agui/support",
        agui_input("hi"),
        content_type="application/json",
        headers={"X-CSRFToken": token, "Accept": "text/event-stream"},
    )
    refused = await browser.post("/agui/support", agui_input("hi", thread_id="t-2"), content_type="application/json")

    assert response.status_code == 200, (response.status_code, getattr(response, "content", b"")[:300])
    chunks = [chunk async for chunk in response.streaming_content]
    text = b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks).decode()
    events = sse_events(httpx.Response(200, text=text))
    assert events[-1]["type"] == "RUN_FINISHED", events
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"


async def test_an_artifact_upload_with_the_browser_session_cookie_and_csrf_token_is_stored(alice: Any) -> None:
    session = await sync_to_async(session_services.session_create)(user=alice, agent="support")
    browser, token = await _browser(alice)
    url = f"/api/sessions/{session.id}/artifacts/notes.bin"

    uploaded = await browser.post(
        url, data=b"\x00\x01binary", content_type="application/octet-stream", headers={"X-CSRFToken": token}
    )
    as_form = await browser.post(
        url, data=b"a=1&b=2", content_type="application/x-www-form-urlencoded", headers={"X-CSRFToken": token}
    )
    refused = await browser.post(url, data=b"x", content_type="application/octet-stream")
    downloaded = await browser.get(url + "?version=0")

    assert uploaded.status_code == 201, uploaded.content[:300]
    assert uploaded.json()["size"] == 8
    assert as_form.status_code == 201 and as_form.json()["size"] == 7, as_form.content[:300]
    assert refused.status_code == 403
    assert b"".join(downloaded.streaming_content) == b"\x00\x01binary"


# -- chunked bodies --------------------------------------------------------------------------------------


def test_a_chunked_body_that_cannot_be_read_is_refused_with_411_not_stored_empty(alice: Any, alice_api: Any) -> None:
    # WSGI cannot read a body without a length: Django sees it empty.
    session = session_services.session_create(user=alice, agent="support")
    url = f"/api/sessions/{session.id}/artifacts/big.bin"

    response = alice_api.generic(
        "POST", url, b"", content_type="application/octet-stream", HTTP_TRANSFER_ENCODING="chunked"
    )
    json_post = alice_api.generic(
        "POST", "/api/sessions/", b"", content_type="application/json", HTTP_TRANSFER_ENCODING="chunked"
    )

    for answer in (response, json_post):
        assert answer.status_code == 411, (answer.status_code, answer.content[:300])
        assert answer.json()["error"]["code"] == "length_required"
    assert not orm.Artifact.objects.exists()
    assert orm.Session.objects.count() == 1


async def _chunks(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def test_a_chunked_artifact_upload_is_read_whole_and_a_chunked_json_body_within_the_limit_works(
    settings: Any, alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of())
    session = await sync_to_async(session_services.session_create)(user=alice, agent="support")
    data = bytes(range(256)) * (3 * 4096)  # 3 MB
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048

    async with client(alice_token) as http:
        # httpx sends an async iterator with Transfer-Encoding: chunked and no Content-Length.
        stored = await http.post(
            f"/api/sessions/{session.id}/artifacts/big.bin",
            content=_chunks(data),
            headers={"Content-Type": "application/octet-stream"},
        )
        created = await http.post(
            "/api/sessions/", content=_chunks(b'{"title": "chunked"}'), headers={"Content-Type": "application/json"}
        )
        too_big = await http.post(
            "/api/sessions/",
            content=_chunks(json.dumps({"title": "x" * 4096}).encode()),
            headers={"Content-Type": "application/json"},
        )
        openai_too_big = await http.post(
            "/v1/chat/completions", content=_chunks(raw(chat("y" * 4096))), headers={"Content-Type": "application/json"}
        )
        back = await http.get(f"/api/sessions/{session.id}/artifacts/big.bin")

    assert stored.status_code == 201, stored.text[:300]
    assert stored.json()["size"] == len(data)
    assert back.content == data
    assert created.status_code == 201 and created.json()["title"] == "chunked", created.text[:300]
    assert envelope_error(too_big, 413)["code"] == "body_too_large"
    assert envelope_error(openai_too_big, 413)["code"] == "body_too_large"


@pytest.mark.integration
def test_a_chunked_artifact_upload_through_daphne_is_stored_whole(tmp_path: Path, alice: Any, alice_token: str) -> None:
    from tests.support.daphne import live_daphne

    session = session_services.session_create(user=alice, agent="support")
    data = b"0123456789abcdef" * (3 * 65536)  # 3 MB

    def chunks() -> Any:
        for start in range(0, len(data), 65536):
            yield data[start : start + 65536]

    with live_daphne(tmp_path) as live:
        with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {alice_token}"}, timeout=30) as http:
            stored = http.post(
                f"/api/sessions/{session.id}/artifacts/big.bin",
                content=chunks(),
                headers={"Content-Type": "application/octet-stream"},
            )
            back = http.get(f"/api/sessions/{session.id}/artifacts/big.bin")

    assert stored.status_code == 201, stored.text[:300]
    assert stored.json()["size"] == len(data)
    assert back.content == data
