"""Structured output on the surfaces (issue 20, item 1): `/v1` `response_format` through the
official `openai` client, REST `POST /api/runs/ {"output_schema"}`; the scripted upstream
asserts what it received. A schema that is not JSON Schema is a 400 naming the problem,
and nothing is stored from the refused request."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pydantic
import pytest
from asgiref.sync import sync_to_async
from rest_framework.authtoken.models import Token

from agentsite.asgi import application
from runs import models as run_orm
from runs.core.llm.base import Model
from runs.core.llm.openai_provider import OpenAIModel
from sessions_app import models as session_orm
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

INCIDENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "host": {"type": "string"},
        "expired": {"type": "boolean"},
        "severity": {"type": "string", "enum": ["low", "high"]},
    },
    "required": ["host", "expired", "severity"],
    "additionalProperties": False,
}
GOOD = {"host": "payments.internal.example.com", "expired": True, "severity": "high"}


class Incident(pydantic.BaseModel):
    host: str
    expired: bool
    severity: str


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


@sync_to_async
def _token(user: Any) -> str:
    return Token.objects.get_or_create(user=user)[0].key


async def _client(user: Any) -> openai.AsyncOpenAI:
    """The official client as an integrator builds it, its HTTP going to the ASGI app."""
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=application), timeout=30)
    return openai.AsyncOpenAI(
        base_url="http://localhost/v1", api_key=await _token(user), max_retries=0, http_client=http
    )


def _agents_on(server: ScriptedOpenAIServer, use_model: Callable[[Model], None]) -> None:
    use_model(OpenAIModel(model="gpt-4o-mini", base_url=server.base_url, api_key="sk-test", max_retries=0))


@sync_to_async
def _stored(user: Any) -> tuple[int, int]:
    return (session_orm.Session.objects.filter(user=user).count(), run_orm.Run.objects.filter(user=user).count())


async def test_a_json_schema_answer_parses_and_validates_and_the_schema_reaches_the_upstream(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(json.dumps(GOOD))
    _agents_on(openai_server, use_model)
    client = await _client(alice)

    completion = await client.chat.completions.parse(
        model="support",
        messages=[{"role": "user", "content": "Is the payments certificate expired?"}],
        response_format=Incident,
    )
    openai_server.assert_consumed()
    parsed = completion.choices[0].message.parsed
    assert parsed == Incident(**GOOD)

    sent = openai_server.requests[0]["response_format"]
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["name"] == "Incident" and sent["json_schema"]["strict"] is True
    assert set(sent["json_schema"]["schema"]["required"]) == {"host", "expired", "severity"}


async def test_a_mismatch_is_retried_with_feedback_then_succeeds_streamed_as_one_json_answer(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script('{"host": "payments", "expired": "yes"}', "```json\n" + json.dumps(GOOD) + "\n```")
    _agents_on(openai_server, use_model)
    client = await _client(alice)

    stream = await client.chat.completions.create(
        model="support",
        messages=[{"role": "user", "content": "Is the payments certificate expired?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "incident", "schema": INCIDENT_SCHEMA}},
        stream=True,
    )
    content = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    openai_server.assert_consumed()
    assert json.loads(content) == GOOD  # the refused answer never reached the client

    retry = openai_server.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": '{"host": "payments", "expired": "yes"}'}
    assert retry[-1]["role"] == "user"
    assert "$.expired: 'yes' is not of type 'boolean'" in retry[-1]["content"]
    assert "'severity' is a required property" in retry[-1]["content"]


async def test_exhausted_retries_fail_clearly_with_output_invalid(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("not JSON", '{"host": 1}', "[]")
    _agents_on(openai_server, use_model)
    client = await _client(alice)

    with pytest.raises(openai.APIStatusError) as failed:
        await client.chat.completions.create(
            model="support",
            messages=[{"role": "user", "content": "Is it expired?"}],
            response_format={"type": "json_schema", "json_schema": {"name": "incident", "schema": INCIDENT_SCHEMA}},
        )
    openai_server.assert_consumed()
    error = failed.value.body
    assert isinstance(error, dict) and error["code"] == "output_invalid"
    assert "did not match the output schema after 3 attempt(s)" in error["message"]


async def test_json_object_asks_the_upstream_for_json_and_refuses_a_non_object(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("[1, 2]", '{"ok": true}')
    _agents_on(openai_server, use_model)
    client = await _client(alice)

    completion = await client.chat.completions.create(
        model="general",
        messages=[{"role": "user", "content": "Answer in JSON."}],
        response_format={"type": "json_object"},
    )
    assert json.loads(completion.choices[0].message.content or "") == {"ok": True}
    assert openai_server.requests[0]["response_format"] == {"type": "json_object"}
    assert "must be a JSON object, got an array" in openai_server.requests[1]["messages"][-1]["content"]


@pytest.mark.parametrize(
    ("response_format", "param", "problem"),
    [
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "banana"}}},
            "response_format.json_schema.schema",
            "invalid JSON Schema",
        ),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema", "is required"),
        (
            {"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}},
            "response_format.json_schema.name",
            "letters, digits",
        ),
        ({"type": "yaml"}, "response_format.type", "'yaml'"),
    ],
)
async def test_an_invalid_response_format_is_a_400_naming_the_problem_and_stores_nothing(
    alice: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    response_format: dict[str, Any],
    param: str,
    problem: str,
) -> None:
    _agents_on(openai_server, use_model)
    client = await _client(alice)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="support",
            messages=[{"role": "user", "content": "hi"}],
            response_format=response_format,  # type: ignore[arg-type]  # deliberately invalid
        )
    body = refused.value.body
    assert isinstance(body, dict) and body["param"] == param and problem in body["message"]
    assert await _stored(alice) == (0, 0)
    assert openai_server.requests == []


def test_rest_output_schema_returns_the_validated_object(
    alice_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script('{"host": "payments"}', json.dumps(GOOD))
    _agents_on(openai_server, use_model)
    response = alice_api.post(
        "/api/runs/",
        {"message": "Is the payments certificate expired?", "output_schema": INCIDENT_SCHEMA, "wait": True},
        format="json",
    )
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed" and run["output"] == GOOD
    assert json.loads(run["answer"]) == GOOD
    assert openai_server.requests[0]["response_format"]["json_schema"]["schema"] == INCIDENT_SCHEMA
    assert alice_api.get(f"/api/runs/{run['id']}/").json()["output"] == GOOD


def test_rest_invalid_output_schema_is_a_400_naming_the_problem_and_stores_nothing(
    alice: Any, alice_api: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    _agents_on(openai_server, use_model)
    response = alice_api.post(
        "/api/runs/",
        {"message": "hi", "output_schema": {"type": "object", "required": "host"}},
        format="json",
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["field"] == "output_schema" and "'host' is not of type 'array'" in error["message"]
    assert session_orm.Session.objects.filter(user=alice).count() == 0
    assert run_orm.Run.objects.filter(user=alice).count() == 0
    assert openai_server.requests == []


def test_the_offline_model_answers_the_rest_schema_with_a_valid_object(alice_api: Any) -> None:
    response = alice_api.post(
        "/api/runs/",
        {"message": "look up ticket INC-1042", "output_schema": INCIDENT_SCHEMA, "wait": True},
        format="json",
    )
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["status"] == "completed", run
    assert set(run["output"]) == {"host", "expired", "severity"} and run["output"]["severity"] == "low"


def _agui_input(thread_id: str, forwarded: dict[str, Any]) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": "r1",
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": forwarded,
        "messages": [{"id": "u1", "role": "user", "content": "Is the payments certificate expired?"}],
    }


async def _agui_post(alice: Any, body: dict[str, Any]) -> Any:
    from django.test import AsyncClient

    token = await _token(alice)
    return await AsyncClient().post(
        "/agui/support",
        data=json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )


async def test_agui_forwarded_props_output_schema_makes_the_answer_structured(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script('{"host": 5}', json.dumps(GOOD))
    _agents_on(openai_server, use_model)
    response = await _agui_post(alice, _agui_input("agui-structured", {"outputSchema": INCIDENT_SCHEMA}))
    assert response.status_code == 200
    stream = b"".join([chunk async for chunk in response.streaming_content]).decode()
    openai_server.assert_consumed()
    assert "RUN_FINISHED" in stream
    assert openai_server.requests[0]["response_format"]["json_schema"]["schema"] == INCIDENT_SCHEMA
    run = await sync_to_async(run_orm.Run.objects.get)(session_id="agui-structured")
    assert run.status == "completed" and run.output == GOOD


async def test_agui_invalid_output_schema_is_a_400_and_stores_nothing(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    _agents_on(openai_server, use_model)
    response = await _agui_post(alice, _agui_input("agui-bad", {"outputSchema": {"type": "banana"}}))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_output_schema" and error["field"] == "forwardedProps.outputSchema"
    assert "invalid JSON Schema at $.type" in error["message"]
    assert await _stored(alice) == (0, 0)
    assert openai_server.requests == []
