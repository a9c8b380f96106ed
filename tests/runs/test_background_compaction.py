"""Non-blocking compaction (issue 12, C5): a summary started at the soft threshold runs
while the agent keeps calling the model, and goes in at the next call; the synchronous
pre-call path (SPEC 4.8) stays the fallback."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import TIKTOKEN, BackgroundCompactionConfig, ContextGovernance
from runs.core.context.precall import BackgroundCompactions, compact_before_call, summarize_now
from runs.core.context.request import BuiltRequest, build_for_invocation
from runs.core.invocation import Invocation
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey
from sessions_app.core.summary import SummaryEngine, SummaryRequest, SummaryResult, model_message
from tests.runs.test_precall_compaction import (
    LONG,
    WINDOW,
    context_of,
    run_turn,
    running_invocation,
    session_with_history,
)
from tests.sessions.ledger_builders import APP

SOFT = BackgroundCompactionConfig(ratio=0.55, min_tokens=1500, wait_s=5.0)  # 2,200 of a 4,000 window


class GatedSummarizer:
    """Summarizes the request's events into a text naming their seqs; waits for `gate`
    (when given) before answering, and sets `finished` after."""

    name = "gated"

    def __init__(self, *, gate: asyncio.Event | None = None, fail: bool = False) -> None:
        self.gate = gate
        self.fail = fail
        self.requests: list[SummaryRequest] = []
        self.finished = asyncio.Event()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        if self.gate is not None:
            await self.gate.wait()
        try:
            if self.fail:
                raise ConnectionError("summary model unavailable")
            seqs = [e.seq for e in request.events]
            return SummaryResult(text=f"SUMMARY of seqs {seqs[0]}-{seqs[-1]}")
        finally:
            self.finished.set()


def governed(summarizer: Any, *, background: BackgroundCompactionConfig | None = SOFT) -> ContextGovernance:
    return ContextGovernance(summaries=SummaryEngine(summarizer=summarizer, tokenizer=TIKTOKEN), background=background)


def builder(invocation: Invocation, governance: ContextGovernance) -> Any:
    def build() -> BuiltRequest:
        return build_for_invocation(invocation, instruction="Be brief.", tools=[], governance=governance, window=WINDOW)

    return build


def test_the_soft_threshold_is_55_percent_of_the_window_at_least_1500_tokens_and_at_most_the_window() -> None:
    config = BackgroundCompactionConfig()
    assert config.threshold(100_000) == 55_000
    assert config.threshold(2000) == 1500
    assert config.threshold(1000) == 1000
    with pytest.raises(ValueError, match="ratio"):
        BackgroundCompactionConfig(ratio=0)
    with pytest.raises(ValueError, match="wait"):
        BackgroundCompactionConfig(wait_s=-1)


async def test_a_request_past_the_soft_threshold_goes_out_at_once_while_the_summary_starts_beside_it() -> None:
    gate = asyncio.Event()
    summarizer = GatedSummarizer(gate=gate)
    governance = governed(summarizer)
    invocation, service = await running_invocation(governance, turns=3)
    build = builder(invocation, governance)
    built = build()
    assert 2200 <= built.sent_tokens < 2800
    background = BackgroundCompactions()

    chosen, report = await compact_before_call(
        invocation, built, governance=governance, rebuild=build, background=background
    )

    # Not waited for: the summary is still blocked on its gate, and the request is unchanged.
    assert chosen is built and not summarizer.finished.is_set()
    assert report is not None and report.status == "below_threshold" and report.background == "started"
    assert report.soft_threshold == 2200 and report.stall_ms < 1000
    assert background.in_flight(invocation)
    # A second call while it runs starts no other.
    _, again = await compact_before_call(invocation, built, governance=governance, rebuild=build, background=background)
    assert again is not None and again.background == "running"
    gate.set()
    await background.join()
    assert len(summarizer.requests) == 1
    stored = await service.get_summary(invocation.session.key, filter_key=APP)
    # The stored text opens with its section header (C1), then the model's summary.
    assert stored is not None and stored.text.split("\n", 1)[-1].startswith("SUMMARY of seqs 1-")


async def test_the_next_call_swaps_in_exactly_what_a_synchronous_summary_at_the_same_boundary_gives() -> None:
    governance = governed(GatedSummarizer())
    invocation, _ = await running_invocation(governance, turns=3)
    build = builder(invocation, governance)
    background = BackgroundCompactions()
    first, _ = await compact_before_call(
        invocation, build(), governance=governance, rebuild=build, background=background
    )
    await background.join()
    swapped, report = await compact_before_call(
        invocation, build_before_swap := build(), governance=governance, rebuild=build, background=background
    )
    assert report is not None and report.background == "swapped"
    assert swapped is not build_before_swap and swapped.sent_tokens < first.sent_tokens / 2
    assert "SUMMARY of seqs" in swapped.request.messages[1].content

    # The same ledger summarized synchronously at the same point.
    sync_governance = governed(GatedSummarizer(), background=None)
    sync_invocation, _ = await running_invocation(sync_governance, turns=3)
    outcome = await summarize_now(sync_invocation, sync_governance, parent=None, window=WINDOW)
    assert outcome is not None and outcome.advanced
    assert outcome.primary.summary is not None
    assert swapped.projection.summary is not None
    assert outcome.primary.summary.last_seq == swapped.projection.summary.last_seq
    synchronous = builder(sync_invocation, sync_governance)()
    assert synchronous.request.messages == swapped.request.messages


async def test_a_request_that_reaches_the_pre_call_threshold_waits_for_the_summary_in_flight_instead_of_starting_another() -> (
    None
):
    gate = asyncio.Event()
    summarizer = GatedSummarizer(gate=gate)
    governance = governed(summarizer)
    invocation, service = await running_invocation(governance, turns=3)
    build = builder(invocation, governance)
    background = BackgroundCompactions()
    await compact_before_call(invocation, build(), governance=governance, rebuild=build, background=background)
    # A tool result lands and pushes the next request past 0.7 before the summary is done.
    await service.append_event(
        invocation.session, invocation.stamp(Event(author="support", message=Message(role="assistant", content=LONG)))
    )
    over = build()
    assert over.sent_tokens >= 2800
    asyncio.get_running_loop().call_later(0.05, gate.set)

    chosen, report = await compact_before_call(
        invocation, over, governance=governance, rebuild=build, background=background
    )

    assert report is not None and report.background == "waited" and report.status == "advanced"
    assert len(summarizer.requests) == 1  # no synchronous summary on top of the one in flight
    assert chosen.sent_tokens == report.tokens_after < 2800
    assert report.stall_ms >= report.wait_ms >= 40  # the wait is counted as this call's stall
    # The events after the background summary's boundary are still in the request, and the
    # run's user message is kept verbatim even though the summary covers it.
    boundary = chosen.projection.boundary_seq
    shown = {e.id for item in chosen.items for e in item.events}
    after = [e for e in invocation.session.events if (e.seq or 0) > boundary and model_message(e) is not None]
    assert all(e.id in shown for e in after)
    assert any(m.role == "user" and m.content == invocation.message.content for m in chosen.request.messages)


async def test_a_failed_background_summary_costs_the_run_nothing_and_the_synchronous_path_still_compacts() -> None:
    summarizer = GatedSummarizer(fail=True)
    governance = governed(summarizer)
    invocation, service = await running_invocation(governance, turns=3)
    build = builder(invocation, governance)
    background = BackgroundCompactions()
    _, report = await compact_before_call(
        invocation, build(), governance=governance, rebuild=build, background=background
    )
    assert report is not None and report.background == "started"
    await background.join()
    summarizer.fail = False
    await service.append_event(
        invocation.session, invocation.stamp(Event(author="support", message=Message(role="assistant", content=LONG)))
    )
    chosen, report = await compact_before_call(
        invocation, build(), governance=governance, rebuild=build, background=background
    )
    # The failed one is reported, not used; the synchronous summary at 0.7 compacts instead.
    assert report is not None and report.background == "unused_error" and report.status == "advanced"
    assert len(summarizer.requests) == 2 and chosen.sent_tokens < 2800


async def test_in_a_run_the_summary_started_at_one_step_is_in_the_request_of_the_next() -> None:
    summarizer = GatedSummarizer()

    async def lookup(ticket_id: str) -> str:
        """Look up a ticket.

        Args:
            ticket_id: the ticket id
        """
        await asyncio.wait_for(summarizer.finished.wait(), 5)  # the step takes longer than the summary
        return f"ticket {ticket_id}: open"

    model = ScriptedModel.of(ScriptStep.call("lookup", {"ticket_id": "A"}), "A is open.", context_window=WINDOW)
    service = InMemorySessionService()
    _, _, session_id = await session_with_history(
        ScriptedModel.of(context_window=WINDOW), governed(summarizer), turns=3, service=service
    )
    agent = LLMAgent(
        name="support",
        model=model,
        instruction="Be brief.",
        tools=[FunctionTool(lookup)],
        governance=governed(summarizer),
    )
    runner = Runner(app=APP, agents=[agent], session_service=service)

    events = await run_turn(runner, session_id)

    first, second = context_of(events)
    assert first["precall"]["background"] == "started" and first["summary"] is None
    assert second["precall"]["background"] == "swapped" and second["summary"]["version"] == 1
    assert len(summarizer.requests) == 1
    [_, after] = model.requests
    assert "SUMMARY of seqs" in after.messages[1].content
    # The active turn went out whole: its question, the call and its result.
    assert [m.role for m in after.messages[-3:]] == ["user", "assistant", "tool"]
    assert after.messages[-3].content == "and now?"


async def test_a_summary_still_running_when_the_run_ends_is_stored_for_the_next_run() -> None:
    gate = asyncio.Event()
    summarizer = GatedSummarizer(gate=gate)
    model = ScriptedModel.of("fine", "fine again", context_window=WINDOW)
    runner, service, session_id = await session_with_history(model, governed(summarizer), turns=3)
    agent = runner.agent(None)
    assert isinstance(agent, LLMAgent)
    [stats] = context_of(await run_turn(runner, session_id))
    assert stats["precall"]["background"] == "started"
    key = SessionKey(app=APP, user_id="alice", session_id=session_id)
    assert await service.get_summary(key, filter_key=APP) is None
    gate.set()
    await agent.background_compactions.join()
    assert (await service.get_summary(key, filter_key=APP)) is not None

    [stats] = context_of(await run_turn(runner, session_id))
    assert stats["summary"]["version"] == 1  # the next run loads it
    assert len(summarizer.requests) == 1


async def test_closing_the_runner_cancels_a_background_summary_in_flight_and_frees_its_lock() -> None:
    gate = asyncio.Event()  # never opened: the summary would run forever
    summarizer = GatedSummarizer(gate=gate)
    governance = governed(summarizer)
    model = ScriptedModel.of("fine", context_window=WINDOW)
    runner, service, session_id = await session_with_history(model, governance, turns=3)
    agent = runner.agent(None)
    assert isinstance(agent, LLMAgent)
    [stats] = context_of(await run_turn(runner, session_id))
    assert stats["precall"]["background"] == "started"

    await asyncio.wait_for(runner.close(), 5)
    await asyncio.wait_for(agent.background_compactions.join(), 1)  # cancelled, not pending

    key = SessionKey(app=APP, user_id="alice", session_id=session_id)
    assert await service.get_summary(key, filter_key=APP) is None
    gate.set()
    assert governance.summaries is not None
    outcome = await governance.summaries.summarize(service, key, filter_key=APP, force=True, lock_wait_s=0)
    assert outcome.primary.reason == "updated"  # the lock was released on cancel
