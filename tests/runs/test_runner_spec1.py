"""SPEC 1 runner rules (issue 26): empty roles, the user-message rewriter, start failures,
what the completion event says, and interrupted-assistant persistence. Each test is named
after its rule and drives the public Runner API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.attachments import AttachmentLimits, upload_part
from runs.core.errors import UsageError
from runs.core.invocation import Invocation, RunOptions
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.rewriting import REWRITTEN, RewriteContext
from runs.core.runner import INTERRUPTED_ASSISTANT, Runner
from runs.core.tools.base import ToolContext
from runs.core.tools.function import FunctionTool
from runs.core.trace import FINAL_CHOICES, FINAL_STATE_DELTA
from sessions_app.core.events import REPAIRED_ERROR_TEXT, Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "t"


def remember_ticket(tool_context: ToolContext, ticket_id: str) -> dict[str, str]:
    """Remember the ticket the user asked about.

    Args:
        ticket_id: the ticket's id
    """
    tool_context.state_delta["last_ticket"] = ticket_id
    return {"id": ticket_id, "status": "open"}


def make_runner(model: ScriptedModel, **runner_kwargs: Any) -> tuple[Runner, InMemorySessionService]:
    service = InMemorySessionService()
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(remember_ticket)])
    return Runner(app=APP, agents=[agent], session_service=service, **runner_kwargs), service


async def ledger(service: InMemorySessionService, session_id: str, user: str = "alice") -> list[Event]:
    return await service.list_events(SessionKey(app=APP, user_id=user, session_id=session_id), limit=1000)


# -- 1.2.1 -----------------------------------------------------------------------------------------


async def test_spec_1_2_1_a_message_with_an_empty_role_and_a_payload_is_a_user_message() -> None:
    model = ScriptedModel.of("Hello.", "Taken.")
    runner, service = make_runner(model)

    handle = await runner.start(user_id="alice", message=Message(role="", content="hi"))  # type: ignore[arg-type]
    record = await handle.wait()

    assert record.status == "completed"
    stored = await ledger(service, handle.session_id)
    assert (stored[0].author, stored[0].role, stored[0].text) == ("user", "user", "hi")
    assert model.requests[0].messages[-1].role == "user" and model.requests[0].messages[-1].content == "hi"
    # Without a payload it is still refused, and a message with another role too.
    with pytest.raises(UsageError):
        await runner.start(user_id="alice", message=Message(role="", content=""))  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        await runner.start(user_id="alice", message=Message(role="assistant", content="hi"))


# -- 1.2.8 / 1.4 -----------------------------------------------------------------------------------


async def test_spec_1_2_8_a_rewriter_turns_one_message_into_several_current_turn_messages() -> None:
    seen: list[RewriteContext] = []

    async def expand(context: RewriteContext, message: Message) -> Sequence[Message]:
        seen.append(context)
        return [
            Message(role="user", content=f"(context) ticket INC-7 belongs to {context.user_id}"),
            Message(role="", content=""),  # no payload: not persisted  # type: ignore[arg-type]
            Message(role="", content=message.content.upper()),  # type: ignore[arg-type]
        ]

    model = ScriptedModel.of("Noted.")
    runner, service = make_runner(model, user_message_rewriter=expand)
    handle = await runner.start(user_id="alice", message="check inc-7")
    assert (await handle.wait()).status == "completed"

    assert seen[0].agent_name == "support" and seen[0].session_id == handle.session_id
    assert handle.invocation.message.content == "CHECK INC-7"  # the last is the invocation message
    stored = await ledger(service, handle.session_id)
    turn = [e for e in stored if e.role == "user"]
    assert [e.text for e in turn] == ["(context) ticket INC-7 belongs to alice", "CHECK INC-7"]
    assert all(e.extensions.get(REWRITTEN) is True and e.invocation_id == handle.invocation.invocation_id for e in turn)
    assert [m.content for m in model.requests[0].messages if m.role == "user"] == [
        "(context) ticket INC-7 belongs to alice",
        "CHECK INC-7",
    ]


@pytest.mark.parametrize("returned", [[], [Message(role="assistant", content="last is not the user's")], "text"])
async def test_spec_1_2_8_a_rewriter_must_return_at_least_one_message_ending_with_the_users(returned: Any) -> None:
    runner, service = make_runner(ScriptedModel.of("never"), user_message_rewriter=lambda context, message: returned)

    with pytest.raises(UsageError):
        await runner.start(user_id="alice", message="hi", session_id="s-rewrite")

    # A refused start leaves no session and no run behind.
    assert await service.get_session(SessionKey(app=APP, user_id="alice", session_id="s-rewrite")) is None
    assert runner.active_run_ids() == []


# -- 1.2.13 ----------------------------------------------------------------------------------------


async def test_spec_1_2_13_a_start_failure_persists_a_run_error_event_before_the_run_is_unregistered() -> None:
    # A runner without an artifact service cannot store an upload: the start fails after
    # the run is registered, before the turn is written.
    runner, service = make_runner(ScriptedModel.of("never"))
    upload = upload_part(b"line one\nline two\n", limits=AttachmentLimits(), field="attachments[0]", name="log.txt")
    with pytest.raises(UsageError, match="no artifact service"):
        await runner.start(
            user_id="alice", message=Message(role="user", content="see the log", parts=(upload,)), session_id="s-fail"
        )

    stored = await ledger(service, "s-fail")
    assert [e.role for e in stored] == ["assistant", "system"]  # the turn was never written
    error_event, completion = stored
    assert error_event.is_error and error_event.error is not None
    assert (error_event.error.type, error_event.error.code) == ("run_error", "start_failed")
    assert "no artifact service" in error_event.error.message
    assert error_event.text == REPAIRED_ERROR_TEXT  # repaired, so visible in history (SPEC 1.12)
    assert completion.is_runner_completion and completion.extensions["status"] == "failed"
    assert completion.error is None  # the run_error event said it (SPEC 1.9 step 1)
    record = await runner.status(completion.extensions["run_id"])
    assert record is not None and record.status == "failed"
    assert record.error is not None and record.error["type"] == "start_failed"
    assert runner.active_run_ids() == []


# -- 1.6.6 / 1.9.1 / 1.9.2 ------------------------------------------------------------------------


async def test_spec_1_9_2_the_completion_carries_the_final_state_delta_and_choices() -> None:
    model = ScriptedModel.of(ScriptStep.call("remember_ticket", {"ticket_id": "INC-9"}), "INC-9 is open.")
    runner, service = make_runner(model)
    handle = await runner.start(user_id="alice", message="INC-9?")
    await handle.wait()

    stored = await ledger(service, handle.session_id)
    answer, completion = stored[-2], stored[-1]
    assert completion.is_runner_completion and completion.error is None
    assert completion.extensions[FINAL_STATE_DELTA] == {"last_ticket": "INC-9"}
    assert completion.extensions[FINAL_CHOICES] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "INC-9 is open."},
            "finish_reason": "stop",
            "event_id": answer.id,
        }
    ]
    # Carried, not applied again: session state holds the tool's write once.
    session = await service.get_session(SessionKey(app=APP, user_id="alice", session_id=handle.session_id))
    assert session is not None and session.state["last_ticket"] == "INC-9"


async def test_spec_1_9_1_the_error_is_not_copied_onto_the_completion_after_a_terminal_error_event() -> None:
    class Crashing:
        name, description, kind, model_name = "crash", "", "test", None

        async def run(self, invocation: Invocation) -> AsyncIterator[Event]:
            yield Event(author="crash", message=Message(role="assistant", content="starting"), done=False)
            raise RuntimeError("wires crossed")

    service = InMemorySessionService()
    runner = Runner(app=APP, agents=[Crashing()], session_service=service)
    handle = await runner.start(user_id="alice", message="go")
    record = await handle.wait()

    stored = await ledger(service, handle.session_id)
    assert stored[-2].is_error and stored[-2].error is not None and stored[-2].error.type == "flow_error"
    assert stored[-1].is_runner_completion and stored[-1].error is None
    assert stored[-1].extensions["status"] == "failed"
    assert FINAL_CHOICES not in stored[-1].extensions  # no answer: the run ended on its error
    assert record.error is not None and record.error["type"] == "flow_error"  # the record still says why


# -- 1.10 ------------------------------------------------------------------------------------------


async def _cancel_mid_answer(runner: Runner, **start: Any) -> str:
    handle = await runner.start(user_id="alice", message="talk a lot", stream=True, **start)
    seen = 0
    async for _event in handle.events():
        seen += 1
        if seen == 4:
            assert runner.cancel(handle.run_id)
    assert (await handle.wait()).status == "cancelled"
    return handle.session_id


async def test_spec_1_10_a_cancelled_streaming_answer_is_not_kept_by_default() -> None:
    runner, service = make_runner(ScriptedModel.of(ScriptStep.answer("word " * 200, chunk_size=5, delay_s=0.02)))
    session_id = await _cancel_mid_answer(runner)
    assert [e.role for e in await ledger(service, session_id)] == ["user", "system"]


@pytest.mark.parametrize("by", ["runner", "run_options"])
async def test_spec_1_10_a_cancelled_streaming_answer_can_be_kept_as_a_marked_partial_message(by: str) -> None:
    model = ScriptedModel.of(ScriptStep.answer("word " * 200, chunk_size=5, delay_s=0.02), "Go on from there.")
    if by == "runner":
        runner, service = make_runner(model, persist_interrupted_assistant=True)
        session_id = await _cancel_mid_answer(runner)
    else:
        runner, service = make_runner(model)
        session_id = await _cancel_mid_answer(runner, options=RunOptions(persist_interrupted_assistant=True))

    stored = await ledger(service, session_id)
    assert [e.role for e in stored] == ["user", "assistant", "system"]
    kept = stored[1]
    assert kept.extensions[INTERRUPTED_ASSISTANT] is True and kept.finish_reason == "cancelled"
    assert kept.text.startswith("word word") and len(kept.text) < len("word " * 200)
    # The next turn sees the cut-short answer as history.
    await (await runner.start(user_id="alice", message="continue", session_id=session_id)).wait()
    assert [m.role for m in model.requests[-1].messages][-2:] == ["assistant", "user"]
    assert model.requests[-1].messages[-2].content == kept.text


@pytest.mark.parametrize("setting", [False, True])
def test_spec_1_10_the_site_setting_chooses_the_runners_default(setting: bool) -> None:
    from django.test import override_settings

    from agentsite.composition import build_runner

    with override_settings(AGENTSITE_PERSIST_INTERRUPTED_ASSISTANT=setting):
        assert build_runner(ScriptedModel.of("unused")).persist_interrupted_assistant is setting
