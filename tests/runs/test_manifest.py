"""Projection manifest (issue 12, C3): every ledger event has a disposition in every request,
the checker refuses one that does not, and every hidden item comes back in one tool call."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.core.context.compaction import CompactionConfig
from runs.core.context.governance import ContextGovernance
from runs.core.context.manifest import HIDDEN, Manifest, ManifestError, build_manifest, check_manifest
from runs.core.context.request import BuiltRequest, build_context
from runs.core.llm.base import ToolSpec
from sessions_app.core.events import OBJECT_STATE_UPDATE, REPAIRED_ERROR_TEXT, Event, EventError, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import MAX_CONTENT_LIMIT, InMemoryRecallIndex, recall_text, session_load
from sessions_app.core.session import Session
from tests.sessions.ledger_builders import APP, Ledger, assert_tool_calls_paired

LOAD = ToolSpec(name="session_load", description="load", parameters={"type": "object", "properties": {}})
SIZES = {"small": "ok", "medium": "result line " * 40, "big": "payload data " * 400, "huge": "0123456789abcdef" * 1500}


def build(
    session: Session, *, config: CompactionConfig | None = None, active: str | None = None, check: bool = True
) -> BuiltRequest:
    return build_context(
        session,
        filter_key=APP,
        instruction="Be brief.",
        tools=[LOAD],
        governance=ContextGovernance(compaction=config or CompactionConfig(), manifest_check=check),
        window=8192,
        active_invocation_id=active,
        current_unit=f"req:req-{active}" if active else "req:(next)",
    )


def test_every_event_gets_one_disposition_recorded_as_seq_ranges() -> None:
    ledger = Ledger()
    for i in range(3):
        ledger.simple_turn(f"q{i}", f"a{i}", tool=("lookup", "payload " * 1500))
    turn = ledger.turn()
    turn.user("now")
    session = ledger.session(summaries=[ledger.summary("first turn", through=5)])
    built = build(session, active=turn.invocation_id)
    manifest = built.manifest
    assert manifest is not None and manifest.coverage == 1.0 and not manifest.dropped
    assert [e.disposition for e in manifest.entries] == (
        ["summarized"] * 4
        + ["silent"]  # turn 1 and its completion marker
        + ["verbatim", "verbatim", "placeholder", "verbatim", "silent"]  # turn 2: old result elided
        + ["verbatim"] * 4
        + ["silent"]  # turn 3: the last completed request is protected
        + ["verbatim"]
    )
    data = manifest.to_dict()
    assert data["ranges"][:3] == [["summarized", 1, 4], ["silent", 5, 5], ["verbatim", 6, 7]]
    assert data["summary"] == {"version": 1, "last_seq": 5} and data["coverage"] == 1.0
    assert built.stats()["manifest"] == data


def test_the_checker_refuses_a_request_that_drops_an_event_silently() -> None:
    ledger = Ledger()
    ledger.simple_turn("q0", "a0")
    ledger.simple_turn("q1", "a1")
    built = build(ledger.session())
    assert built.manifest is not None
    # The same projection with the first user message removed from it: nothing stands for it.
    items = [i for i in built.items if i.event is None or i.event.seq != 1]
    manifest = build_manifest(
        ledger.events, filter_key=APP, last_seq=len(ledger.events), projection=built.projection, items=items
    )
    assert manifest.dropped == [1]
    with pytest.raises(ManifestError, match=r"seq \[1\]"):
        check_manifest(manifest)


def test_the_checker_refuses_a_placeholder_without_its_event_id() -> None:
    ledger = Ledger()
    ledger.simple_turn("q0", "a0", tool=("lookup", "payload " * 1500))
    ledger.simple_turn("q1", "a1")
    turn = ledger.turn()
    turn.user("q2")
    built = build(ledger.session(), active=turn.invocation_id)
    broken = [
        dataclasses.replace(i, message=dataclasses.replace(i.message, content="[compacted tool result] gone"))
        if i.compaction == "pass1"
        else i
        for i in built.items
    ]
    manifest = build_manifest(
        ledger.events, filter_key=APP, last_seq=len(ledger.events), projection=built.projection, items=broken
    )
    with pytest.raises(ManifestError, match="does not name event_id"):
        check_manifest(manifest)


def test_events_not_loaded_after_the_boundary_are_announced_and_load_by_seq() -> None:
    ledger = Ledger()
    for i in range(4):
        ledger.simple_turn(f"question {i}", f"answer {i}")
    window = Session(app=APP, user_id="alice", id="s-1", events=ledger.events[8:], last_seq=len(ledger.events))
    built = build(window)
    assert built.manifest is not None and built.gap_message is not None
    assert [g for g in built.manifest.to_dict()["gaps"]] == [[1, 8]]
    assert "seq 1-8" in built.gap_message.content and built.gap_message in built.request.messages

    async def scenario() -> dict[str, object]:
        service = InMemorySessionService()
        session = await service.create_session(app=APP, user_id="alice", session_id="s-1")
        await ledger.append_to(service, session)
        return await session_load(InMemoryRecallIndex(service), session=session, seq=6, before=0, after=1)

    loaded = asyncio.run(scenario())
    # seq 6 is turn 2's completion marker, which is not recallable: the next event answers.
    assert [m["content"] for m in loaded["messages"]] == ["question 2", "answer 2"]  # type: ignore[index]


def test_a_pass_2_cut_records_the_offsets_the_model_saw() -> None:
    ledger = Ledger()
    turn = ledger.turn()
    turn.user("read it")
    call = turn.tool_round("read", "".join(f"{i:05d} " for i in range(4000)))
    built = build(
        ledger.session(), config=CompactionConfig(oversized_tool_result_max_tokens=300), active=turn.invocation_id
    )
    assert built.manifest is not None
    [cut] = [e for e in built.manifest.entries if e.disposition == "truncated"]
    head, tail, total = cut.truncation or (0, 0, 0)
    original = ledger.events[2].text
    sent = next(m.content for m in built.request.messages if m.tool_call_id == call)
    assert total == len(original) and 0 < head and 0 < tail and head + tail < total
    assert original[:head] in sent and sent.endswith(original[total - tail :])
    assert built.manifest.to_dict()["truncated"] == [[3, head, tail, total]]


# -- properties over random ledgers ----------------------------------------------------------


@dataclass(frozen=True)
class Step:
    calls: int
    answered: int
    size: str
    failed: bool


@dataclass(frozen=True)
class TurnShape:
    steps: tuple[Step, ...]
    ending: str  # "answer", "error" (a repaired model error), "cut" (cancelled mid-turn)
    state_change: bool
    foreign: bool


steps = st.builds(
    lambda calls, missing, size, failed: Step(calls=calls, answered=max(0, calls - missing), size=size, failed=failed),
    st.integers(1, 3),
    st.integers(0, 2),
    st.sampled_from(list(SIZES)),
    st.booleans(),
)
turns = st.builds(
    TurnShape,
    st.lists(steps, max_size=3).map(tuple),
    st.sampled_from(["answer", "error", "cut"]),
    st.booleans(),
    st.booleans(),
)
configs = st.builds(
    CompactionConfig,
    keep_recent_requests=st.integers(0, 2),
    tool_result_max_tokens=st.sampled_from([0, 20, 1024]),
    oversized_tool_result_max_tokens=st.sampled_from([0, 60, 300]),
    force_clean_tools=st.sampled_from([frozenset(), frozenset({"lookup"})]),
)


def random_ledger(shapes: list[TurnShape], active_last: bool) -> tuple[Ledger, str | None]:
    ledger = Ledger()
    active = None
    for index, shape in enumerate(shapes):
        turn = ledger.turn()
        is_active = active_last and index == len(shapes) - 1
        turn.user(f"question {index}")
        for step_index, step in enumerate(shape.steps):
            ids = [f"c{k}" for k in range(step.calls)]  # ids repeat across turns, as some providers do
            tools = ["lookup" if (k + step_index) % 2 else "search" for k in range(step.calls)]
            turn.calls(*[(tool, {"n": index}, call_id) for tool, call_id in zip(tools, ids, strict=True)])
            answered = step.calls if is_active else step.answered
            for call_id, tool in list(zip(ids, tools, strict=True))[:answered]:
                turn.result(call_id, f"{index}:{call_id} " + SIZES[step.size], tool=tool, failed=step.failed)
        if shape.state_change:
            turn._add(Event(author="support", object=OBJECT_STATE_UPDATE, state_delta={"k": index}))
        if shape.foreign:
            ledger.add(
                Event(author="other", filter_key="other", message=Message(role="user", content=f"elsewhere {index}"))
            )
        if is_active:
            active = turn.invocation_id
            continue
        if shape.ending == "answer":
            turn.answer(f"answer {index}")
        elif shape.ending == "error":
            turn._add(
                Event(
                    author="support",
                    done=True,
                    finish_reason="error",
                    error=EventError(type="model_error", message="boom"),
                    message=Message(role="assistant", content=REPAIRED_ERROR_TEXT),
                )
            )
        if shape.ending != "cut":
            turn.completion()
    return ledger, active


async def _recover(index: InMemoryRecallIndex, session: Session, event: Event, disposition: str) -> str | None:
    """What one session_load call brings back of a hidden event (its content), or None."""
    message = event.message
    if message is not None and message.tool_calls and not message.content:
        # A call message is not recallable itself (SPEC 5): its result is, by tool call id.
        return None
    kwargs: dict[str, object] = {"seq": event.seq} if disposition == "gap" else {"event_id": event.id}
    loaded = await session_load(
        index,
        session=session,
        before=0,
        after=1,
        content_limit=MAX_CONTENT_LIMIT,
        **kwargs,  # type: ignore[arg-type]
    )
    assert loaded["event_id"] == event.id
    [found] = [m for m in loaded["messages"] if m["event_id"] == event.id]
    content = str(found["content"])
    prefix = f"{message.tool_name}: " if message is not None and message.tool_call_id and message.tool_name else ""
    return content[len(prefix) :] if prefix and content.startswith(prefix) else content


def assert_compact_form_matches_every_entry(manifest: Manifest) -> None:
    """The summarized prefix kept as one number (issue 18) reads as one entry per seq."""
    entries = manifest.entries
    assert all(e.disposition == "summarized" for e in entries[: manifest.summarized_through])
    counted = Counter(e.disposition for e in entries)
    assert manifest.counts() == {d: n for d, n in counted.items() if n}
    runs: list[list[object]] = []
    for e in entries:
        if runs and runs[-1][0] == e.disposition and runs[-1][2] == e.seq - 1:
            runs[-1][2] = e.seq
        else:
            runs.append([e.disposition, e.seq, e.seq])
    assert manifest.ranges() == runs
    assert all(manifest.of(e.seq) == e for e in entries)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(turns, min_size=1, max_size=5),
    active_last=st.booleans(),
    boundary_fraction=st.one_of(st.none(), st.floats(0, 1)),
    loaded_fraction=st.floats(0, 1),
    config=configs,
)
def test_coverage_is_total_drops_are_zero_and_every_hidden_item_loads_in_one_call(
    shapes: list[TurnShape],
    active_last: bool,
    boundary_fraction: float | None,
    loaded_fraction: float,
    config: CompactionConfig,
) -> None:
    ledger, active = random_ledger(shapes, active_last)
    events = ledger.events
    summaries = []
    if boundary_fraction is not None:
        summaries.append(ledger.summary("so far", through=max(1, round(boundary_fraction * len(events)))))
    # The history window a runner loads: the newest events (never cutting the active turn).
    first_active = next((i for i, e in enumerate(events) if e.invocation_id == active), len(events))
    start = min(first_active, int(loaded_fraction * len(events)))
    session = Session(
        app=APP,
        user_id="alice",
        id="s-1",
        events=events[start:],
        last_seq=len(events),
        summaries={s.filter_key: s for s in summaries},
    )
    built = build(session, config=config, active=active)  # raises ManifestError on a silent drop
    manifest = built.manifest
    assert manifest is not None
    assert manifest.coverage == 1.0 and manifest.dropped == []
    assert [e.seq for e in manifest.entries] == list(range(1, len(events) + 1))
    assert_compact_form_matches_every_entry(manifest)
    assert_tool_calls_paired(list(built.request.messages))
    sent = "\n".join(m.content + "".join(c.arguments for c in m.tool_calls) for m in built.request.messages)
    by_seq = {e.seq: e for e in events}

    async def recover_all() -> None:
        service = InMemorySessionService()
        stored = await service.create_session(app=APP, user_id="alice", session_id="s-1")
        await ledger.append_to(service, stored)
        index = InMemoryRecallIndex(service)
        for entry in manifest.entries:
            event = by_seq[entry.seq]
            if entry.disposition == "verbatim":
                assert event.text in sent
            if entry.disposition not in HIDDEN or recall_text(event) is None:
                continue
            assert await _recover(index, stored, event, entry.disposition) == event.text, entry

    asyncio.run(recover_all())
