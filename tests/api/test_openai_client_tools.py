"""Issue 20, item 2: client-side tools on /v1, with the official `openai` client.

The client's `tools` are offered to the model beside the agent's own; a call of one ends the
request with `finish_reason: "tool_calls"` (streamed and not), the call waiting in the
ledger and the run paused (`requires_action`); the client's next request with the `tool`
result (same `X-Session-Id`, or the whole history) continues the same run, and the model's
next step sees the result. `tool_choice` reaches the
upstream. The scripted upstream records every request it receives."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from runs.core.llm.base import Model
from tests.support.openai_asgi import agents_on, client_for, runs_of, sessions_of, stored_events
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city, from the client's own service.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


def _tool_names(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def _tail(request: dict[str, Any], count: int) -> list[dict[str, Any]]:
    return request["messages"][-count:]


async def test_a_client_tool_is_called_answered_and_the_run_completes(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(
        ServerStep.call("get_weather", {"city": "Paris"}, id="call_c1"), "It is 18C and sunny in Paris."
    )
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    raw = await client.chat.completions.with_raw_response.create(
        model="support", messages=[QUESTION], tools=[WEATHER_TOOL]
    )  # type: ignore[list-item]
    first = raw.parse()
    session_id, run_id = raw.headers["X-Session-Id"], raw.headers["X-Run-Id"]
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    [call] = choice.message.tool_calls
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_c1",
        "get_weather",
        {"city": "Paris"},
    )
    # Offered beside the agent's own tools.
    assert _tool_names(openai_server.requests[0]) >= {"get_weather", "lookup_ticket", "search_logs"}
    # The run ended waiting: the call is in the ledger, with no result.
    stored = await stored_events(session_id)
    assert next(e for e in stored if e.is_tool_call).extensions["client_tool_calls"] == ["call_c1"]
    assert not [e for e in stored if e.is_tool_result]
    assert [(r.id, r.status) for r in await runs_of(alice)] == [(run_id, "requires_action")]

    raw = await client.chat.completions.with_raw_response.create(
        model="support",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        messages=[
            QUESTION,
            choice.message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": "call_c1", "content": "18C and sunny"},
        ],
        extra_headers={"X-Session-Id": session_id},
    )
    second = raw.parse()
    assert (raw.headers["X-Session-Id"], raw.headers["X-Run-Id"]) == (session_id, run_id)
    assert (second.choices[0].finish_reason, second.choices[0].message.content) == (
        "stop",
        "It is 18C and sunny in Paris.",
    )
    assert second.choices[0].message.tool_calls is None
    # The model's next step saw its call and the client's result, in order.
    call_message, result = _tail(openai_server.requests[1], 2)
    assert [c["id"] for c in call_message["tool_calls"]] == ["call_c1"]
    assert (result["role"], result["tool_call_id"], result["content"]) == ("tool", "call_c1", "18C and sunny")
    openai_server.assert_consumed()
    # The result is the call's result event in the ledger, authored by the agent that called.
    results = [e for e in await stored_events(session_id) if e.is_tool_result]
    assert [(e.author, e.message.tool_name, e.text) for e in results if e.message] == [
        ("support", "get_weather", "18C and sunny")
    ]
    # One run, paused and continued, completed once.
    [run] = await runs_of(alice)
    assert (run.id, run.status, run.model_calls, run.answer) == (
        run_id,
        "completed",
        2,
        "It is 18C and sunny in Paris.",
    )
    completions = [e.extensions for e in await stored_events(session_id) if e.is_runner_completion]
    assert [(c["run_id"], c["status"]) for c in completions] == [(run_id, "requires_action"), (run_id, "completed")]


async def test_streamed_a_stateless_client_resends_the_history_and_continues(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(
        ServerStep.calls(("get_weather", {"city": "Paris"}, "call_s1"), text="Checking."), "Sunny, 18C."
    )
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    stream = await client.chat.completions.create(
        model="support", messages=[QUESTION], stream=True, tools=[WEATHER_TOOL]
    )  # type: ignore[list-item]
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == "Checking."
    assert [(tc.index, tc.id, tc.function.name, tc.function.arguments) for tc in calls if tc.function] == [
        (0, "call_s1", "get_weather", json.dumps({"city": "Paris"}))
    ]
    assert finishes == ["tool_calls"]

    # No X-Session-Id: the client resends the whole history (the call, then its result). The
    # messages before the trailing result are the first run's chat, so the history fingerprint
    # matches that session, waiting on call_s1, and it continues with the result
    # (X-Session-Match: history); nothing is seeded again.
    stream = await client.chat.completions.create(
        model="support",
        stream=True,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        messages=[
            QUESTION,
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_s1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_s1", "content": "sunny, 18C"},
        ],
    )
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Sunny, 18C."
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    # The upstream saw the call as the agent's own, answered by the client's result.
    call_message, result = _tail(openai_server.requests[1], 2)
    assert [c["function"]["name"] for c in call_message["tool_calls"]] == ["get_weather"]
    assert (result["tool_call_id"], result["content"]) == ("call_s1", "sunny, 18C")
    openai_server.assert_consumed()
    # The history matched the session, so the result continued the run that paused on the call.
    [run] = await runs_of(alice)
    assert (run.status, run.model_calls) == ("completed", 2)


async def test_server_tools_of_the_same_step_run_on_the_server_and_only_the_client_calls_come_back(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(
        ServerStep.calls(
            ("lookup_ticket", {"ticket_id": "INC-1042"}, "call_srv"), ("get_weather", {"city": "Paris"}, "call_cli")
        ),
        "INC-1042 is a certificate expiry; Paris is sunny.",
    )
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    ask = {"role": "user", "content": "What is INC-1042, and the weather in Paris?"}
    raw = await client.chat.completions.with_raw_response.create(model="support", messages=[ask], tools=[WEATHER_TOOL])  # type: ignore[list-item]
    first = raw.parse()
    session_id = raw.headers["X-Session-Id"]
    assert first.choices[0].finish_reason == "tool_calls"
    assert [c.id for c in first.choices[0].message.tool_calls or []] == ["call_cli"]
    # The agent's own tool already ran, in this request.
    results = [e for e in await stored_events(session_id) if e.is_tool_result]
    assert [e.message.tool_call_id for e in results if e.message] == ["call_srv"]

    answer = await client.chat.completions.create(
        model="support",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        messages=[ask, {"role": "tool", "tool_call_id": "call_cli", "content": "sunny"}],
        extra_headers={"X-Session-Id": session_id},
    )
    assert answer.choices[0].message.content == "INC-1042 is a certificate expiry; Paris is sunny."
    sent = openai_server.requests[1]["messages"]
    round_ = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert [c["id"] for c in sent[round_]["tool_calls"]] == ["call_srv", "call_cli"]
    assert [m["tool_call_id"] for m in sent[round_ + 1 : round_ + 3]] == ["call_srv", "call_cli"]
    assert sent[round_ + 2]["content"] == "sunny"
    openai_server.assert_consumed()


@pytest.mark.parametrize(
    ("tool_choice", "sent"),
    [
        pytest.param("required", "required", id="required"),
        pytest.param(
            {"type": "function", "function": {"name": "get_weather"}},
            {"type": "function", "function": {"name": "get_weather"}},
            id="named-client-tool",
        ),
        pytest.param(
            {"type": "function", "function": {"name": "lookup_ticket"}},
            {"type": "function", "function": {"name": "lookup_ticket"}},
            id="named-agent-tool",
        ),
        pytest.param("auto", "auto", id="auto"),
    ],
)
async def test_tool_choice_reaches_the_upstream_for_the_first_step(
    alice: Any,
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
    tool_choice: Any,
    sent: Any,
) -> None:
    openai_server.script(ServerStep.call("lookup_ticket", {"ticket_id": "INC-7"}), "INC-7 is closed.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    answer = await client.chat.completions.create(
        model="support", messages=[{"role": "user", "content": "INC-7?"}], tools=[WEATHER_TOOL], tool_choice=tool_choice
    )  # type: ignore[list-item]
    assert answer.choices[0].message.content == "INC-7 is closed."
    assert openai_server.requests[0]["tool_choice"] == sent
    # Bound to the first step only: after the forced call, the model may answer.
    assert "tool_choice" not in openai_server.requests[1]


async def test_tool_choice_none_offers_no_tools(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Just text.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    answer = await client.chat.completions.create(
        model="support", messages=[{"role": "user", "content": "hi"}], tools=[WEATHER_TOOL], tool_choice="none"
    )  # type: ignore[list-item]
    assert answer.choices[0].message.content == "Just text."
    assert "tools" not in openai_server.requests[0] and "tool_choice" not in openai_server.requests[0]


@pytest.mark.parametrize(
    ("overrides", "param", "code"),
    [
        pytest.param(
            {"tools": [{"type": "function", "function": {"name": "lookup_ticket", "parameters": {"type": "object"}}}]},
            "tools[0].function.name",
            "tool_name_clash",
            id="clashes-with-a-server-tool",
        ),
        pytest.param(
            {"tools": [{"type": "function", "function": {"name": "get weather"}}]},
            "tools[0].function.name",
            "invalid_tools",
            id="bad-name",
        ),
        pytest.param(
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
            "tools[0].function.parameters.type",
            "invalid_tools",
            id="parameters-not-an-object",
        ),
        pytest.param(
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]},
            "tools[0].function.parameters",
            "invalid_tools",
            id="parameters-not-a-schema",
        ),
        pytest.param(
            {"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "tools[1].function.name", "invalid_tools", id="declared-twice"
        ),
        pytest.param(
            {"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name",
            "invalid_tool_choice",
            id="choice-names-no-tool",
        ),
        pytest.param({"tool_choice": "sometimes"}, "tool_choice", "invalid_tool_choice", id="choice-unknown-mode"),
    ],
)
async def test_bad_tools_are_a_400_naming_the_field_and_nothing_is_stored(
    alice: Any, overrides: dict[str, Any], param: str, code: str
) -> None:
    client = await client_for(alice)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="support", messages=[QUESTION], **overrides)
    body = refused.value.body
    assert isinstance(body, dict) and (body["param"], body["code"]) == (param, code), body
    assert await sessions_of(alice) == []


async def test_a_result_for_an_unknown_call_id_is_a_400_naming_it_and_nothing_is_stored(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.call("get_weather", {"city": "Paris"}, id="call_c1"))
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    raw = await client.chat.completions.with_raw_response.create(
        model="support", messages=[QUESTION], tools=[WEATHER_TOOL]
    )  # type: ignore[list-item]
    session_id = raw.headers["X-Session-Id"]
    before = await stored_events(session_id)

    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="support",
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            messages=[
                QUESTION,
                {"role": "tool", "tool_call_id": "call_c1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_zz", "content": "?"},
            ],
            extra_headers={"X-Session-Id": session_id},
        )
    body = refused.value.body
    assert isinstance(body, dict) and body["param"] == "messages[2].tool_call_id" and "call_zz" in body["message"], body
    assert body["code"] == "unknown_tool_call"
    assert len(await stored_events(session_id)) == len(before)  # not even the valid result
    assert len(await runs_of(alice)) == 1

    # Without a session: nothing is created either.
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(
            model="support", messages=[QUESTION, {"role": "tool", "tool_call_id": "call_nobody", "content": "?"}]
        )
    assert await sessions_of(alice) == [session_id]
    openai_server.assert_consumed()


async def test_a_tool_result_request_repeated_with_its_idempotency_key_gets_the_first_answer(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script(ServerStep.call("get_weather", {"city": "Paris"}, id="call_c1"), "Sunny.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    raw = await client.chat.completions.with_raw_response.create(
        model="support", messages=[QUESTION], tools=[WEATHER_TOOL]
    )  # type: ignore[list-item]
    session = {"X-Session-Id": raw.headers["X-Session-Id"]}
    answer = [{"role": "tool", "tool_call_id": "call_c1", "content": "sunny"}]
    key = {"Idempotency-Key": "answer-c1"}
    first = await client.chat.completions.create(
        model="support",
        messages=[QUESTION, *answer],  # type: ignore[list-item]
        tools=[WEATHER_TOOL],
        extra_headers={**session, **key},
    )  # type: ignore[list-item]
    again = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=[QUESTION, *answer],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        extra_headers={**session, **key},
    )
    assert first.choices[0].message.content == again.parse().choices[0].message.content == "Sunny."
    assert again.headers["Idempotent-Replayed"] == "true"
    # Another result under the same key is another request: refused.
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(
            model="support",
            tools=[WEATHER_TOOL],  # type: ignore[list-item]
            messages=[QUESTION, {"role": "tool", "tool_call_id": "call_c1", "content": "rain"}],
            extra_headers={**session, **key},
        )
    assert isinstance(refused.value.body, dict) and refused.value.body["code"] == "idempotency_key_reused"
    results = [e for e in await stored_events(session["X-Session-Id"]) if e.is_tool_result]
    assert [e.text for e in results] == ["sunny"]
    openai_server.assert_consumed()


async def test_client_tools_for_an_agent_that_is_not_an_llm_agent_are_a_400(alice: Any) -> None:
    client = await client_for(alice)
    with pytest.raises(openai.BadRequestError) as refused:  # the demo's troubleshoot agent is a graph
        await client.chat.completions.create(model="troubleshoot", messages=[QUESTION], tools=[WEATHER_TOOL])  # type: ignore[list-item]
    body = refused.value.body
    assert isinstance(body, dict) and (body["param"], body["code"]) == ("tools", "unsupported_client_tools"), body
    assert "graph" in body["message"]
    assert await sessions_of(alice) == []
