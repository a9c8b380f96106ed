"""The demo's summary path is the chunked summarizer (issue 12, C6): it cannot overflow."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentsite.composition import build_summarizer, context_policy
from runs.core.context.governance import TIKTOKEN, ModelSummaryModel
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse
from runs.core.llm.offline import OfflineModel
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.summary import (
    ChunkedSummarizer,
    ExtractiveSummarizer,
    ForkParent,
    LLMSummarizer,
    SummaryEngine,
    SummaryRequest,
)

WINDOW = 1024
TURN = "The payments gateway returned another timeout while the checkout retried the order. " * 8  # ~130 tokens


class ContextTooLong(Exception):
    def __str__(self) -> str:
        return "context_length_exceeded"


@dataclass
class WindowedModel:
    """A summary model that refuses any request over its window, as a provider does, and
    answers with the first words of the conversation it was given."""

    context_window: int = WINDOW
    sizes: list[int] = field(default_factory=list)

    def info(self) -> ModelInfo:
        return ModelInfo(name="windowed-test-model", context_window=self.context_window, provider="scripted")

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        tokens = TIKTOKEN.count_messages(request.messages)
        self.sizes.append(tokens)
        if tokens > self.context_window:
            raise ContextTooLong()
        body = request.messages[-1].content.split("<conversation>")[-1].split("</conversation>")[0]
        yield ModelResponse(
            id="r", partial=False, message=Message(role="assistant", content=" ".join(body.split()[:12]))
        )


async def long_session(service: InMemorySessionService, turns: int) -> tuple[object, list[Event]]:
    session = await service.create_session(app="demo", user_id="alice", session_id="s1")
    events = []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        events.append(
            await service.append_event(
                session,
                Event(
                    author=role if role == "user" else "support",
                    message=Message(role=role, content=f"turn {i}: {TURN}"),
                ),
            )
        )
    return session, events


def test_model_summaries_are_chunked_by_default() -> None:
    summarizer = build_summarizer(context_policy(), WindowedModel())
    assert isinstance(summarizer, ChunkedSummarizer)


def test_chunked_knob_off_gives_the_single_request_summarizer(settings: pytest.FixtureRequest) -> None:
    settings.AGENTSITE_SUMMARY_CHUNKED = False  # type: ignore[attr-defined]  # pytest-django settings fixture
    assert isinstance(build_summarizer(context_policy(), WindowedModel()), LLMSummarizer)


def test_offline_model_keeps_the_extractive_summarizer() -> None:
    # Extraction is local: no request, no window to overflow.
    assert isinstance(build_summarizer(context_policy(), OfflineModel()), ExtractiveSummarizer)


async def test_demo_summary_of_a_session_far_over_the_window_covers_everything_without_overflow() -> None:
    service = InMemorySessionService()
    session, events = await long_session(service, 60)  # ~8k tokens behind a 1k window
    model = WindowedModel()
    engine = SummaryEngine(
        summarizer=build_summarizer(context_policy(), model), tokenizer=TIKTOKEN, context_window=WINDOW
    )
    outcome = await engine.summarize(service, session.key, filter_key="", force=True)
    assert outcome.advanced
    assert outcome.primary.summary is not None
    assert outcome.primary.summary.last_seq == events[-1].seq  # every event, not a prefix
    assert model.sizes and max(model.sizes) <= WINDOW
    assert len(model.sizes) > 1  # it had to chunk


async def test_single_request_summarizer_stops_at_a_prefix_on_the_same_session(settings: pytest.FixtureRequest) -> None:
    # The contrast that motivates the wiring: SPEC 3.4's fallback covers only what fits.
    settings.AGENTSITE_SUMMARY_CHUNKED = False  # type: ignore[attr-defined]  # pytest-django settings fixture
    service = InMemorySessionService()
    session, events = await long_session(service, 60)
    engine = SummaryEngine(
        summarizer=build_summarizer(context_policy(), WindowedModel()), tokenizer=TIKTOKEN, context_window=WINDOW
    )
    outcome = await engine.summarize(service, session.key, filter_key="", force=True)
    assert outcome.primary.summary is not None
    assert outcome.primary.summary.last_seq < events[-1].seq


async def test_chunked_summarizer_forks_from_the_parent_request_when_it_fits() -> None:
    model = WindowedModel(context_window=8192)
    events = tuple(Event(author="user", message=Message(role="user", content=f"turn {i}"), seq=i + 1) for i in range(6))
    parent = ForkParent(messages=(Message(role="user", content="turn 0 ... turn 3"),), covered_last_seq=4)
    summarizer = ChunkedSummarizer(ModelSummaryModel(model), tokenizer=TIKTOKEN, cache_safe_forking=True)
    result = await summarizer.summarize(SummaryRequest(filter_key="", previous=None, events=events, parent=parent))
    assert result.last_included is not None and result.last_included.seq == 4
    assert len(model.sizes) == 1


def test_clear_at_least_setting_reaches_the_demo_governance(settings: pytest.FixtureRequest) -> None:
    from agentsite.composition import build_governance

    settings.AGENTSITE_COMPACTION_CLEAR_AT_LEAST = 16_384  # type: ignore[attr-defined]  # pytest-django settings fixture
    governance = build_governance(SummaryEngine(summarizer=None))
    assert governance.compaction.clear_at_least == 16_384


def test_background_compaction_is_on_by_default_with_the_demo_thresholds_and_can_be_turned_off(settings: Any) -> None:
    from agentsite.composition import build_governance

    settings.AGENTSITE_DEMO_GOVERNANCE = True
    governance = build_governance(SummaryEngine(summarizer=None))
    assert governance.background is not None and governance.background.ratio == 0.25
    assert governance.background.threshold(8192) < governance.precall.threshold(8192)  # starts before the blocking path
    settings.AGENTSITE_DEMO_GOVERNANCE = False
    assert build_governance(SummaryEngine(summarizer=None)).background.ratio == 0.55  # type: ignore[union-attr]
    settings.AGENTSITE_COMPACTION_SOFT = False
    assert build_governance(SummaryEngine(summarizer=None)).background is None
