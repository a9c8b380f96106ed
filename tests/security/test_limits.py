"""Limits (issue 11.4): each one is a setting, and going past it gets a clear 4xx in the
API's error format or a clear error event, never a 500 or a silent cut.

Request size, message size, artifact size, events per run, tool output, runs per user at
once, and the REST API's request rate.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from rest_framework.throttling import UserRateThrottle

from runs import models as run_orm
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from sessions_app import models as orm
from sessions_app import services as session_services
from tests.security.support import a2a, a2a_message, open_socket, post_json, rpc, sse_events

pytestmark = pytest.mark.django_db(transaction=True)


def assert_envelope(response: Any, status: int, code: str, field: str | None = None) -> dict[str, Any]:
    """The API's error envelope with this status and code (and field, when given)."""
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response.headers["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error.get("field") == field, error
    assert error["message"], error
    return error


# -- request size ---------------------------------------------------------------------------------


async def test_a_body_over_the_request_size_limit_is_413_on_every_json_surface(
    settings: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    use_model(ScriptedModel.of())  # nothing may reach the model
    padding = "x" * 4096

    rest = await post_json("/api/sessions/", {"title": padding}, alice_token)
    agui = await post_json(
        "/agui/support", {"threadId": "t", "runId": "r", "messages": [], "pad": padding}, alice_token
    )
    openai = await post_json("/v1/chat/completions", {"model": "support", "messages": [], "pad": padding}, alice_token)

    for response in (rest, agui):
        assert response.status_code == 413, (response.status_code, response.text[:300])
        assert response.json()["error"]["code"] == "body_too_large"
        assert "2048" in response.json()["error"]["message"]
    assert openai.status_code == 413, (openai.status_code, openai.text[:300])
    assert openai.json()["error"]["code"] == "body_too_large"  # OpenAI's shape: error.message/type/code
    assert "2048" in openai.json()["error"]["message"]


async def test_a2a_refuses_a_body_over_its_limit_with_a_json_rpc_error(alice_token: str) -> None:
    response = await a2a("support", b"[" + b" " * 1_100_000 + b"]", alice_token)

    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600


# -- message size ---------------------------------------------------------------------------------


async def test_a_message_over_the_limit_is_refused_on_every_surface_naming_the_field(
    settings: Any, alice: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    settings.AGENTSITE_MAX_MESSAGE_CHARS = 100
    use_model(ScriptedModel.of())  # nothing may reach the model
    long = "y" * 101
    session = await sync_to_async(session_services.session_create)(user=alice, agent="support")

    rest = await post_json("/api/runs/", {"message": long}, alice_token)
    agui = await post_json(
        "/agui/support",
        {
            "threadId": "t1",
            "runId": "r1",
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
            "messages": [{"id": "u1", "role": "user", "content": long}],
        },
        alice_token,
    )
    openai = await post_json(
        "/v1/chat/completions", {"model": "support", "messages": [{"role": "user", "content": long}]}, alice_token
    )
    socket = await open_socket(f"/ws/sessions/{session.id}/", alice_token)
    await socket.send_to(text_data=json.dumps({"type": "run", "message": long}))
    frame = await socket.receive_json_from(timeout=5)
    await socket.disconnect()

    assert_envelope(rest, 413, "message_too_large", "message")
    assert_envelope(agui, 422, "invalid_input", "messages.0.content")
    assert "limit is 100" in agui.json()["error"]["message"]
    assert openai.status_code == 413
    assert openai.json()["error"]["code"] == "message_too_large"
    assert openai.json()["error"]["param"] == "messages[0].content"
    assert frame["type"] == "error" and frame["error"]["code"] == "message_too_large"
    assert await sync_to_async(run_orm.Run.objects.count)() == 0


# -- artifact size -------------------------------------------------------------------------------


def test_an_artifact_over_the_limit_is_413_and_nothing_is_stored(settings: Any, alice: Any, alice_api: Any) -> None:
    settings.AGENTSITE_ARTIFACT_MAX_BYTES = 1000
    session = session_services.session_create(user=alice, agent="support")
    url = f"/api/sessions/{session.id}/artifacts/big.bin"

    fits = alice_api.post(url, data=b"a" * 1000, content_type="application/octet-stream")
    too_big = alice_api.post(url, data=b"a" * 1001, content_type="application/octet-stream")

    assert fits.status_code == 201
    assert_envelope(too_big, 413, "artifact_too_large")
    listed = alice_api.get(f"/api/sessions/{session.id}/artifacts/").json()["results"]
    assert [(a["filename"], a["latest"]) for a in listed] == [("big.bin", 0)]


# -- events per run ----------------------------------------------------------------------------------


def test_a_run_past_the_event_limit_ends_failed_with_a_clear_error_event(
    settings: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    settings.AGENTSITE_MAX_RUN_EVENTS = 3
    # A model that keeps calling tools: each round writes an assistant event and a result.
    use_model(ScriptedModel.of(*(ScriptStep.call("search_logs", {"query": f"tls {i}"}) for i in range(6)), "done"))

    run = alice_api.post("/api/runs/", {"message": "loop", "wait": True}, format="json").json()

    assert run["status"] == "failed"
    assert run["error"]["type"] == "event_limit" and "limit of 3 events" in run["error"]["message"]
    events = alice_api.get(f"/api/sessions/{run['session_id']}/events/").json()["results"]
    # the user message, three agent events, the error event, the completion
    assert [e["role"] for e in events][:4] == ["user", "assistant", "tool", "assistant"]
    assert events[-2]["error"]["type"] == "event_limit"
    assert (events[-1]["object"], events[-1]["status"]) == ("runner.completion", "failed")
    assert len(events) == 6


# -- tool output ----------------------------------------------------------------------------------------


def test_a_tool_output_over_the_limit_reaches_the_model_cut_and_flagged(
    settings: Any, alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    settings.AGENTSITE_WORKSPACE_OUTPUT_LIMIT_BYTES = 1024
    model = ScriptedModel.of(
        ScriptStep.call("workspace_exec", {"command": "python3 -c \"print('z' * 100000)\""}, id="call_big"),
        "The output was long.",
    )
    use_model(model)

    run = alice_api.post("/api/runs/", {"message": "print a lot", "wait": True}, format="json").json()

    assert run["status"] == "completed", run
    result = next(m for m in model.requests[1].messages if m.role == "tool" and m.tool_call_id == "call_big")
    payload = json.loads(result.content)
    assert "stdout truncated: 100001 bytes, 1024 kept inline" in payload["warnings"]
    assert payload["stdout"].count("z") <= 1024
    assert len(result.content) < 4096


# -- runs per user at once -------------------------------------------------------------------------------


@sync_to_async
def _wait_running(session_id: str) -> None:
    import time

    deadline = time.monotonic() + 5
    while not run_orm.Run.objects.filter(session_id=session_id, status="running").exists():
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.02)


async def test_past_the_active_runs_limit_a_start_is_429_on_every_surface(
    settings: Any, alice: Any, bob_token: str, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    settings.AGENTSITE_MAX_ACTIVE_RUNS_PER_USER = 1
    # One slow run for alice, one quick one for bob (the limit is per user); nothing else.
    use_model(ScriptedModel.of(ScriptStep.answer("slow " * 60, chunk_size=5, delay_s=0.05), "Bob's answer."))
    session = await sync_to_async(session_services.session_create)(user=alice, agent="support")
    first = asyncio.create_task(
        post_json(
            "/agui/support",
            {
                "threadId": session.id,
                "runId": "c1",
                "state": {},
                "tools": [],
                "context": [],
                "forwardedProps": {},
                "messages": [{"id": "u1", "role": "user", "content": "one"}],
            },
            alice_token,
        )
    )
    await _wait_running(session.id)

    rest = await post_json("/api/runs/", {"message": "two"}, alice_token)
    agui = await post_json(
        "/agui/support",
        {
            "threadId": "other-thread",
            "runId": "c2",
            "state": {},
            "tools": [],
            "context": [],
            "forwardedProps": {},
            "messages": [{"id": "u2", "role": "user", "content": "two"}],
        },
        alice_token,
    )
    openai = await post_json(
        "/v1/chat/completions", {"model": "support", "messages": [{"role": "user", "content": "two"}]}, alice_token
    )
    socket = await open_socket(f"/ws/sessions/{session.id}/", alice_token)
    await socket.send_to(text_data=json.dumps({"type": "run", "message": "two"}))
    frames = [await socket.receive_json_from(timeout=5)]
    while frames[-1]["type"] != "error":  # the replay of the running run comes first
        frames.append(await socket.receive_json_from(timeout=5))
    await socket.disconnect()
    bobs = await post_json("/api/runs/", {"message": "mine", "wait": True}, bob_token)
    finished = await first

    for response in (rest, agui):
        error = assert_envelope(response, 429, "too_many_runs")
        assert "limit is 1" in error["message"]
    assert openai.status_code == 429 and openai.json()["error"]["code"] == "too_many_runs"
    assert frames[-1]["error"]["code"] == "too_many_runs"
    assert bobs.status_code == 201 and bobs.json()["status"] == "completed"
    assert sse_events(finished)[-1]["type"] == "RUN_FINISHED"
    # The refused starts wrote nothing: alice has her one run and one session.
    assert await sync_to_async(run_orm.Run.objects.filter(user=alice).count)() == 1
    assert await sync_to_async(orm.Session.objects.filter(user=alice).count)() == 1


async def test_a2a_past_the_active_runs_limit_answers_a_json_rpc_error(
    settings: Any, alice_token: str, use_model: Callable[[Model], None]
) -> None:
    settings.AGENTSITE_MAX_ACTIVE_RUNS_PER_USER = 1
    use_model(ScriptedModel.of(ScriptStep.answer("slow " * 60, chunk_size=5, delay_s=0.05)))
    first = asyncio.create_task(
        post_json(
            "/v1/chat/completions",
            {"model": "support", "messages": [{"role": "user", "content": "one"}]},
            alice_token,
            **{"X-Session-Id": "s-one"},
        )
    )
    await _wait_running("s-one")

    refused = await a2a("support", rpc("SendMessage", a2a_message("two")), alice_token)

    assert refused.status_code == 200
    assert refused.json()["error"]["code"] == -32602 and "limit is 1" in refused.json()["error"]["message"]
    assert (await first).status_code == 200


# -- API rate --------------------------------------------------------------------------------------------


def test_past_the_api_rate_a_user_gets_429_in_the_envelope_and_others_are_not_slowed(
    monkeypatch: pytest.MonkeyPatch, alice_api: Any, bob_api: Any
) -> None:
    # DRF reads the rates once, at import: lower the configured one where the throttle reads it.
    monkeypatch.setitem(UserRateThrottle.THROTTLE_RATES, "user", "3/min")

    allowed = [alice_api.get("/api/sessions/").status_code for _ in range(3)]
    throttled = alice_api.get("/api/sessions/")

    assert allowed == [200, 200, 200]
    error = assert_envelope(throttled, 429, "throttled")
    assert "seconds" in error["message"]
    assert int(throttled["Retry-After"]) > 0
    assert bob_api.get("/api/sessions/").status_code == 200


def test_the_rates_are_settings_and_a_bad_one_stops_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    from agentsite.config import read

    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["user"] == UserRateThrottle.THROTTLE_RATES["user"]
    with pytest.raises(ImproperlyConfigured, match=r"AGENTSITE_API_RATE_USER.*'lots'"):
        read("AGENTSITE_API_RATE_USER", environ={"AGENTSITE_API_RATE_USER": "lots"})
    assert read("AGENTSITE_API_RATE_USER", environ={"AGENTSITE_API_RATE_USER": "off"}) is None
