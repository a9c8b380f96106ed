"""AG-UI steering (SPEC 1.5): a RunAgentInput that opts in (`forwardedProps.agentsite.steer`)
goes into the thread's active run instead of a 409, over Django's async test client."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from tests.runs.test_agui_endpoint import (  # noqa: F401  # fixtures, used by name
    alice_token,
    parse_sse,
    post,
    read_all,
    read_until,
    run_input,
    types,
    wait_until_ended,
)

pytestmark = pytest.mark.django_db(transaction=True)

STEER = {"agentsite": {"steer": True}}


def steering_input(thread_id: str, text: str, **props: Any) -> dict[str, Any]:
    body = run_input(thread_id, {"id": "u2", "role": "user", "content": text}, run_id="client-run-2")
    body["forwardedProps"] = props or STEER
    return body


def slow_tool_step() -> ScriptStep:
    """A model step that talks for a while before it calls a tool."""
    return dataclasses.replace(
        ScriptStep.call("lookup_ticket", {"ticket_id": "T-100"}, id="call_1"),
        text="Let me look that ticket up. " * 4,
        chunk_size=4,
        delay_s=0.08,
    )


async def test_an_opted_in_input_on_a_busy_thread_steers_its_run_and_streams_it(
    alice_token: str,  # noqa: F811
    use_model: Callable[[Model], None],
) -> None:
    model = ScriptedModel.of(slow_tool_step(), "T-100 and T-200 are open.")
    use_model(model)
    first = await post("/agui/support", run_input("steered"), alice_token)
    stream = first.streaming_content.__aiter__()
    run_id = (await read_until(stream, "TEXT_MESSAGE_CONTENT"))[0]["runId"]

    steered = await post("/agui/support", steering_input("steered", "and T-200?"), alice_token)
    assert steered.status_code == 200, steered.content
    events = await read_all(steered)
    assert events[0]["type"] == "RUN_STARTED" and events[0]["runId"] == run_id  # the same run
    queued = events[1]
    assert queued["type"] == "CUSTOM" and queued["name"] == "agentsite.message.queued"
    assert queued["value"]["runId"] == run_id and queued["value"]["message"] == "and T-200?"
    consumed = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "agentsite.message.consumed")
    assert consumed["value"] == {
        "id": queued["value"]["id"],
        "messageId": consumed["value"]["messageId"],
        "state": "consumed",
    }
    user = [
        e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT" and e["messageId"] == consumed["value"]["messageId"]
    ]
    assert [e["delta"] for e in user] == ["and T-200?"]
    kinds = types(events)
    assert kinds.index("TOOL_CALL_RESULT") < events.index(user[0]) and kinds[-1] == "RUN_FINISHED"
    # The first stream ends with the same run; the model saw the message in that run's next step.
    assert types(parse_sse([chunk async for chunk in stream]))[-1] == "RUN_FINISHED"
    assert await wait_until_ended(run_id) == "completed"
    assert model.requests[1].messages[-1].content == "and T-200?"
    assert model.requests[1].messages[-2].role == "tool"


async def test_without_an_active_run_an_opted_in_input_starts_a_run(
    alice_token: str,  # noqa: F811
    use_model: Callable[[Model], None],
) -> None:
    use_model(ScriptedModel.of("Hello."))
    response = await post("/agui/support", steering_input("idle", "hi"), alice_token)
    assert response.status_code == 200
    events = await read_all(response)
    assert types(events)[-1] == "RUN_FINISHED"
    assert not any(e["type"] == "CUSTOM" and e["name"].startswith("agentsite.message") for e in events)


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"agentsite": {"steer": "yes"}}, "forwardedProps.agentsite.steer"),
        ({"agentsite": True}, "forwardedProps.agentsite"),
    ],
)
async def test_a_bad_steering_flag_is_422_naming_it(alice_token: str, props: dict[str, Any], field: str) -> None:  # noqa: F811
    response = await post("/agui/support", steering_input("t", "hi", **props), alice_token)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field
