"""Issue 25, items 1 and 10: a history with tool turns (every Agents SDK handoff, every
LangGraph ReAct loop that ran local tools first) is accepted on /v1; tool rounds are stored
as tool-call and tool-result events, and calls of tools the agent does not have are shown
to it as context, never as its own calls. `models.retrieve` answers for agents and 404s
otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from runs.core.llm.base import Model
from tests.support.openai_asgi import agents_on, client_for, sessions_of, stored_events
from tests.support.openai_server import ScriptedOpenAIServer

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER_CALL = {
    "id": "call_w1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
}
REACT_HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "Let me look that up.", "tool_calls": [WEATHER_CALL]},
    {"role": "tool", "tool_call_id": "call_w1", "content": "18C and sunny"},
    {"role": "assistant", "content": "It is 18C and sunny in Paris."},
    {"role": "user", "content": "Should I cycle to work then?"},
]


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


async def test_a_react_history_with_client_tool_turns_is_stored_and_shown_to_the_agent_as_context(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Yes, cycle: it is dry and mild.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)

    raw = await client.chat.completions.with_raw_response.create(model="support", messages=REACT_HISTORY)
    assert raw.parse().choices[0].message.content == "Yes, cycle: it is dry and mild."
    openai_server.assert_consumed()

    # The ledger holds the client's tool round as a call and a result, authored by the client.
    stored = [e for e in await stored_events(raw.headers["X-Session-Id"]) if e.extensions.get("seed")]
    call = next(e for e in stored if e.is_tool_call)
    result = next(e for e in stored if e.is_tool_result)
    assert call.author == result.author == "client"
    assert call.message is not None and [(c.id, c.name) for c in call.message.tool_calls] == [
        ("call_w1", "get_weather")
    ]
    assert result.object == "tool.response" and result.message is not None
    assert (result.message.tool_call_id, result.message.tool_name, result.text) == (
        "call_w1",
        "get_weather",
        "18C and sunny",
    )
    assert [e.text for e in stored if e.author == "support" and e.role == "assistant"] == [
        "Let me look that up.",
        "It is 18C and sunny in Paris.",
    ]

    # The upstream saw no call of a tool the agent lacks: the round came as context, in order.
    sent = openai_server.requests[0]
    assert not any(m["role"] == "tool" or m.get("tool_calls") for m in sent["messages"])
    assert "get_weather" not in {t["function"]["name"] for t in sent.get("tools", [])}
    shown = [(m["role"], m["content"]) for m in sent["messages"] if m["role"] != "system"]
    assert shown == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "Let me look that up."),
        (
            "user",
            'For context: [client] called tool `get_weather` with arguments {"city": "Paris"}.\n'
            "For context: [client] tool `get_weather` (call call_w1) returned: 18C and sunny",
        ),
        ("assistant", "It is 18C and sunny in Paris."),
        ("user", "Should I cycle to work then?"),
    ]


async def test_a_seeded_call_of_a_tool_the_agent_has_stays_its_own_call_beside_a_client_call(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("INC-1042 was a certificate expiry.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    ticket_call = {
        "id": "call_t1",
        "type": "function",
        "function": {"name": "lookup_ticket", "arguments": json.dumps({"ticket_id": "INC-1042"})},
    }
    await client.chat.completions.create(
        model="support",
        messages=[
            {"role": "user", "content": "What was INC-1042, and the weather?"},
            {"role": "assistant", "content": "Looking both up.", "tool_calls": [ticket_call, WEATHER_CALL]},
            {"role": "tool", "tool_call_id": "call_w1", "content": "18C and sunny"},
            {"role": "tool", "tool_call_id": "call_t1", "content": "INC-1042: certificate expired"},
            {"role": "user", "content": "Summarise."},
        ],
    )
    sent = [m for m in openai_server.requests[0]["messages"] if m["role"] != "system"]
    # The support agent has lookup_ticket: its call and result are shown as its own round;
    # get_weather it lacks: that call and its result come as context after it.
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user", "user"]
    assert sent[1]["content"] == "Looking both up."
    assert [c["function"]["name"] for c in sent[1]["tool_calls"]] == ["lookup_ticket"]
    assert (sent[2]["tool_call_id"], sent[2]["content"]) == ("call_t1", "INC-1042: certificate expired")
    assert "get_weather" in sent[3]["content"] and "18C and sunny" in sent[3]["content"]
    openai_server.assert_consumed()


async def test_the_legacy_function_call_grammar_is_accepted_too(
    alice: Any, openai_server: ScriptedOpenAIServer, use_model: Callable[[Model], None]
) -> None:
    openai_server.script("Ticket INC-7 is closed.")
    agents_on(openai_server, use_model)
    client = await client_for(alice)
    raw = await client.chat.completions.with_raw_response.create(
        model="support",
        messages=[
            {"role": "user", "content": "Is INC-7 closed?"},
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "crm_lookup", "arguments": '{"id": "INC-7"}'},
            },
            {"role": "function", "name": "crm_lookup", "content": "status: closed"},
            {"role": "user", "content": "So, closed?"},
        ],
    )
    assert raw.http_response.status_code == 200
    context = [m["content"] for m in openai_server.requests[0]["messages"] if "For context" in (m["content"] or "")]
    assert context == [
        'For context: [client] called tool `crm_lookup` with arguments {"id": "INC-7"}.\n'
        "For context: [client] tool `crm_lookup` (call function_call_1) returned: status: closed"
    ]


@pytest.mark.parametrize(
    ("messages", "param", "code"),
    [
        pytest.param(
            [
                {"role": "user", "content": "hi"},
                {"role": "tool", "tool_call_id": "call_x", "content": "42"},
                {"role": "user", "content": "and?"},
            ],
            "messages[1].tool_call_id",
            None,
            id="result-without-call",
        ),
        pytest.param(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [WEATHER_CALL]},
                {"role": "tool", "tool_call_id": "call_w1", "content": "18C"},
                {"role": "tool", "tool_call_id": "call_w1", "content": "18C again"},
                {"role": "user", "content": "and?"},
            ],
            "messages[3].tool_call_id",
            None,
            id="answered-twice",
        ),
        pytest.param(
            [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}, {"role": "user", "content": "and?"}],
            "messages[1].tool_call_id",
            None,
            id="result-without-id",
        ),
        pytest.param(
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"arguments": "{}"}}],
                },
                {"role": "user", "content": "and?"},
            ],
            "messages[1].tool_calls[0].function.name",
            None,
            id="call-without-name",
        ),
        pytest.param(
            [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [{**WEATHER_CALL, "function": {"name": "f", "arguments": {"a": 1}}}],
                },
                {"role": "user", "content": "and?"},
            ],
            "messages[1].tool_calls[0].function.arguments",
            None,
            id="arguments-not-json-text",
        ),
        pytest.param(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [WEATHER_CALL]},
                {"role": "tool", "tool_call_id": "call_zz", "content": "18C"},
            ],
            "messages[2].tool_call_id",
            "unknown_tool_call",
            id="client-answers-no-call-last",
        ),
    ],
)
async def test_a_tool_history_that_does_not_hold_together_is_refused_naming_the_message(
    alice: Any, messages: list[dict[str, Any]], param: str, code: str | None
) -> None:
    client = await client_for(alice)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.chat.completions.create(model="support", messages=messages)  # type: ignore[arg-type]  # bad on purpose
    body = refused.value.body
    assert isinstance(body, dict) and body["param"] == param, body
    if code is not None:
        assert body["code"] == code and "'call_zz' answers no tool call" in body["message"]  # issue 20: client tools
    assert await sessions_of(alice) == []  # nothing stored from a refused request


async def test_models_retrieve_names_an_agent_and_404s_an_unknown_id(alice: Any) -> None:
    client = await client_for(alice)
    model = await client.models.retrieve("support")
    assert (model.id, model.object, model.owned_by) == ("support", "model", "agentsite")
    assert model.model_extra is not None and model.model_extra["backing_model"]
    with pytest.raises(openai.NotFoundError) as unknown:
        await client.models.retrieve("gpt-17")
    assert unknown.value.body == {
        "message": "the model 'gpt-17' does not exist (models are agent names; see /v1/models)",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    anonymous = openai.AsyncOpenAI(
        base_url="http://localhost/v1", api_key="wrong", max_retries=0, http_client=client._client
    )
    with pytest.raises(openai.AuthenticationError):
        await anonymous.models.retrieve("support")
