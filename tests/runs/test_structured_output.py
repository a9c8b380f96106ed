"""Structured output (issue 20, item 1) through the Runner API: validation, feedback and
bounded retries, the validated value on the record and the completion event, the offline
model's schema answers."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest

from runs.core.agents.llm import OUTPUT_FEEDBACK_EXTENSION, LLMAgent
from runs.core.invocation import RunOptions
from runs.core.llm.base import ModelRequest
from runs.core.llm.offline import OfflineModel
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.output import OutputMismatch, OutputSpec, SchemaError, check_schema, minimal_instance
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "t"

TICKET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ticket": {"type": "string", "pattern": "^INC-[0-9]+$"},
        "severity": {"type": "string", "enum": ["low", "high"]},
        "hosts": {"type": "integer", "minimum": 1},
    },
    "required": ["ticket", "severity", "hosts"],
    "additionalProperties": False,
}


class Verdict(pydantic.BaseModel):
    cause: str
    certain: bool


def lookup_ticket(ticket_id: str) -> dict[str, str]:
    """Look up a ticket.

    Args:
        ticket_id: the ticket's id
    """
    return {"id": ticket_id, "status": "open", "problem": "certificate expired on checkout-api"}


def make_runner(model: Any, **agent_kwargs: Any) -> tuple[Runner, InMemorySessionService]:
    service = InMemorySessionService()
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(lookup_ticket)], **agent_kwargs)
    return Runner(app=APP, agents=[agent], session_service=service), service


async def ledger(service: InMemorySessionService, user: str, session_id: str) -> list[Event]:
    return await service.list_events(SessionKey(app=APP, user_id=user, session_id=session_id), limit=1000)


async def test_a_valid_answer_is_on_the_record_the_final_event_and_the_completion() -> None:
    answer = {"ticket": "INC-7", "severity": "high", "hosts": 3}
    model = ScriptedModel.of(json.dumps(answer))
    runner, service = make_runner(model, output=TICKET_SCHEMA)
    handle = await runner.start(user_id="alice", message="summarise INC-7", stream=True)
    events = [e async for e in handle.events()]
    record = await handle.wait()

    assert record.status == "completed"
    assert record.output == answer
    assert events[-1].is_runner_completion and events[-1].extensions["output"] == answer
    # The schema went to the model with the request; no text delta was streamed before validation.
    assert model.requests[0].output is not None and model.requests[0].output.schema == TICKET_SCHEMA
    assert not any(e.partial for e in events)
    stored = await ledger(service, "alice", handle.session_id)
    final = next(e for e in stored if e.role == "assistant")
    assert final.extensions["output"] == answer


async def test_a_mismatch_is_retried_with_feedback_naming_the_problem_then_succeeds() -> None:
    good = {"ticket": "INC-7", "severity": "high", "hosts": 3}
    model = ScriptedModel.of('{"ticket": "7", "severity": "urgent"}', json.dumps(good))
    runner, service = make_runner(model, output=TICKET_SCHEMA)
    handle = await runner.start(user_id="alice", message="summarise INC-7")
    record = await handle.wait()

    assert record.status == "completed" and record.output == good
    retry = model.requests[1].messages
    assert retry[-2].role == "assistant" and retry[-2].content == '{"ticket": "7", "severity": "urgent"}'
    feedback = retry[-1]
    assert feedback.role == "user"
    assert "'hosts' is a required property" in feedback.content
    assert "'urgent' is not one of ['low', 'high']" in feedback.content
    assert "$.ticket" in feedback.content
    stored = await ledger(service, "alice", handle.session_id)
    refused = [e for e in stored if "output_invalid" in e.extensions]
    assert len(refused) == 1 and not refused[0].done
    assert [
        e.extensions[OUTPUT_FEEDBACK_EXTENSION]["attempt"] for e in stored if OUTPUT_FEEDBACK_EXTENSION in e.extensions
    ] == [1]


async def test_exhausted_retries_fail_the_run_with_output_invalid() -> None:
    model = ScriptedModel.of("not json", '{"ticket": 1}', "[]")
    runner, _ = make_runner(model, output=OutputSpec.of(TICKET_SCHEMA, max_retries=2))
    handle = await runner.start(user_id="alice", message="summarise INC-7")
    record = await handle.wait()

    model.assert_consumed()
    assert record.status == "failed"
    assert record.error is not None and record.error["type"] == "output_invalid"
    assert record.error["code"] == "output_invalid"
    assert "after 3 attempt(s)" in record.error["message"]
    assert record.output is None


async def test_a_pydantic_model_declares_the_schema_and_parses_the_value() -> None:
    spec = OutputSpec.of(Verdict)
    model = ScriptedModel.of('```json\n{"cause": "expired certificate", "certain": true}\n```')
    runner, _ = make_runner(model, output=spec)
    record = await (await runner.start(user_id="alice", message="why?")).wait()

    assert record.output == {"cause": "expired certificate", "certain": True}
    assert spec.parse(record.output) == Verdict(cause="expired certificate", certain=True)
    assert spec.name == "Verdict"


async def test_a_run_option_overrides_the_agent_and_json_object_needs_an_object() -> None:
    model = ScriptedModel.of('"just a string"', '{"answer": "ok"}')
    runner, _ = make_runner(model)
    options = RunOptions(output=OutputSpec(kind="json_object", max_retries=1))
    record = await (await runner.start(user_id="alice", message="hi", options=options)).wait()

    assert record.output == {"answer": "ok"}
    assert "must be a JSON object, got a string" in model.requests[1].messages[-1].content


async def test_tool_steps_are_not_validated_only_the_final_answer() -> None:
    good = {"ticket": "INC-7", "severity": "low", "hosts": 1}
    model = ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket_id": "INC-7"}), json.dumps(good))
    runner, _ = make_runner(model, output=TICKET_SCHEMA)
    record = await (await runner.start(user_id="alice", message="INC-7?")).wait()
    assert record.status == "completed" and record.output == good and record.tool_calls == 1


async def test_the_offline_model_answers_a_schema_with_a_valid_object_from_its_findings() -> None:
    schema = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "minLength": 3},
            "severity": {"enum": ["minor", "major"]},
            "results": {"type": "integer", "minimum": 0},
            "hosts": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "ok": {"type": "boolean"},
        },
        "required": ["summary", "severity", "results", "hosts"],
    }
    runner, _ = make_runner(OfflineModel(), output=schema)
    record = await (await runner.start(user_id="alice", message="look up ticket INC-7")).wait()

    assert record.status == "completed", record.error
    assert isinstance(record.output, dict)
    OutputSpec.of(schema).check(json.dumps(record.output))
    assert record.output["severity"] == "minor" and record.output["results"] == 1
    assert "certificate expired" in record.output["summary"]


def test_the_offline_model_answers_json_object_requests_with_an_object() -> None:
    request = ModelRequest(messages=(Message(role="user", content="hello"),), output=OutputSpec(kind="json_object"))
    answer = json.loads(OfflineModel().respond(request).content)
    assert isinstance(answer, dict) and answer["answer"]


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "banana"}, "'banana' is not valid"),
        ({"type": "object", "properties": {"a": {"type": 5}}}, "$.properties.a.type"),
        ({"type": "object", "required": "a"}, "'a' is not of type 'array'"),
        ([1, 2], "a schema must be a JSON object, got an array"),
        ({"properties": {"a": {"$ref": "https://example.com/s.json"}}}, "only local references"),
        ({"$schema": ["x"]}, "$.$schema"),
    ],
)
def test_a_schema_that_is_not_json_schema_is_refused_naming_the_problem(schema: Any, problem: str) -> None:
    with pytest.raises(SchemaError) as refused:
        check_schema(schema)
    assert problem in str(refused.value)


def test_minimal_instance_follows_refs_enums_bounds_and_required() -> None:
    schema = {
        "$defs": {"Level": {"type": "string", "enum": ["a", "b"]}},
        "type": "object",
        "properties": {
            "level": {"$ref": "#/$defs/Level"},
            "n": {"type": "integer", "minimum": 5, "maximum": 9},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 2}, "minItems": 2},
            "nested": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
        },
        "required": ["level", "n", "tags", "nested"],
    }
    value = minimal_instance(schema, text="hello", count=1)
    assert value == {"level": "a", "n": 5, "tags": ["he", "he"], "nested": {"x": 1}}
    OutputSpec.of(schema).check(json.dumps(value))


def test_a_mismatch_lists_each_problem_with_its_path() -> None:
    with pytest.raises(OutputMismatch) as mismatch:
        OutputSpec.of(TICKET_SCHEMA).check('{"ticket": "X", "severity": "low", "hosts": 0, "extra": 1}')
    problems = mismatch.value.problems
    assert any(p.startswith("$:") and "'extra' was unexpected" in p for p in problems)
    assert any(p.startswith("$.hosts:") for p in problems)
    assert any(p.startswith("$.ticket:") for p in problems)
