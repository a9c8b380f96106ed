"""Client-side tools in the core (issue 20, item 2), through the Runner API with the scripted
model: `RunOptions.client_tools` are offered beside the agent's own, a call of one pauses the
run (`requires_action`) with the call waiting in the ledger, `tool_results` continue the same
run; `tool_choice` binds the first model step and `none` offers nothing."""

from __future__ import annotations

from typing import Any

from runs.core.agents.llm import LLMAgent
from runs.core.invocation import RunOptions
from runs.core.llm.base import ToolChoice, ToolSpec
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.client import CLIENT_CALLS_EXTENSION
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

CONFIRM = ToolSpec(
    name="confirm",
    description="Ask the user in the browser.",
    parameters={"type": "object", "properties": {"what": {"type": "string"}}},
)


def lookup(ticket_id: str) -> str:
    """Look a ticket up.

    Args:
        ticket_id: the ticket
    """
    return f"{ticket_id}: open"


def make(*steps: Any) -> tuple[Runner, ScriptedModel]:
    model = ScriptedModel.of(*steps)
    agent = LLMAgent(name="a", model=model, tools=[FunctionTool(lookup)])
    return Runner(app="t", agents=[agent], session_service=InMemorySessionService()), model


async def run(runner: Runner, **kwargs: Any) -> tuple[str, list[Event]]:
    handle = await runner.start(user_id="u", stream=True, **kwargs)
    return handle.session_id, [e async for e in handle.events() if not e.partial]


async def test_a_client_tool_call_pauses_the_run_and_its_result_continues_the_same_run() -> None:
    runner, model = make(
        ScriptStep.calls(("lookup", {"ticket_id": "T1"}, "c_srv"), ("confirm", {"what": "T1"}, "c_cli")),
        "T1 is open and you confirmed.",
    )
    options = RunOptions(client_tools=(CONFIRM,))
    session_id, events = await run(runner, message="check T1 then ask me", options=options)

    assert {t.name for t in model.requests[0].tools} == {"lookup", "confirm"}
    step = next(e for e in events if e.is_tool_call)
    assert step.extensions[CLIENT_CALLS_EXTENSION] == ["c_cli"]
    # The agent's own call ran; the client's did not, and the run ended without a model step more.
    assert [e.message.tool_call_id for e in events if e.is_tool_result and e.message] == ["c_srv"]
    pause = events[-1]
    assert pause.is_runner_completion and pause.extensions["status"] == "requires_action"
    assert pause.extensions[CLIENT_CALLS_EXTENSION] == ["c_cli"]
    run_id = pause.extensions["run_id"]
    paused = await runner.run_store.get(run_id)
    assert paused is not None and (paused.status, paused.ended_at, paused.model_calls) == ("requires_action", None, 1)
    assert len(model.requests) == 1

    _, events = await run(
        runner,
        session_id=session_id,
        options=options,
        tool_results=[Message(role="tool", content="confirmed", tool_call_id="c_cli")],
    )
    assert [e.text for e in events if e.is_final_response] == ["T1 is open and you confirmed."]
    # The same run went on and completed once; its record counts both segments.
    assert {e.extensions.get("run_id") for e in events if e.is_runner_completion} == {run_id}
    done = await runner.run_store.get(run_id)
    assert done is not None and (done.status, done.model_calls, done.tool_calls) == ("completed", 2, 2)
    assert done.answer == "T1 is open and you confirmed." and done.ended_at is not None
    assert done.trace is not None and [t["status"] for t in done.trace["earlier_segments"]] == ["requires_action"]
    session = await runner.session_service.get_session(SessionKey(app="t", user_id="u", session_id=session_id))
    assert session is not None
    assert [e.extensions["status"] for e in session.events if e.is_runner_completion] == [
        "requires_action",
        "completed",
    ]
    calls, *results = [m for m in model.requests[1].messages if m.tool_calls or m.role == "tool"]
    assert [c.id for c in calls.tool_calls] == ["c_srv", "c_cli"]
    assert [(r.tool_call_id, r.content) for r in results] == [("c_srv", "T1: open"), ("c_cli", "confirmed")]
    model.assert_consumed()


async def test_tool_choice_binds_the_first_step_and_none_offers_no_tools() -> None:
    runner, model = make(ScriptStep.call("lookup", {"ticket_id": "T1"}), "T1 is open.", "Plain text.")
    await run(
        runner, message="T1?", options=RunOptions(client_tools=(CONFIRM,), tool_choice=ToolChoice(mode="required"))
    )
    assert [r.tool_choice for r in model.requests] == [ToolChoice(mode="required"), None]

    await run(
        runner, message="no tools", options=RunOptions(client_tools=(CONFIRM,), tool_choice=ToolChoice(mode="none"))
    )
    assert model.requests[2].tools == () and model.requests[2].tool_choice is None
    model.assert_consumed()
