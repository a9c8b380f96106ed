"""Runner order and persistence rules (SPEC 1), driven through the public Runner API."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, ModelError, TransientModelError, UsageError
from runs.core.invocation import Invocation
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import REPAIRED_ERROR_TEXT, Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, SessionKey

APP = "t"


def lookup_ticket(ticket_id: str) -> dict[str, str]:
    """Look up a ticket.

    Args:
        ticket_id: the ticket's id
    """
    if ticket_id == "BAD":
        raise LookupError(f"no ticket {ticket_id!r}")
    return {"id": ticket_id, "status": "open"}


def make_runner(model: ScriptedModel, **agent_kwargs: Any) -> tuple[Runner, InMemorySessionService]:
    service = InMemorySessionService()
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(lookup_ticket)], **agent_kwargs)
    return Runner(app=APP, agents=[agent], session_service=service), service


async def ledger(service: InMemorySessionService, user: str, session_id: str) -> list[Event]:
    return await service.list_events(SessionKey(app=APP, user_id=user, session_id=session_id), limit=1000)


async def collect(runner: Runner, **kwargs: Any) -> list[Event]:
    return [e async for e in runner.run(**kwargs)]


async def test_a_turn_persists_user_message_tool_steps_answer_and_completion_in_order() -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1"}), "Ticket INC-1 is open.")
    runner, service = make_runner(model)
    handle = await runner.start(user_id="alice", message="status of INC-1?", stream=True)
    events = [e async for e in handle.events()]
    model.assert_consumed()

    assert events[-1].is_runner_completion and events[-1].extensions["status"] == "completed"
    stored = await ledger(service, "alice", handle.session_id)
    kinds = [(e.author, e.role, e.object) for e in stored]
    assert kinds == [
        ("user", "user", "chat.completion"),
        ("support", "assistant", "chat.completion"),
        ("support", "tool", "tool.response"),
        ("support", "assistant", "chat.completion"),
        (APP, "system", "runner.completion"),
    ]
    assert [e.seq for e in stored] == [1, 2, 3, 4, 5]
    assert json.loads(stored[2].text) == {"id": "INC-1", "status": "open"}
    assert stored[3].text == "Ticket INC-1 is open."
    # Every stored event carries the run's identity.
    assert len({e.invocation_id for e in stored}) == 1 and len({e.request_id for e in stored}) == 1


async def test_streaming_deltas_are_emitted_but_never_persisted() -> None:
    model = ScriptedModel.of(ScriptStep.answer("a fairly long answer text", chunk_size=4))
    runner, service = make_runner(model)
    events = await collect(runner, user_id="alice", message="hi")
    partials = [e for e in events if e.partial]
    assert "".join(e.text for e in partials) == "a fairly long answer text"
    assert len(partials) >= 5
    session = (await service.list_sessions(app=APP, user_id="alice"))[0]
    stored_ids = {e.id for e in await ledger(service, "alice", session.id)}
    assert not stored_ids & {e.id for e in partials}


async def test_complete_events_are_persisted_before_they_are_emitted() -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket_id": "A"}), "done")
    runner, service = make_runner(model)
    seen_unpersisted: list[str] = []
    async for event in runner.run(user_id="alice", message="go"):
        if event.partial:
            continue
        session = (await service.list_sessions(app=APP, user_id="alice"))[0]
        if event.id not in {e.id for e in await ledger(service, "alice", session.id)}:
            seen_unpersisted.append(event.id)
        assert event.seq is not None
    assert seen_unpersisted == []


async def test_user_message_is_in_the_ledger_before_the_agent_starts() -> None:
    observed: dict[str, Any] = {}

    class Probe:
        name, description, kind, model_name = "probe", "", "test", None

        async def run(self, invocation: Invocation) -> AsyncIterator[Event]:
            stored = await invocation.session_service.list_events(invocation.session.key)
            observed["stored"] = [e.text for e in stored]
            observed["visible"] = [e.text for e in invocation.session.events]
            yield Event(author="probe", message=Message(role="assistant", content="ok"), done=True)

    service = InMemorySessionService()
    runner = Runner(app=APP, agents=[Probe()], session_service=service)
    await collect(runner, user_id="alice", message="first words")
    assert observed == {"stored": ["first words"], "visible": ["first words"]}


async def test_unknown_agent_is_refused_before_anything_is_written() -> None:
    runner, service = make_runner(ScriptedModel.of())
    session = await service.create_session(app=APP, user_id="alice")
    with pytest.raises(AgentNotFoundError, match="'nobody'"):
        await runner.start(user_id="alice", session_id=session.id, message="hi", agent="nobody")
    assert await ledger(service, "alice", session.id) == []


@pytest.mark.parametrize("message", ["", "   \n"])
async def test_empty_message_is_refused(message: str) -> None:
    runner, _ = make_runner(ScriptedModel.of())
    with pytest.raises(UsageError, match="empty"):
        await runner.start(user_id="alice", message=message)


async def test_a_request_id_cannot_run_twice_at_once() -> None:
    model = ScriptedModel.of(ScriptStep.answer("slow " * 20, chunk_size=2, delay_s=0.01), "second")
    runner, _ = make_runner(model)
    first = await runner.start(user_id="alice", message="one", request_id="req-1")
    with pytest.raises(DuplicateRequestError, match="req-1"):
        await runner.start(user_id="alice", message="two", request_id="req-1")
    await first.wait()


async def test_cancel_mid_stream_delivers_a_persisted_completion_within_a_second() -> None:
    model = ScriptedModel.of(ScriptStep.answer("word " * 200, chunk_size=5, delay_s=0.02))
    runner, service = make_runner(model)
    handle = await runner.start(user_id="alice", message="talk a lot", stream=True)
    events: list[Event] = []
    cancelled_at = 0.0
    async for event in handle.events():
        events.append(event)
        if len(events) == 3:
            assert runner.cancel(handle.run_id) is True
            cancelled_at = time.monotonic()
    elapsed = time.monotonic() - cancelled_at
    assert events[-1].is_runner_completion and events[-1].extensions["status"] == "cancelled"
    assert elapsed < 1.0
    record = await handle.wait()
    assert record.status == "cancelled" and record.ended_at is not None
    stored = await ledger(service, "alice", handle.session_id)
    assert [e.role for e in stored] == ["user", "system"]  # partial text is not kept (SPEC 1.10 default)
    assert stored[-1].is_runner_completion
    assert runner.cancel(handle.run_id) is False  # nothing left to cancel


async def test_tool_exception_becomes_a_result_the_model_sees() -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket_id": "BAD"}), "Sorry, no such ticket.")
    runner, _ = make_runner(model)
    events = await collect(runner, user_id="alice", message="look up BAD")
    result = next(e for e in events if e.is_tool_result)
    assert "no ticket 'BAD'" in json.loads(result.text)["error"]
    last_request = model.requests[-1]
    assert any(m.role == "tool" and "no ticket 'BAD'" in m.content for m in last_request.messages)
    assert events[-1].extensions["status"] == "completed"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"ticket": "x"}', "unexpected argument"),
        ('{"ticket_id": 5}', "expected a string"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
async def test_invalid_tool_arguments_go_back_to_the_model_as_an_error(arguments: str, expected: str) -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup_ticket", arguments), "ok")
    runner, _ = make_runner(model)
    events = await collect(runner, user_id="alice", message="go")
    result = next(e for e in events if e.is_tool_result)
    assert expected in json.loads(result.text)["error"]
    assert result.extensions.get("tool_error") is True


async def test_unknown_tool_goes_back_to_the_model_as_an_error() -> None:
    model = ScriptedModel.of(ScriptStep.call("rm_rf", {}), "ok")
    runner, _ = make_runner(model)
    events = await collect(runner, user_id="alice", message="go")
    result = next(e for e in events if e.is_tool_result)
    assert "unknown tool 'rm_rf'" in json.loads(result.text)["error"]


async def test_parallel_tool_calls_run_concurrently() -> None:
    barrier = asyncio.Barrier(2)

    async def meet(name: str) -> str:
        """Wait for the other call.

        Args:
            name: who is waiting
        """
        # Both calls must be in flight at once for the barrier to open.
        await asyncio.wait_for(barrier.wait(), timeout=2)
        return f"{name} met"

    model = ScriptedModel.of(ScriptStep.calls(("meet", {"name": "a"}), ("meet", {"name": "b"})), "both met")
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(meet)], parallel_tools=True)
    runner = Runner(app=APP, agents=[agent], session_service=InMemorySessionService())
    events = await collect(runner, user_id="alice", message="meet")
    results = [e.text for e in events if e.is_tool_result]
    assert results == ["a met", "b met"]


async def test_steps_are_bounded() -> None:
    model = ScriptedModel.of(*[ScriptStep.call("lookup_ticket", {"ticket_id": str(i)}) for i in range(3)])
    runner, _ = make_runner(model, max_steps=3)
    events = await collect(runner, user_id="alice", message="loop forever")
    model.assert_consumed()
    error = next(e for e in events if e.is_error and not e.is_runner_completion)
    assert error.error is not None and error.error.type == "max_steps_exceeded"
    assert events[-1].extensions["status"] == "failed"


@pytest.mark.parametrize(
    ("failure", "error_type"),
    [
        (ModelError("bad request: unknown model", status_code=400), "model_error"),
        (TransientModelError("rate limited after 4 attempts", status_code=429), "model_unavailable"),
    ],
)
async def test_model_failure_mid_run_keeps_the_ledger_and_fails_the_run(failure: ModelError, error_type: str) -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket_id": "A"}), ScriptStep.fail(failure))
    runner, service = make_runner(model)
    handle = await runner.start(user_id="alice", message="check A")
    record = await handle.wait()
    assert record.status == "failed"
    assert record.error is not None and record.error["type"] == error_type
    assert str(failure) in record.error["message"]
    stored = await ledger(service, "alice", handle.session_id)
    assert [e.role for e in stored] == ["user", "assistant", "tool", "assistant", "system"]
    error_event = stored[3]
    assert error_event.is_error and error_event.text == REPAIRED_ERROR_TEXT
    # SPEC 1.9 step 1: the terminal error event said it; the completion does not repeat it.
    assert stored[-1].is_runner_completion and stored[-1].error is None
    assert stored[-1].extensions["status"] == "failed"


async def test_an_agent_crash_becomes_a_visible_flow_error() -> None:
    class Crashing:
        name, description, kind, model_name = "crash", "", "test", None

        async def run(self, invocation: Invocation) -> AsyncIterator[Event]:
            yield Event(author="crash", message=Message(role="assistant", content="starting"), done=False)
            raise RuntimeError("wires crossed")

    service = InMemorySessionService()
    runner = Runner(app=APP, agents=[Crashing()], session_service=service)
    handle = await runner.start(user_id="alice", message="go")
    record = await handle.wait()
    assert record.status == "failed" and record.error == {
        "type": "flow_error",
        "message": "RuntimeError: wires crossed",
        "code": None,
    }
    stored = await ledger(service, "alice", handle.session_id)
    assert [e.text for e in stored[:3]] == ["go", "starting", REPAIRED_ERROR_TEXT]


async def test_the_next_turn_sees_the_previous_turn_as_history() -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket_id": "A"}), "A is open.", "Still open.")
    runner, _ = make_runner(model, instruction="Be brief.")
    first = await runner.start(user_id="alice", message="check A")
    await first.wait()
    await collect(runner, user_id="alice", session_id=first.session_id, message="and now?")
    messages = model.requests[-1].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert messages[0].content == "Be brief." and messages[-1].content == "and now?"


async def test_run_record_counts_steps_and_keeps_the_answer() -> None:
    model = ScriptedModel.of(
        ScriptStep.calls(("lookup_ticket", {"ticket_id": "A"}), ("lookup_ticket", {"ticket_id": "B"})), "Both open."
    )
    runner, _ = make_runner(model)
    handle = await runner.start(user_id="alice", message="A and B?")
    record = await handle.wait()
    assert (record.status, record.model_calls, record.tool_calls, record.answer) == ("completed", 2, 2, "Both open.")
    assert record.started_at is not None and record.ended_at is not None and record.ended_at >= record.started_at
    assert (await runner.status(handle.run_id)) == record


async def test_starting_a_turn_loads_a_bounded_window_of_the_ledger() -> None:
    loads: list[int | None] = []

    class Spy(InMemorySessionService):
        async def get_session(self, key: SessionKey, *, event_limit: int | None = None) -> Session | None:
            loads.append(event_limit)
            return await super().get_session(key, event_limit=event_limit)

    model = ScriptedModel.of("one", "two")
    agent = LLMAgent(name="support", model=model)
    runner = Runner(app=APP, agents=[agent], session_service=Spy(), history_event_limit=50)
    first = await runner.start(user_id="alice", message="1")
    await first.wait()
    second = await runner.start(user_id="alice", session_id=first.session_id, message="2")
    await second.wait()
    assert loads == [50]


async def test_someone_elses_session_id_is_not_found() -> None:
    from sessions_app.core.session import SessionNotFoundError

    runner, service = make_runner(ScriptedModel.of("hi"))
    bobs = await service.create_session(app=APP, user_id="bob")
    with pytest.raises(SessionNotFoundError):
        await runner.start(user_id="alice", session_id=bobs.id, message="let me in")
    assert await ledger(service, "bob", bobs.id) == []
