"""Issue 25, item 9: AG-UI frontend tools (`RunAgentInput.tools`), as CopilotKit uses them.

They are offered to the model beside the agent's own; when the model calls one, the stream
shows the call and ends with RUN_FINISHED, the run paused for the client (`requires_action`);
the client's next input on the thread carries the `tool` message with the result, and the same
run continues with it (issue 20). Through `POST /agui/<agent>`, the scripted OpenAI-compatible upstream recording what it
received."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from tests.runs.test_agui_endpoint import alice_token, ledger, post, read_all, run_input, types  # noqa: F401
from tests.support.openai_asgi import agents_on
from tests.support.openai_server import ScriptedOpenAIServer, ServerStep

pytestmark = pytest.mark.django_db(transaction=True)

CONFIRM = {
    "name": "confirm_restart",
    "description": "Ask the operator in the browser to confirm a restart.",
    "parameters": {"type": "object", "properties": {"service": {"type": "string"}}, "required": ["service"]},
}
ASK = {"id": "u1", "role": "user", "content": "Restart the payments service, after I confirm."}


@pytest.fixture(autouse=True)
def _no_auto_memory(settings: Any) -> None:
    settings.AGENTSITE_MEMORY_AUTO = False  # its extraction would take a scripted answer


def _with_tools(body: dict[str, Any], *tools: dict[str, Any]) -> dict[str, Any]:
    return {**body, "tools": list(tools)}


async def test_a_frontend_tool_call_ends_the_run_and_the_clients_result_continues_it(
    alice_token: str,  # noqa: F811
    openai_server: ScriptedOpenAIServer,
    use_model: Callable[[Model], None],
) -> None:
    openai_server.script(
        ServerStep.call("confirm_restart", {"service": "payments"}, id="call_fe1"),
        "Confirmed: restarting payments now.",
    )
    agents_on(openai_server, use_model)

    response = await post("/agui/support", _with_tools(run_input("fe-thread", ASK), CONFIRM), alice_token)
    assert response.status_code == 200, response.content
    events = await read_all(response)
    kinds = types(events)
    # The call is streamed, nobody answers it on the server, and the run finishes.
    assert [k for k in kinds if k.startswith("TOOL_CALL")] == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert (start["toolCallId"], start["toolCallName"]) == ("call_fe1", "confirm_restart")
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"service": "payments"}
    assert kinds[-1] == "RUN_FINISHED"
    run_id = next(e["runId"] for e in events if e["type"] == "RUN_STARTED")
    # Offered to the model beside the agent's own tools, with the client's schema.
    offered = {t["function"]["name"]: t["function"] for t in openai_server.requests[0]["tools"]}
    assert {"confirm_restart", "lookup_ticket"} <= set(offered)
    assert offered["confirm_restart"]["parameters"] == CONFIRM["parameters"]
    assert not [e for e in await ledger("fe-thread") if e.is_tool_result]

    # CopilotKit's next input: the history with the call, then the tool message.
    follow_up = run_input(
        "fe-thread",
        ASK,
        {
            "id": start["parentMessageId"],
            "role": "assistant",
            "toolCalls": [
                {"id": "call_fe1", "type": "function", "function": {"name": "confirm_restart", "arguments": args}}
            ],
        },
        {"id": "tool-1", "role": "tool", "toolCallId": "call_fe1", "content": "confirmed by the operator"},
        run_id="client-run-2",
    )
    response = await post("/agui/support", _with_tools(follow_up, CONFIRM), alice_token)
    assert response.status_code == 200, response.content
    events = await read_all(response)
    kinds = types(events)
    assert kinds[:2] == ["RUN_STARTED", "TOOL_CALL_RESULT"] and kinds[-1] == "RUN_FINISHED"
    assert next(e["runId"] for e in events if e["type"] == "RUN_STARTED") == run_id  # the same run
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Confirmed: restarting payments now."
    # The model's next step saw its call and the client's result.
    call_message, result = openai_server.requests[1]["messages"][-2:]
    assert [c["id"] for c in call_message["tool_calls"]] == ["call_fe1"]
    assert (result["tool_call_id"], result["content"]) == ("call_fe1", "confirmed by the operator")
    openai_server.assert_consumed()
    stored = [e for e in await ledger("fe-thread") if e.is_tool_result]
    assert [(e.author, e.message.tool_name, e.text) for e in stored if e.message] == [
        ("support", "confirm_restart", "confirmed by the operator")
    ]
    assert [
        (e.extensions["run_id"], e.extensions["status"]) for e in await ledger("fe-thread") if e.is_runner_completion
    ] == [(run_id, "requires_action"), (run_id, "completed")]


@pytest.mark.parametrize(
    ("tool", "field", "code"),
    [
        pytest.param(
            {**CONFIRM, "name": "lookup_ticket"}, "tools.0.name", "tool_name_clash", id="clashes-with-the-agents"
        ),
        pytest.param({**CONFIRM, "name": "confirm restart"}, "tools.0.name", "invalid_tools", id="bad-name"),
        pytest.param(
            {**CONFIRM, "parameters": {"type": "array"}},
            "tools.0.parameters.type",
            "invalid_tools",
            id="parameters-not-an-object",
        ),
    ],
)
async def test_a_bad_frontend_tool_is_a_400_naming_it_and_nothing_is_stored(
    alice_token: str,  # noqa: F811
    tool: dict[str, Any],
    field: str,
    code: str,
) -> None:
    response = await post("/agui/support", _with_tools(run_input("fe-bad", ASK), tool), alice_token)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["field"]) == (code, field), error
    assert await ledger("fe-bad") == []
