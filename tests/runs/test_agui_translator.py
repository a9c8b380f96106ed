"""AguiTranslator: our events as AG-UI events (SPEC 12.1), checked against the `ag_ui.core` models."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import pytest
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    EventType,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import (
    Event as AguiEvent,
)
from pydantic import TypeAdapter

from runs.core.protocols.agui import ARTIFACT_EVENT, MODEL_STEP, AguiTranslator, json_pointer_token, messages_snapshot
from sessions_app.core.events import (
    OBJECT_CHUNK,
    OBJECT_ERROR,
    OBJECT_RUNNER_COMPLETION,
    OBJECT_TOOL_RESPONSE,
    Event,
    EventError,
    Message,
    ToolCall,
)

THREAD = "thread-1"
RUN = "run-1"
AGENT = "support"
ANY_EVENT: TypeAdapter[Any] = TypeAdapter(AguiEvent)


# -- a scripted run, as the runner emits it -------------------------------------------------


def delta(message_id: str, text: str) -> Event:
    return Event(
        author=AGENT,
        object=OBJECT_CHUNK,
        partial=True,
        message=Message(role="assistant", content=text),
        extensions={"message_id": message_id},
    )


def complete(message_id: str, text: str = "", calls: Sequence[ToolCall] = (), seq: int | None = None) -> Event:
    return Event(
        id=message_id,
        seq=seq,
        author=AGENT,
        message=Message(role="assistant", content=text, tool_calls=tuple(calls)),
        done=not calls,
        extensions={"message_id": message_id},
    )


def result(call: ToolCall, content: str, seq: int | None = None, state_delta: dict[str, Any] | None = None) -> Event:
    return Event(
        seq=seq,
        author=AGENT,
        object=OBJECT_TOOL_RESPONSE,
        state_delta=state_delta or {},
        message=Message(role="tool", content=content, tool_call_id=call.id, tool_name=call.name),
    )


def completion(status: str = "completed", error: EventError | None = None, seq: int | None = None) -> Event:
    return Event(
        seq=seq,
        author="agentsite",
        object=OBJECT_RUNNER_COMPLETION,
        done=True,
        error=error,
        extensions={"run_id": RUN, "status": status},
    )


CALL = ToolCall(id="call_1", name="search_logs", arguments='{"query": "tls"}')


def live_run() -> list[Event]:
    """Tool call, tool result, then a streamed answer: what a client sees live."""
    return [
        complete("m1", calls=[CALL], seq=2),
        result(CALL, '{"lines": 3}', seq=3, state_delta={"last/search": "tls"}),
        delta("m2", "The cert"),
        delta("m2", "ificate expired."),
        complete("m2", "The certificate expired.", seq=4),
        completion(seq=5),
    ]


def ledger_run() -> list[Event]:
    """The same run as the ledger holds it (complete events only)."""
    return [e for e in live_run() if not e.partial]


def translate(events: Iterable[Event], translator: AguiTranslator | None = None, **kwargs: Any) -> list[BaseEvent]:
    translator = translator or AguiTranslator(thread_id=THREAD, **kwargs)
    out: list[BaseEvent] = []
    for event in events:
        out.extend(translator.translate(event, run_id=RUN))
    return out


def revalidated(events: Sequence[BaseEvent]) -> list[dict[str, Any]]:
    """Every event re-parsed from its camelCase JSON by the AG-UI model of its type."""
    wire = []
    for item in events:
        data = json.loads(item.model_dump_json(by_alias=True))
        parsed = ANY_EVENT.validate_python(data)
        assert type(parsed) is type(item)
        assert parsed == type(item).model_validate(data)
        wire.append(data)
    return wire


def types(events: Sequence[BaseEvent]) -> list[str]:
    return [e.type.value for e in events]


# -- mapping ------------------------------------------------------------------------------------


def test_a_live_run_maps_to_a_valid_ag_ui_sequence_in_order() -> None:
    run = live_run()
    events = translate(run)
    wire = revalidated(events)
    assert types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TOOL_CALL_RESULT",
        "STATE_DELTA",
        "STEP_FINISHED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_FINISHED",
    ]
    assert wire[0] == {**wire[0], "threadId": THREAD, "runId": RUN}
    start = next(w for w in wire if w["type"] == "TOOL_CALL_START")
    assert start == {**start, "toolCallId": "call_1", "toolCallName": "search_logs", "parentMessageId": "m1"}
    assert next(w for w in wire if w["type"] == "TOOL_CALL_ARGS")["delta"] == '{"query": "tls"}'
    tool_result = next(w for w in wire if w["type"] == "TOOL_CALL_RESULT")
    assert tool_result["toolCallId"] == "call_1" and tool_result["content"] == '{"lines": 3}'
    assert tool_result["messageId"] == run[1].id
    text_start = next(w for w in wire if w["type"] == "TEXT_MESSAGE_START")
    assert (text_start["messageId"], text_start["role"]) == ("m2", "assistant")
    text = "".join(w["delta"] for w in wire if w["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "The certificate expired."
    assert [w["stepName"] for w in wire if w["type"] == "STEP_STARTED"] == [MODEL_STEP, "search_logs", MODEL_STEP]
    assert wire[-1] == {**wire[-1], "threadId": THREAD, "runId": RUN}


def test_state_delta_uses_add_then_replace_and_escapes_keys() -> None:
    translator = AguiTranslator(thread_id=THREAD)
    first = translator.translate(Event(author=AGENT, state_delta={"a/b~c": 1, "plain": "x"}), run_id=RUN)
    second = translator.translate(Event(author=AGENT, state_delta={"a/b~c": 2}), run_id=RUN)
    deltas = [w for w in revalidated(first + second) if w["type"] == "STATE_DELTA"]
    assert deltas[0]["delta"] == [
        {"op": "add", "path": "/a~1b~0c", "value": 1},
        {"op": "add", "path": "/plain", "value": "x"},
    ]
    assert deltas[1]["delta"] == [{"op": "replace", "path": "/a~1b~0c", "value": 2}]
    assert json_pointer_token("~/") == "~0~1"


def test_a_state_snapshot_makes_known_keys_replace() -> None:
    translator = AguiTranslator(thread_id=THREAD)
    snapshot = translator.state_snapshot({"k": 1})
    events = translator.translate(Event(author=AGENT, state_delta={"k": 2, "new": 3}), run_id=RUN)
    wire = revalidated([snapshot, *events])
    assert wire[0] == {"type": "STATE_SNAPSHOT", "snapshot": {"k": 1}}
    delta_ops = next(w for w in wire if w["type"] == "STATE_DELTA")["delta"]
    assert [op["op"] for op in delta_ops] == ["replace", "add"]


def test_events_from_the_ledger_carry_their_seq_in_metadata() -> None:
    wire = revalidated(translate(ledger_run()))
    by_type = {w["type"]: w for w in wire}
    assert by_type["TOOL_CALL_START"]["metadata"] == {"seq": 2}
    assert by_type["RUN_FINISHED"]["metadata"] == {"seq": 5}
    assert all(isinstance(w.get("timestamp"), int) for w in wire)
    streamed = revalidated(translate([delta("m9", "hi")]))
    assert all("metadata" not in w for w in streamed)


def test_an_artifact_extension_becomes_a_custom_event() -> None:
    event = Event(author=AGENT, extensions={"artifact": {"filename": "report.md", "version": 0}})
    wire = revalidated(translate([event, event]))
    custom = [w for w in wire if w["type"] == "CUSTOM"]
    assert custom == [
        {
            "type": "CUSTOM",
            "name": ARTIFACT_EVENT,
            "value": {"filename": "report.md", "version": 0},
            "timestamp": custom[0]["timestamp"],
        }
    ]


def test_user_messages_are_shown_only_when_asked() -> None:
    user = Event(author="user", message=Message(role="user", content="hello"), seq=1)
    assert types(translate([user])) == ["RUN_STARTED"]
    shown = revalidated(translate([user], include_user_messages=True))
    assert [w["type"] for w in shown] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert shown[1]["role"] == "user" and shown[1]["messageId"] == user.id and shown[2]["delta"] == "hello"


def test_text_and_tool_calls_in_one_message_close_the_text_before_the_calls() -> None:
    events = translate([delta("m1", "Let me look."), complete("m1", "Let me look.", calls=[CALL])])
    assert types(events)[1:] == [
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "STEP_FINISHED",
    ]


# -- dedupe and replay --------------------------------------------------------------------------


def test_feeding_every_event_twice_emits_nothing_twice() -> None:
    run = live_run()
    once = translate(run)
    translator = AguiTranslator(thread_id=THREAD)
    twice = []
    for event in run:
        twice.extend(translator.translate(event, run_id=RUN))
        twice.extend(translator.translate(event, run_id=RUN))
    assert [e.model_dump() for e in twice] == [e.model_dump() for e in once]


def test_the_same_result_or_tool_call_in_another_event_is_not_sent_again() -> None:
    second_call = ToolCall(id="call_2", name="lookup_ticket", arguments="{}")
    events = translate(
        [
            complete("m1", calls=[CALL]),
            complete("m1b", calls=[CALL, second_call]),  # a later segment repeats call_1
            result(CALL, "one"),
            result(CALL, "one again"),  # a retried result, under a new event id
        ]
    )
    starts = [e.tool_call_id for e in events if e.type == EventType.TOOL_CALL_START]
    results = [e.tool_call_id for e in events if e.type == EventType.TOOL_CALL_RESULT]
    assert starts == ["call_1", "call_2"]
    assert results == ["call_1"]


def test_replay_and_live_use_the_same_message_ids() -> None:
    def ids(events: Sequence[BaseEvent]) -> list[tuple[str, str]]:
        return [
            (e.type.value, getattr(e, "message_id", None) or getattr(e, "tool_call_id", ""))
            for e in events
            if e.type in (EventType.TEXT_MESSAGE_START, EventType.TOOL_CALL_START, EventType.TOOL_CALL_RESULT)
        ]

    run = live_run()
    live = translate(run)
    replay = translate([e for e in run if not e.partial])
    assert ids(live) == ids(replay)
    replay_text = "".join(e.delta for e in replay if e.type == EventType.TEXT_MESSAGE_CONTENT)
    assert replay_text == "The certificate expired."
    revalidated(replay)


def test_deltas_after_their_complete_message_are_dropped_and_a_partial_stream_is_completed() -> None:
    run = live_run()
    first_delta, second_delta, answer = run[2], run[3], run[4]
    # Replay from the ledger overtook the live queue: one delta, then the whole message,
    # then the remaining (buffered) delta.
    events = translate([first_delta, answer, second_delta])
    assert types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
    ]
    assert "".join(e.delta for e in events if e.type == EventType.TEXT_MESSAGE_CONTENT) == "The certificate expired."


def test_nothing_follows_the_end_of_a_run() -> None:
    translator = AguiTranslator(thread_id=THREAD)
    translate([completion()], translator)
    assert translator.translate(complete("late", "too late"), run_id=RUN) == []
    assert translator.is_finished(RUN)


# -- endings ------------------------------------------------------------------------------------


def test_a_failed_run_ends_with_exactly_one_run_error_after_closing_its_streams() -> None:
    error = EventError(type="model_error", message="the model refused")
    events = translate(
        [
            delta("m1", "partial answer"),
            Event(author=AGENT, object=OBJECT_ERROR, done=True, error=error),
            completion("failed", error=error),
        ]
    )
    assert types(events) == [
        "RUN_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "RUN_ERROR",
    ]
    run_error = events[-1]
    assert isinstance(run_error, RunErrorEvent)
    assert (run_error.message, run_error.code) == ("the model refused", "model_error")
    revalidated(events)


def test_a_failed_completion_without_an_error_event_still_sends_one_run_error() -> None:
    events = translate([completion("failed", error=EventError(type="flow_error", message="boom"))])
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1].code == "flow_error"


def test_a_cancelled_run_ends_with_run_finished_not_run_error() -> None:
    events = translate([delta("m1", "stopped mid-"), completion("cancelled")])
    assert types(events)[-3:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_FINISHED"]
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert revalidated([finished])[0]["outcome"] == {"type": "cancelled"}
    assert EventType.RUN_ERROR not in [e.type for e in events]


@pytest.mark.parametrize("status", ["interrupted", "failed"])
def test_runs_that_did_not_complete_end_with_run_error(status: str) -> None:
    events = translate([completion(status)])
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1].code == status


def test_finish_closes_a_run_whose_completion_never_came() -> None:
    translator = AguiTranslator(thread_id=THREAD)
    events = translate([delta("m1", "half")], translator) + translator.finish(RUN, error=("timeout", "too slow"))
    assert types(events)[-3:] == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_ERROR"]
    assert translator.finish(RUN) == []


def test_two_runs_each_get_their_own_start_and_finish() -> None:
    translator = AguiTranslator(thread_id=THREAD)
    first = translator.translate(completion(), run_id="a")
    second = translator.translate(completion(), run_id="b")
    assert [(e.type.value, e.run_id) for e in first + second] == [
        ("RUN_STARTED", "a"),
        ("RUN_FINISHED", "a"),
        ("RUN_STARTED", "b"),
        ("RUN_FINISHED", "b"),
    ]


def test_resume_run_suppresses_run_started() -> None:
    translator = AguiTranslator(thread_id=THREAD)
    translator.resume_run(RUN)
    assert types(translate([completion()], translator)) == ["RUN_FINISHED"]


# -- messages snapshot --------------------------------------------------------------------------


def test_messages_snapshot_rebuilds_the_conversation_from_the_ledger() -> None:
    user = Event(author="user", message=Message(role="user", content="why?"), seq=1)
    ledger = [user, *ledger_run()]
    snapshot = messages_snapshot(ledger)
    assert isinstance(snapshot, MessagesSnapshotEvent)
    data = json.loads(snapshot.model_dump_json(by_alias=True))
    MessagesSnapshotEvent.model_validate(data)
    messages = snapshot.messages
    assert [type(m) for m in messages] == [UserMessage, AssistantMessage, ToolMessage, AssistantMessage]
    assert messages[0].id == user.id and messages[0].content == "why?"
    assert messages[1].id == "m1" and messages[1].tool_calls[0].id == "call_1"
    assert messages[1].tool_calls[0].function.name == "search_logs"
    assert data["messages"][2]["toolCallId"] == "call_1"
    assert messages[3].id == "m2" and messages[3].content == "The certificate expired."
    # The same ids as the live stream, so a client can reconcile the two.
    live_ids = {e.message_id for e in translate(live_run()) if e.type == EventType.TEXT_MESSAGE_START}
    assert live_ids <= {m.id for m in messages}
