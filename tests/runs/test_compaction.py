"""Tool-result compaction (SPEC 4.6): passes 0-2, protected requests, placeholders, copy-on-write."""

from __future__ import annotations

import copy

import pytest

from runs.core.context.compaction import (
    PLACEHOLDER_TAG,
    CompactionConfig,
    compact_tool_results,
    protected_units,
)
from runs.core.context.governance import TIKTOKEN, ContextGovernance
from runs.core.context.projection import ProjectedItem, project
from runs.core.context.request import BuiltRequest, build_context
from runs.core.llm.base import ToolSpec
from sessions_app.core.session import Session
from tests.sessions.ledger_builders import APP, Ledger

BIG = "log line with details " * 400  # ~2,000 tokens
SMALL = "ok"
SESSION_LOAD = ToolSpec(name="session_load", description="load events", parameters={"type": "object"})


def three_turns(active: bool = True) -> tuple[Ledger, list[str]]:
    """Turns 1 and 2 completed with a big result each; turn 3 running with a big result."""
    ledger = Ledger()
    invocations = []
    for i in range(3):
        turn = ledger.turn()
        invocations.append(turn.invocation_id)
        turn.user(f"question {i}")
        turn.tool_round("search_logs", BIG, call_id=f"c{i}")
        if i < 2 or not active:
            turn.answer(f"answer {i}")
            turn.completion()
    return ledger, invocations


def build(
    session: Session, *, active: str | None, config: CompactionConfig | None = None, tools: list[ToolSpec] | None = None
) -> BuiltRequest:
    governance = ContextGovernance(compaction=config or CompactionConfig())
    return build_context(
        session,
        filter_key=APP,
        instruction="",
        tools=tools or [],
        governance=governance,
        window=8192,
        active_invocation_id=active,
        current_unit=f"req:req-{active}" if active else "req:(next)",
    )


def tool_items(built: BuiltRequest) -> list[ProjectedItem]:
    return [i for i in built.items if i.message.role == "tool"]


def test_older_results_over_the_threshold_become_placeholders_and_recent_requests_are_kept() -> None:
    ledger, invocations = three_turns()
    built = build(ledger.session(), active=invocations[2])
    first, second, current = tool_items(built)
    assert first.compaction == "pass1" and first.message.content.startswith(PLACEHOLDER_TAG)
    assert second.compaction is None and second.message.content == BIG  # the last completed request
    assert current.compaction is None and current.message.content == BIG  # the current request
    assert built.compaction.pass1 == 1 and built.compaction.tokens_saved > 1000


def test_a_placeholder_names_the_event_the_call_and_the_tool() -> None:
    ledger, invocations = three_turns()
    built = build(ledger.session(), active=invocations[2])
    placeholder = tool_items(built)[0]
    assert placeholder.event is not None
    lines = placeholder.message.content.splitlines()
    assert f"event_id: {placeholder.event.id}" in lines
    assert (
        "tool_call_id: c0" in lines and "tool_name: search_logs" in lines and "reason: historical_compaction" in lines
    )
    assert (
        placeholder.message.tool_call_id == "c0" and placeholder.original_tokens and placeholder.original_tokens > 1000
    )


def test_session_load_is_advertised_only_when_the_agent_has_it() -> None:
    ledger, invocations = three_turns()
    without = tool_items(build(ledger.session(), active=invocations[2]))[0].message.content
    with_it = tool_items(build(ledger.session(), active=invocations[2], tools=[SESSION_LOAD]))[0].message.content
    assert "session_load" not in without and "cannot be loaded with the tools available" in without
    assert "call session_load with this event_id" in with_it


def test_results_under_the_threshold_and_kept_tools_are_left_alone() -> None:
    ledger, invocations = three_turns()
    keep = build(
        ledger.session(), active=invocations[2], config=CompactionConfig(keep_tools=frozenset({"search_logs"}))
    )
    assert keep.compaction.total == 0
    high = build(ledger.session(), active=invocations[2], config=CompactionConfig(tool_result_max_tokens=100_000))
    assert high.compaction.total == 0
    off = build(ledger.session(), active=invocations[2], config=CompactionConfig(enabled=False))
    assert off.compaction.total == 0 and all(i.message.content == BIG for i in tool_items(off))


def test_keep_recent_requests_protects_that_many_completed_requests() -> None:
    ledger, invocations = three_turns()
    none_kept = build(ledger.session(), active=invocations[2], config=CompactionConfig(keep_recent_requests=0))
    assert [i.compaction for i in tool_items(none_kept)] == ["pass1", "pass1", None]
    two_kept = build(ledger.session(), active=invocations[2], config=CompactionConfig(keep_recent_requests=2))
    assert [i.compaction for i in tool_items(two_kept)] == [None, None, None]


def test_protected_units_are_the_current_one_and_the_last_completed_ones() -> None:
    order = ["req:a", "req:b", "req:c", "req:d"]
    assert protected_units(order, {"req:a", "req:b", "req:c"}, current_unit="req:d", keep_recent_requests=1) == {
        "req:d",
        "req:c",
    }
    # An unfinished request (crashed, no `done` event) is neither protected nor counted.
    assert protected_units(order, {"req:a", "req:b"}, current_unit="req:d", keep_recent_requests=1) == {
        "req:d",
        "req:b",
    }


def test_the_next_call_preview_protects_the_last_completed_request() -> None:
    ledger, _ = three_turns(active=False)
    built = build(ledger.session(), active=None)
    assert [i.compaction for i in tool_items(built)] == ["pass1", "pass1", None]


def test_pass_0_cleans_listed_tools_whatever_their_size_without_recovery_hints() -> None:
    ledger = Ledger()
    for i in range(3):
        ledger.simple_turn(f"q{i}", f"a{i}", tool=("get_secret", SMALL))
    turn = ledger.turn()
    turn.user("now")
    config = CompactionConfig(force_clean_tools=frozenset({"get_secret"}))
    built = build(ledger.session(), active=turn.invocation_id, config=config)
    cleaned = [i for i in tool_items(built) if i.compaction == "pass0"]
    assert len(cleaned) == 2  # the last completed request is protected
    assert "event_id" not in cleaned[0].message.content and cleaned[0].message.content.startswith(PLACEHOLDER_TAG)
    assert built.compaction.pass0 == 2
    kept = build(
        ledger.session(),
        active=turn.invocation_id,
        config=CompactionConfig(force_clean_tools=frozenset({"get_secret"}), keep_tools=frozenset({"get_secret"})),
    )
    assert kept.compaction.pass0 == 0


def test_pass_2_is_off_by_default_and_cuts_the_middle_of_oversized_results_when_on() -> None:
    ledger, invocations = three_turns()
    assert build(ledger.session(), active=invocations[2]).compaction.pass2 == 0
    config = CompactionConfig(tool_result_max_tokens=0, oversized_tool_result_max_tokens=300)
    built = build(ledger.session(), active=invocations[2], config=config)
    assert built.compaction.pass2 == 3  # the current request's result included
    for item in tool_items(built):
        content = item.message.content
        assert TIKTOKEN.count_text(content) <= 300
        assert content.startswith(f"{PLACEHOLDER_TAG} log line") and content.rstrip().endswith("details")
        assert "characters of this tool result left out" in content and "tool_call_id=c" in content


def test_pass_2_leaves_session_load_results_whole() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("load it")
    turn.tool_round("session_load", BIG)
    built = build(
        ledger.session(), active=turn.invocation_id, config=CompactionConfig(oversized_tool_result_max_tokens=300)
    )
    assert built.compaction.pass2 == 0


def test_a_placeholder_is_never_compacted_again() -> None:
    ledger, invocations = three_turns()
    once = build(ledger.session(), active=invocations[2])
    again, stats = compact_tool_results(
        once.items,
        config=CompactionConfig(oversized_tool_result_max_tokens=50),
        current_unit=f"req:req-{invocations[2]}",
        unit_order=once.projection.unit_order,
        completed_units=once.projection.completed_units,
        session_load=False,
        tokenizer=TIKTOKEN,
    )
    assert tool_items(once)[0].message == again[[i.message.role for i in again].index("tool")].message
    assert stats.pass1 == 0


def test_a_failed_tool_call_is_not_called_a_success() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("q")
    turn.calls(("deploy", {}, "d1"))
    turn.result("d1", '{"error": "' + "boom " * 1500 + '"}', tool="deploy", failed=True)
    turn.answer("it failed")
    turn.completion()
    ledger.simple_turn("q2", "a2")
    current = ledger.turn()
    current.user("q3")
    placeholder = tool_items(build(ledger.session(), active=current.invocation_id))[0].message.content
    assert "ended with an error" in placeholder and "succeeded" not in placeholder


def test_compaction_copies_on_write_and_never_touches_the_ledger() -> None:
    ledger, invocations = three_turns()
    session = ledger.session()
    events_before = copy.deepcopy(session.events)
    projection = project(session, filter_key=APP, active_invocation_id=invocations[2])
    items_before = list(projection.items)
    _, stats = compact_tool_results(
        projection.items,
        config=CompactionConfig(oversized_tool_result_max_tokens=100),
        current_unit=f"req:req-{invocations[2]}",
        unit_order=projection.unit_order,
        completed_units=projection.completed_units,
        session_load=True,
        tokenizer=TIKTOKEN,
    )
    assert stats.total > 0
    assert list(projection.items) == items_before  # the input items are untouched
    assert session.events == events_before  # so is the ledger
    assert all(e.text == BIG for e in session.events if e.is_tool_result)


@pytest.mark.parametrize(
    "field", ["keep_recent_requests", "tool_result_max_tokens", "oversized_tool_result_max_tokens"]
)
def test_negative_knobs_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        CompactionConfig(**{field: -1})
