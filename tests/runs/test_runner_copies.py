"""The runner core's copies of events and run records (issue 23): built without `__init__`
and skipped where nothing changes, they must still be exactly what `dataclasses.replace`
built, and a run's record must count what its events say."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.invocation import Invocation, RunOptions
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.records import RunRecord
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, EventError, Message, ToolCall, Usage
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey

APP = "t"


def full_event() -> Event:
    return Event(
        seq=7,
        invocation_id="inv-1",
        request_id="req-1",
        author="support",
        branch="support",
        filter_key="support",
        message=Message(role="assistant", content="hi", tool_calls=(ToolCall(id="c1", name="f"),)),
        done=True,
        finish_reason="tool_calls",
        state_delta={"k": 1},
        error=EventError(type="x", message="y"),
        usage=Usage(prompt_tokens=3, completion_tokens=2),
        model="m",
        created_at=datetime(2026, 1, 2, tzinfo=UTC),
        extensions={"message_id": "m1"},
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"seq": 0},
        {"invocation_id": "inv-2", "request_id": "req-2", "branch": "b", "filter_key": "f"},
        {"message": None, "extensions": {}, "state_delta": {"z": 2}},
    ],
)
def test_event_replace_is_what_dataclasses_replace_builds(changes: dict[str, Any]) -> None:
    event = full_event()
    before = dataclasses.asdict(event)

    copy = event.replace(**changes)

    assert copy == dataclasses.replace(event, **changes)
    assert dataclasses.asdict(copy) == dataclasses.asdict(dataclasses.replace(event, **changes))
    assert copy is not event and type(copy) is Event
    assert dataclasses.asdict(event) == before  # the original is untouched


def test_event_replace_refuses_an_unknown_field_as_dataclasses_replace_does() -> None:
    with pytest.raises(TypeError, match="colour"):
        full_event().replace(colour="red")


def test_run_record_replace_is_what_dataclasses_replace_builds() -> None:
    record = RunRecord(id="r", app=APP, user_id="alice", session_id="s", agent="support", request_id="q")
    changes: dict[str, Any] = {"status": "running", "event_count": 3, "answer": "done", "trace": {"spans": []}}

    copy = record.replace(**changes)

    assert copy == dataclasses.replace(record, **changes)
    assert (record.status, record.event_count, record.answer) == ("queued", 0, "")
    with pytest.raises(TypeError, match="colour"):
        record.replace(colour="red")


def invocation(*, invocation_id: str = "inv-1", request_id: str = "req-1") -> Invocation:
    return Invocation(
        invocation_id=invocation_id,
        request_id=request_id,
        branch="support",
        filter_key="support",
        run_id="r",
        app=APP,
        agent_name="support",
        session=None,  # type: ignore[arg-type]  # stamp reads only the identity
        session_service=None,  # type: ignore[arg-type]
        message=Message(role="user", content="hi"),
        options=RunOptions(),
        cancel_event=asyncio.Event(),
    )


def test_stamp_injects_the_identity_and_keeps_an_events_own_branch() -> None:
    fresh = Event(author="support", message=Message(role="assistant", content="x"))
    own = Event(author="sub", branch="support.sub", filter_key="support/sub")
    inv = invocation()

    stamped, kept = inv.stamp(fresh), inv.stamp(own)

    assert stamped == fresh.replace(invocation_id="inv-1", request_id="req-1", branch="support", filter_key="support")
    assert kept == own.replace(invocation_id="inv-1", request_id="req-1")
    assert fresh.invocation_id == "" and fresh.branch == ""


def test_stamp_returns_an_event_that_carries_the_identity_as_it_is() -> None:
    inv = invocation()
    stamped = inv.stamp(Event(author="support"))

    assert inv.stamp(stamped) is stamped
    # Another invocation's (or request's) event is stamped anew, its branch kept.
    other = invocation(invocation_id="inv-2")
    restamped = other.stamp(stamped)
    assert (restamped.invocation_id, restamped.request_id, restamped.branch) == ("inv-2", "req-1", "support")
    again = invocation(request_id="req-2").stamp(stamped)
    assert (again.invocation_id, again.request_id) == ("inv-1", "req-2")


def lookup_ticket(ticket_id: str) -> dict[str, str]:
    """Look up a ticket.

    Args:
        ticket_id: the ticket's id
    """
    return {"id": ticket_id, "status": "open"}


class RecordingSink:
    def __init__(self) -> None:
        self.seen: list[tuple[RunRecord, int, Event]] = []

    async def publish(self, record: RunRecord, event: Event) -> None:
        self.seen.append((record, record.event_count, event))


async def test_a_streamed_runs_record_counts_its_stored_events_calls_and_tokens() -> None:
    model = ScriptedModel.of(
        ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1"}),
        ScriptStep.answer("Ticket INC-1 is open, and here is more text.", chunk_size=4),
    )
    service = InMemorySessionService()
    sink = RecordingSink()
    agent = LLMAgent(name="support", model=model, tools=[FunctionTool(lookup_ticket)])
    runner = Runner(app=APP, agents=[agent], session_service=service, sinks=[sink])

    handle = await runner.start(user_id="alice", message="status of INC-1?", stream=True)
    events = [e async for e in handle.events()]
    record = await handle.wait()
    model.assert_consumed()

    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=handle.session_id), limit=100)
    of_run = [e for e in stored if e.request_id == record.request_id]  # its user message too
    usages = [e.usage for e in stored if e.usage is not None]
    assert sum(1 for e in events if e.partial) > 5  # the answer streamed in deltas
    assert record.event_count == len(of_run)
    assert (record.model_calls, record.tool_calls, record.answer) == (
        2,
        1,
        "Ticket INC-1 is open, and here is more text.",
    )
    assert record.prompt_tokens == sum(u.prompt_tokens for u in usages) > 0
    assert record.completion_tokens == sum(u.completion_tokens for u in usages) > 0
    assert record.last_event_at is not None and record.last_event_at >= record.created_at

    # Each sink saw a whole record: its count already includes the stored event it came with,
    # and a record once handed out never changes afterwards (no half-updated record).
    counts = [count for _, count, _ in sink.seen]
    assert counts == sorted(counts)
    for seen, count, _ in sink.seen:
        assert seen.event_count == count
    stored_seen = [count for _, count, event in sink.seen if event.seq is not None and not event.is_runner_completion]
    assert stored_seen == list(range(stored_seen[0], stored_seen[0] + len(stored_seen)))


def test_a_dataclass_with_a_post_init_keeps_its_checks_through_replaced() -> None:
    from sessions_app.core.events import replaced

    @dataclasses.dataclass(frozen=True)
    class Checked:
        size: int

        def __post_init__(self) -> None:
            if self.size < 0:
                raise ValueError("size must not be negative")

    with pytest.raises(ValueError, match="negative"):
        replaced(Checked(1), frozenset({"size"}), {"size": -1})
