"""Pre-call compaction (SPEC 4.8), intra-run summaries (4.7) and the per-call context stats."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.context.governance import TIKTOKEN, ContextGovernance, PrecallConfig
from runs.core.context.precall import compact_before_call
from runs.core.context.request import BuiltRequest, build_for_invocation
from runs.core.invocation import Invocation, RunOptions
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import SessionKey, Summary
from sessions_app.core.summary import LLMSummarizer, SummaryEngine, SummaryRequest, SummaryResult
from tests.sessions.ledger_builders import APP

WINDOW = 4000  # pre-call threshold: max(0.7 x 4000, 2000) = 2800 tokens
LONG = "The checkout service logged another upstream timeout while talking to payments. " * 60  # ~780 tokens


class Summarizer:
    name = "scripted"

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers) or ["SUMMARY of the earlier turns"]
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.requests.append(request)
        return SummaryResult(text=self.answers.pop(0) if len(self.answers) > 1 else self.answers[0])


def lookup(ticket_id: str) -> str:
    """Look up a ticket.

    Args:
        ticket_id: the ticket id
    """
    return f"ticket {ticket_id}: open"


def governed(summarizer: Any, **kwargs: Any) -> ContextGovernance:
    return ContextGovernance(summaries=SummaryEngine(summarizer=summarizer, tokenizer=TIKTOKEN), **kwargs)


async def session_with_history(
    model: ScriptedModel,
    governance: ContextGovernance,
    *,
    turns: int = 5,
    service: InMemorySessionService | None = None,
) -> tuple[Runner, InMemorySessionService, str]:
    """A session whose history is ~`turns` x 600 tokens of long answers (no governance yet)."""
    service = service or InMemorySessionService()
    history = ScriptedModel.of(*[f"{LONG} (answer {i})" for i in range(turns)], context_window=WINDOW)
    plain = Runner(
        app=APP, agents=[LLMAgent(name="support", model=history, instruction="Be brief.")], session_service=service
    )
    session_id = None
    for i in range(turns):
        handle = await plain.start(user_id="alice", message=f"question {i}", session_id=session_id)
        session_id = handle.session_id
        await handle.wait()
    agent = LLMAgent(
        name="support", model=model, instruction="Be brief.", tools=[FunctionTool(lookup)], governance=governance
    )
    return Runner(app=APP, agents=[agent], session_service=service), service, session_id or ""


async def run_turn(runner: Runner, session_id: str, message: str = "and now?") -> list[Event]:
    return [e async for e in runner.run(user_id="alice", session_id=session_id, message=message)]


def context_of(events: list[Event]) -> list[dict[str, Any]]:
    return [
        e.extensions["context"] for e in events if not e.partial and e.role == "assistant" and "context" in e.extensions
    ]


def test_the_threshold_is_70_percent_of_the_window_at_least_2000_tokens_and_at_most_the_window() -> None:
    config = PrecallConfig()
    assert config.threshold(100_000) == 70_000
    assert config.threshold(2500) == 2000
    assert config.threshold(1500) == 1500
    with pytest.raises(ValueError, match="ratio"):
        PrecallConfig(ratio=0)


async def test_a_request_under_the_threshold_does_not_summarize() -> None:
    summarizer = Summarizer()
    model = ScriptedModel.of("fine", context_window=100_000)
    runner, _, session_id = await session_with_history(model, governed(summarizer), turns=2)
    events = await run_turn(runner, session_id)
    assert summarizer.requests == []
    [stats] = context_of(events)
    assert stats["precall"] is None and stats["summary"] is None


async def test_a_request_over_the_threshold_is_summarized_and_rebuilt_from_the_snapshot() -> None:
    summarizer = Summarizer()
    model = ScriptedModel.of("fine", context_window=WINDOW)
    runner, service, session_id = await session_with_history(model, governed(summarizer))
    events = await run_turn(runner, session_id, "what now?")

    [request] = summarizer.requests
    assert len(request.events) == 16  # five turns of user, answer, completion, and this turn's question
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["system", "system", "user"]
    assert sent[0].content == "Be brief." and "SUMMARY of the earlier turns" in sent[1].content
    assert sent[2].content == "what now?"  # the active turn, intact
    stored = await service.get_summary(SessionKey(app=APP, user_id="alice", session_id=session_id), filter_key=APP)
    assert stored is not None and stored.text.split("\n", 1)[-1] == "SUMMARY of the earlier turns"
    [stats] = context_of(events)
    assert stats["precall"]["status"] == "advanced" and stats["precall"]["persisted"] is True
    assert stats["precall"]["tokens_before"] >= stats["precall"]["threshold"] == 2800
    assert stats["precall"]["tokens_after"] == stats["sent_tokens"] < 200
    assert stats["summary"]["version"] == 1 and stats["summary"]["last_seq"] == 16  # through this turn's user message
    # The raw-ledger count is what the uncompacted request weighed.
    assert stats["raw_tokens"] == stats["precall"]["tokens_before"]


async def test_a_summary_that_did_not_advance_keeps_the_original_request() -> None:
    summarizer = Summarizer("")  # an empty summary changes nothing
    model = ScriptedModel.of("fine", context_window=WINDOW)
    runner, _, session_id = await session_with_history(model, governed(summarizer))
    events = await run_turn(runner, session_id)
    assert len(summarizer.requests) == 1
    assert len(model.requests[0].messages) == 1 + 5 * 2 + 1
    [stats] = context_of(events)
    assert stats["precall"]["status"] == "not_advanced" and stats["precall"]["summary_reason"] == "empty_text"


async def test_an_advanced_summary_that_failed_to_persist_still_shortens_the_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Unwritable(InMemorySessionService):
        fail = False

        async def advance_summary(self, key: SessionKey, summary: Summary) -> Summary | None:
            if self.fail:
                raise ConnectionError("database went away")
            return await super().advance_summary(key, summary)

    service = Unwritable()
    model = ScriptedModel.of("fine", context_window=WINDOW)
    runner, _, session_id = await session_with_history(model, governed(Summarizer()), service=service)
    service.fail = True
    with caplog.at_level(logging.WARNING):
        events = await run_turn(runner, session_id)
    assert [m.role for m in model.requests[0].messages] == ["system", "system", "user"]
    assert "advanced in memory but was not stored" in caplog.text
    [stats] = context_of(events)
    assert stats["precall"]["status"] == "advanced" and stats["precall"]["persisted"] is False


async def running_invocation(
    governance: ContextGovernance, *, turns: int = 5, service: InMemorySessionService | None = None
) -> tuple[Invocation, InMemorySessionService]:
    """A running invocation over `turns` long turns, its user message persisted."""
    _, service, session_id = await session_with_history(
        ScriptedModel.of(context_window=WINDOW), governance, turns=turns, service=service
    )
    session = await service.get_session(SessionKey(app=APP, user_id="alice", session_id=session_id))
    assert session is not None
    invocation = Invocation(
        invocation_id="inv-now",
        run_id="run-now",
        request_id="req-now",
        app=APP,
        agent_name="support",
        branch="support",
        filter_key=APP,
        session=session,
        session_service=service,
        message=Message(role="user", content="now?"),
        options=RunOptions(),
        cancel_event=asyncio.Event(),
    )
    await service.append_event(session, invocation.stamp(Event(author="user", message=invocation.message)))
    return invocation, service


async def _compaction_inputs() -> tuple[Invocation, BuiltRequest, ContextGovernance]:
    """A running invocation over a long history, and its request (over the threshold)."""
    governance = governed(Summarizer())
    invocation, _ = await running_invocation(governance)
    built = build_for_invocation(invocation, instruction="Be brief.", tools=[], governance=governance, window=WINDOW)
    assert built.sent_tokens >= 2800
    return invocation, built, governance


async def test_an_unsafe_rebuild_keeps_the_original_request(caplog: pytest.LogCaptureFixture) -> None:
    invocation, built, governance = await _compaction_inputs()

    def rebuild_without_the_active_turn() -> BuiltRequest:
        return dataclasses.replace(built, items=tuple(i for i in built.items if not i.active))

    chosen, report = await compact_before_call(
        invocation, built, governance=governance, rebuild=rebuild_without_the_active_turn
    )
    assert chosen is built and report is not None and report.status == "unsafe_rebuild"
    assert "changed the active turn" in caplog.text


async def test_a_rebuild_that_fails_keeps_the_original_request() -> None:
    invocation, built, governance = await _compaction_inputs()

    def broken() -> BuiltRequest:
        raise RuntimeError("a processor cannot replay")

    chosen, report = await compact_before_call(invocation, built, governance=governance, rebuild=broken)
    assert chosen is built and report is not None and report.status == "rebuild_failed"


async def test_the_pre_call_summary_forks_the_request_it_compacts() -> None:
    class Model:
        def __init__(self) -> None:
            self.requests: list[tuple[list[Message], tuple[Any, ...]]] = []

        @property
        def context_window(self) -> int:
            return 100_000

        async def complete(self, messages: Sequence[Message], *, tools: Sequence[Any] = ()) -> str:
            self.requests.append((list(messages), tuple(tools)))
            return "forked summary"

    summary_model = Model()
    summarizer = LLMSummarizer(summary_model, cache_safe_forking=True, tokenizer=TIKTOKEN)
    model = ScriptedModel.of("fine", context_window=WINDOW)
    runner, _, session_id = await session_with_history(model, governed(summarizer))
    await run_turn(runner, session_id, "what now?")
    [(fork, tools)] = summary_model.requests
    # The parent request as it would have been sent, then the fork prompt.
    assert fork[0].content == "Be brief." and fork[1].content == "question 0" and fork[-2].content == "what now?"
    assert "Do not call any tool" in fork[-1].content and [getattr(t, "name", None) for t in tools] == ["lookup"]
    assert "forked summary" in model.requests[0].messages[1].content


async def test_every_model_call_records_its_context_stats_in_the_answer_event() -> None:
    model = ScriptedModel.of(ScriptStep.call("lookup", {"ticket_id": "A"}), "A is open.", context_window=WINDOW)
    runner, service, session_id = await session_with_history(model, governed(Summarizer()), turns=1)
    events = await run_turn(runner, session_id)
    stats = context_of(events)
    assert len(stats) == 2
    for entry in stats:
        json.dumps(entry)  # JSON-safe: it lives in the ledger
        assert entry["window"] == WINDOW and entry["sent_tokens"] > 0 and entry["raw_tokens"] >= entry["sent_tokens"]
        assert set(entry["compaction"]) == {"pass0", "pass1", "pass2", "resume_tail", "fallback", "tokens_saved"}
    stored = await service.list_events(SessionKey(app=APP, user_id="alice", session_id=session_id), limit=100)
    assert [e.extensions["context"] for e in stored if "context" in e.extensions][-2:] == stats


async def test_an_agent_can_summarize_before_every_step_but_the_first() -> None:
    summarizer = Summarizer("intra-run summary")
    model = ScriptedModel.of(
        ScriptStep.call("lookup", {"ticket_id": "A"}),
        ScriptStep.call("lookup", {"ticket_id": "B"}),
        "done",
        context_window=100_000,
    )
    runner, _, session_id = await session_with_history(
        model, governed(summarizer, sync_summary_intra_run=True), turns=1
    )
    await run_turn(runner, session_id)
    assert len(summarizer.requests) == 2  # before steps 2 and 3
    # The summary now covers this turn too: the model sees its user message verbatim and, as
    # the resume tail (SPEC 4.5), only the latest complete tool round; the first round is
    # in the summary.
    last = model.requests[-1].messages
    assert [m.role for m in last] == ["system", "system", "user", "assistant", "tool"]
    assert [c.arguments for c in last[3].tool_calls] == ['{"ticket_id": "B"}']
    assert "intra-run summary" in last[1].content and last[2].content == "and now?"
