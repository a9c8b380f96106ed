"""DESIGN 8.2, as properties: whatever the ledger, summary boundary and compaction settings,
governance never separates a tool call from its result, never hides the active turn and
never changes the ledger; a summary's text and boundary move together and only forward."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Literal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.core.context.compaction import CompactionConfig
from runs.core.context.governance import TIKTOKEN, ContextGovernance
from runs.core.context.request import build_context
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.summary import SummaryRequest, SummaryResult, model_message, summarize_session
from tests.sessions.ledger_builders import APP, Ledger, assert_tool_calls_paired

SIZES = {"small": "ok", "medium": "result line " * 40, "big": "payload data " * 400}


@dataclass(frozen=True)
class Step:
    calls: int
    answered: int  # how many of the calls got a result (fewer: the run was cut)
    size: str


@dataclass(frozen=True)
class TurnShape:
    steps: tuple[Step, ...]
    answered: bool
    completed: bool
    foreign: bool  # an event of another filter key in the middle


steps = st.builds(
    lambda calls, missing, size: Step(calls=calls, answered=calls - missing, size=size),
    st.integers(1, 3),
    st.integers(0, 1),
    st.sampled_from(list(SIZES)),
).filter(lambda s: s.answered >= 0)
turns = st.builds(TurnShape, st.lists(steps, max_size=3).map(tuple), st.booleans(), st.booleans(), st.booleans())
configs = st.builds(
    CompactionConfig,
    enabled=st.booleans(),
    keep_recent_requests=st.integers(0, 2),
    tool_result_max_tokens=st.sampled_from([0, 20, 200, 1024]),
    oversized_tool_result_max_tokens=st.sampled_from([0, 60, 300]),
    force_clean_tools=st.sampled_from([frozenset(), frozenset({"lookup"})]),
    keep_tools=st.sampled_from([frozenset(), frozenset({"search"})]),
)


def build_ledger(shapes: list[TurnShape], active_last: bool) -> tuple[Ledger, str | None]:
    ledger = Ledger()
    active = None
    for index, shape in enumerate(shapes):
        turn = ledger.turn()
        is_active = active_last and index == len(shapes) - 1
        turn.user(f"question {index}")
        for step_index, step in enumerate(shape.steps):
            # Ids repeat across turns ("c0", "c1"...), as some providers do; unique within a call message.
            ids = [f"c{k}" for k in range(step.calls)]
            tools = ["lookup" if (k + step_index) % 2 else "search" for k in range(step.calls)]
            turn.calls(*[(tool, {"n": index}, call_id) for tool, call_id in zip(tools, ids, strict=True)])
            answered = step.calls if is_active else step.answered  # a running turn is never cut
            for call_id, tool in list(zip(ids, tools, strict=True))[:answered]:
                turn.result(call_id, SIZES[step.size], tool=tool)
        if shape.foreign:
            Ledger(filter_key="other", events=ledger.events).add(
                ledger.events[-1].replace(id=f"foreign-{index}", filter_key="other")
            )
        if is_active:
            active = turn.invocation_id
            continue
        if shape.answered:
            turn.answer(f"answer {index}")
        if shape.completed:
            turn.completion()
    return ledger, active


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=st.lists(turns, min_size=1, max_size=5),
    active_last=st.booleans(),
    boundary_fraction=st.one_of(st.none(), st.floats(0, 1)),
    config=configs,
    injection=st.sampled_from(["system", "user"]),
)
def test_governance_keeps_pairs_the_active_turn_and_the_ledger(
    shapes: list[TurnShape],
    active_last: bool,
    boundary_fraction: float | None,
    config: CompactionConfig,
    injection: Literal["system", "user"],
) -> None:
    ledger, active = build_ledger(shapes, active_last)
    summaries = []
    if boundary_fraction is not None and ledger.events:
        through = max(1, round(boundary_fraction * len(ledger.events)))
        summaries.append(ledger.summary("summary so far", through=through))
    session = ledger.session(summaries=summaries)
    events_before, summaries_before = copy.deepcopy(session.events), copy.deepcopy(session.summaries)

    built = build_context(
        session,
        filter_key=APP,
        instruction="Be brief.",
        tools=[],
        governance=ContextGovernance(compaction=config, summary_injection=injection),
        window=8192,
        active_invocation_id=active,
        current_unit=f"req:req-{active}" if active else "req:(next)",
    )
    sent = list(built.request.messages)

    # 1. Never a call without its results right after it, never a result without its call.
    assert_tool_calls_paired(sent)
    # 2. The active turn: its user messages and everything the summary does not cover reach
    #    the model in order; of what an intra-run summary covers, only the resume tail (the
    #    latest complete tool round, SPEC 4.5) comes back.
    boundary = summaries[0].last_seq if summaries else 0
    if active is not None:
        expected = [
            e
            for e in ledger.events
            if e.invocation_id == active
            and e.filter_key == APP
            and model_message(e) is not None
            and (e.role == "user" or (e.seq or 0) > boundary)
        ]
        shown = [i for i in built.items if i.active and not i.resume_tail]
        assert [i.event.id for i in shown if i.event] == [e.id for e in expected]
        for item, event in zip(shown, expected, strict=True):
            original = model_message(event)
            assert original is not None and item.kind == "event"
            assert (item.message.role, item.message.tool_calls, item.message.tool_call_id) == (
                original.role,
                original.tool_calls,
                original.tool_call_id,
            )
            if item.compaction is None and not (injection == "user" and item is built.items[0]):
                assert item.message.content == original.content
            else:
                assert item.compaction in (None, "pass2")  # only oversized results are cut in the current turn
        tail = [i for i in built.items if i.resume_tail]
        assert all(i.active and i.event is not None and (i.event.seq or 0) <= boundary for i in tail)
        if tail:  # one call and its results
            assert sum(1 for i in tail if i.message.tool_calls) == 1
    # 3. Nothing the summary covers comes back raw, apart from the active turn and repairs.
    for item in built.items:
        if item.kind == "event" and not item.active:
            assert item.event is not None and (item.event.seq or 0) > boundary
    # 4. The ledger and the summaries are untouched.
    assert session.events == events_before and session.summaries == summaries_before


@dataclass
class Scripted:
    answers: list[str | None]
    name: str = "scripted"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        answer = self.answers.pop(0) if self.answers else "text"
        if answer is None:
            raise RuntimeError("model failed")
        if answer == "prefix" and len(request.events) > 1:
            return SummaryResult(text=f"prefix through {request.events[0].seq}", last_included=request.events[0])
        return SummaryResult(text=answer if answer == "" else f"{answer} through {request.events[-1].seq}")


@settings(max_examples=150, deadline=None)
@given(
    rounds=st.lists(
        st.tuples(st.integers(0, 3), st.sampled_from(["text", "", None, "prefix"])), min_size=1, max_size=8
    ),
)
def test_summary_text_and_boundary_move_together_and_only_forward(rounds: list[tuple[int, str | None]]) -> None:
    async def scenario() -> None:
        service = InMemorySessionService()
        session = await service.create_session(app=APP, user_id="alice", session_id="s")
        ledger = Ledger()
        previous = None
        for new_turns, answer in rounds:
            start = len(ledger.events)
            for i in range(new_turns):
                ledger.simple_turn(f"q{start}-{i}", f"a{start}-{i}", tool=("lookup", "r"))
            for event in ledger.events[start:]:
                await service.append_event(session, event.replace(seq=None))
            events_before = await service.list_events(session.key, limit=10_000)
            outcome = await summarize_session(
                service, session.key, filter_key=APP, summarizer=Scripted([answer]), tokenizer=TIKTOKEN, cascade=False
            )
            current = await service.get_summary(session.key, filter_key=APP)
            assert await service.list_events(session.key, limit=10_000) == events_before
            if outcome.advanced:
                assert current is not None
                assert current.last_seq > (previous.last_seq if previous else 0)
                assert current.text != (previous.text if previous else None)
                assert current.version == (previous.version if previous else 0) + 1
            else:
                assert current == previous  # text and boundary both untouched
            previous = current

    asyncio.run(scenario())
