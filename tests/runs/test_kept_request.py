"""Kept compaction and manifest (issue 18): the per-item work a request reuses from the
kept projection's memo gives exactly what the same request made from the ledger gives.

Random ledgers are grown as in test_projection_incremental.py, under compaction settings
that make every pass fire (small result limits, batches, forced tools, Pass 2), switched
between calls; after each step the request, its items, stats, compaction and manifest
built on the kept projection equal those built from scratch, and the manifest checker
answers the same. A projection that loses an event is still refused on the kept path.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.core.context.compaction import CompactionConfig
from runs.core.context.governance import ContextGovernance
from runs.core.context.incremental import IncrementalProjection
from runs.core.context.manifest import ManifestError, build_manifest, check_manifest
from runs.core.context.request import BuiltRequest, build_context
from runs.core.llm.base import ToolSpec
from sessions_app.core.events import OBJECT_TOOL_RESPONSE, Event, Message
from sessions_app.core.session import Session
from tests.runs.test_projection_incremental import AGENT, OPS, _apply, _World
from tests.sessions.ledger_builders import APP

# A placeholder weighs about 90 tokens: only results well over it are compacted.
CONFIGS = (
    CompactionConfig(),
    CompactionConfig(tool_result_max_tokens=100, keep_recent_requests=0),
    CompactionConfig(tool_result_max_tokens=100),
    CompactionConfig(tool_result_max_tokens=100, clear_at_least=400),
    CompactionConfig(tool_result_max_tokens=100, keep_recent_requests=2, clear_at_least=300),
    CompactionConfig(tool_result_max_tokens=100, clear_at_least=1000),
    CompactionConfig(tool_result_max_tokens=100, force_clean_tools=frozenset({"lookup"}), keep_recent_requests=0),
    CompactionConfig(
        tool_result_max_tokens=100, keep_tools=frozenset({"search"}), oversized_tool_result_max_tokens=400
    ),
    CompactionConfig(tool_result_max_tokens=0, oversized_tool_result_max_tokens=200),
    CompactionConfig(enabled=False),
)
# Runs that complete move the protection on; mid-sized rounds fill batches: both more
# often than in OPS.
KEPT_OPS = (*OPS, "turn", "mid_round", "mid_round", "mid_round", "answer", "completion")


def _apply_kept(world: _World, op: str, flag: bool) -> None:
    if op != "mid_round":
        _apply(world, op, flag)
        return
    _apply(world, "call_only", flag)
    call = f"call_{world.counter}" if not flag else "call_1"
    world.add(
        Event(
            author=AGENT,
            object=OBJECT_TOOL_RESPONSE,
            message=Message(role="tool", content="finding " * 160 + call, tool_call_id=call, tool_name="lookup"),
        )
    )


TOOLS = (
    [ToolSpec(name="lookup", description="d", parameters={})],
    [
        ToolSpec(name="lookup", description="d", parameters={}),
        ToolSpec(name="session_load", description="l", parameters={}),
    ],
)


def _build(
    session: Session,
    active: str | None,
    config: CompactionConfig,
    tools_index: int,
    incremental: IncrementalProjection | None,
) -> BuiltRequest:
    return build_context(
        session,
        filter_key=APP,
        instruction="Be brief.",
        tools=TOOLS[tools_index],
        governance=ContextGovernance(context_window=4096, compaction=config),
        window=4096,
        active_invocation_id=active,
        current_unit=f"req:req-{active}" if active else "req:(next)",
        agent_name=AGENT,
        fit_to=2800,
        projections=incremental,
    )


def _verdict(built: BuiltRequest) -> str | None:
    assert built.manifest is not None
    try:
        check_manifest(built.manifest, gap_notice_text=built.gap_message.content if built.gap_message else None)
    except ManifestError as exc:
        return str(exc)
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, len(CONFIGS) - 1),
    st.lists(
        st.tuples(
            st.sampled_from(KEPT_OPS),
            st.booleans(),
            st.booleans(),
            st.integers(0, 5),
            st.integers(0, len(TOOLS) - 1),
        ),
        min_size=1,
        max_size=50,
    ),
)
def test_the_kept_compaction_and_manifest_equal_the_ones_made_from_the_ledger(
    config_index: int, steps: list[tuple[str, bool, bool, int, int]]
) -> None:
    world = _World()
    world.session = Session(app=APP, user_id="alice", id="s-1")
    incremental = IncrementalProjection()
    for op, flag, inactive, calls, tools_index in steps:
        _apply_kept(world, op, flag)
        session = world.session
        active = None if inactive else world.invocation
        # Mostly the example's settings (so that a unit's protection and batch can change
        # under the same memo); now and then other ones, which start the memo afresh.
        config = CONFIGS[config_index] if calls else CONFIGS[(config_index + 1) % len(CONFIGS)]
        for _ in range(1 + calls % 2):  # the model calls of one step see the same ledger
            kept = _build(session, active, config, tools_index, incremental)
            fresh = _build(session, active, config, tools_index, None)
            assert kept.request == fresh.request, (op, kept.projection.origin)
            assert kept.items == fresh.items
            assert kept.compaction == fresh.compaction
            assert kept.manifest == fresh.manifest
            assert kept.manifest is not None and fresh.manifest is not None
            assert kept.manifest.texts == fresh.manifest.texts
            kept_stats, fresh_stats = kept.stats(), fresh.stats()
            kept_stats.pop("projection"), fresh_stats.pop("projection")
            assert kept_stats == fresh_stats
            assert _verdict(kept) == _verdict(fresh)


def test_a_result_left_unprotected_by_a_later_run_is_compacted_on_the_kept_path_too() -> None:
    world = _World()
    world.session = Session(app=APP, user_id="alice", id="s-1")
    incremental = IncrementalProjection()
    config = CompactionConfig(tool_result_max_tokens=100)  # the last completed run is protected
    placeholders = []
    for op in ("turn", "mid_round", "answer", "turn", "round", "answer", "turn", "round"):
        _apply_kept(world, op, False)
        kept = _build(world.session, world.invocation, config, 0, incremental)
        assert kept.request == _build(world.session, world.invocation, config, 0, None).request
        placeholders.append(kept.compaction.pass1)
    # The first run's result stays whole while that run is the last completed one, and is
    # a placeholder once a later run follows the second (the same kept item, a new standing).
    assert placeholders == [0, 0, 0, 0, 0, 0, 1, 1]


def _long_run() -> tuple[_World, IncrementalProjection, CompactionConfig]:
    world = _World()
    world.session = Session(app=APP, user_id="alice", id="s-1")
    incremental = IncrementalProjection()
    config = CompactionConfig(tool_result_max_tokens=100, keep_recent_requests=0)
    for op in ("turn", "big_round", "mid_round", "answer", "completion", "turn", "mid_round", "round"):
        _apply_kept(world, op, False)
        _build(world.session, world.invocation, config, 1, incremental)
    return world, incremental, config


def test_the_kept_manifest_still_refuses_a_request_that_loses_an_event() -> None:
    world, incremental, config = _long_run()
    assert world.session is not None
    built = _build(world.session, world.invocation, config, 1, incremental)
    assert built.projection.memo is not None and built.projection.origin == "incremental"
    assert _verdict(built) is None and built.compaction.pass1 > 0
    lost = next(i for i, item in enumerate(built.items) if item.kind == "event" and item.message.role == "assistant")
    items = [*built.items[:lost], *built.items[lost + 1 :]]
    manifest = build_manifest(
        world.session.events,
        filter_key=APP,
        last_seq=world.session.last_seq,
        projection=built.projection,
        items=items,
        memo=built.projection.memo,
    )
    event = built.items[lost].event
    assert event is not None
    seq = event.seq
    with pytest.raises(ManifestError, match=rf"\[{seq}\]"):
        check_manifest(manifest)


def test_the_kept_manifest_refuses_a_placeholder_that_does_not_name_its_event() -> None:
    world, incremental, config = _long_run()
    assert world.session is not None
    built = _build(world.session, world.invocation, config, 1, incremental)
    placeholder = next(i for i, item in enumerate(built.items) if item.compaction == "pass1")
    item = built.items[placeholder]
    forged = dataclasses.replace(item, message=dataclasses.replace(item.message, content="[compacted tool result]"))
    items = [*built.items[:placeholder], forged, *built.items[placeholder + 1 :]]
    manifest = build_manifest(
        world.session.events,
        filter_key=APP,
        last_seq=world.session.last_seq,
        projection=built.projection,
        items=items,
        memo=built.projection.memo,
    )
    with pytest.raises(ManifestError, match="does not name event_id"):
        check_manifest(manifest)


def test_a_later_call_reuses_the_compaction_of_every_item_it_saw_before() -> None:
    world, incremental, config = _long_run()
    assert world.session is not None
    first = _build(world.session, world.invocation, config, 1, incremental)
    memo = first.projection.memo
    assert memo is not None
    outcomes = dict(memo.outcomes)
    _apply_kept(world, "mid_round", False)
    second = _build(world.session, world.invocation, config, 1, incremental)
    assert second.projection.memo is memo
    # The earlier turn's placeholders are the very objects made for the first call.
    earlier = [i for i in second.items if i.compaction == "pass1"]
    assert earlier and all(any(o[2] is i for o in outcomes.values()) for i in earlier)
