"""Compaction that cannot overflow (issue 12, C6): ChunkedSummarizer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions_app.core.events import Event, Message
from sessions_app.core.summary import (
    APPROX_TOKENIZER,
    ChunkedSummarizer,
    SummaryRequest,
    conversation_lines,
)

WINDOW = 1000


class ContextTooLong(Exception):
    def __str__(self) -> str:
        return "context_length_exceeded"


@dataclass
class FakeModel:
    """Refuses requests over its window; fails the calls listed in `fail_on` (by call
    number); answers with the first words of each line, so summaries stay short."""

    context_window: int = WINDOW
    fail_on: set[int] = field(default_factory=set)
    words: int = 3
    requests: list[str] = field(default_factory=list)

    async def complete(self, messages: Sequence[Message], *, tools: Sequence[Any] = ()) -> str:
        text = "\n".join(m.content for m in messages)
        self.requests.append(text)
        if APPROX_TOKENIZER.count_messages(messages) > self.context_window:
            raise ContextTooLong()
        if len(self.requests) in self.fail_on:
            raise RuntimeError("upstream 503")
        body = text.split("<conversation>")[-1]
        return " ".join(" ".join(line.split()[: self.words]) for line in body.splitlines() if line.strip())[:400]


def turns(sizes: Sequence[int]) -> tuple[Event, ...]:
    return tuple(
        Event(
            author="user",
            message=Message(role="user", content=f"turn{i} " + " ".join(f"w{i}x{k}" for k in range(n))),
            seq=i + 1,
        )
        for i, n in enumerate(sizes)
    )


def budget(model: FakeModel) -> int:
    return int(model.context_window * 0.7)


async def test_every_request_fits_and_every_event_is_input_whole() -> None:
    model = FakeModel()
    events = turns([150] * 40)  # ~ 40 x 300 tokens: many times the window
    result = await ChunkedSummarizer(model).summarize(SummaryRequest(filter_key="", previous=None, events=events))
    assert result.text
    for request in model.requests:
        assert APPROX_TOKENIZER.count_text(request) <= budget(model)
    for event in events:
        assert any(conversation_lines(event)[0] in r for r in model.requests)


async def test_an_event_larger_than_a_request_is_cut_into_pieces_not_shortened() -> None:
    model = FakeModel()
    [huge] = turns([2000])
    summarizer = ChunkedSummarizer(model)
    await summarizer.summarize(SummaryRequest(filter_key="", previous=None, events=(huge,)))
    words = huge.text.split()
    seen = " ".join(model.requests)
    assert all(w in seen for w in words)
    assert all(APPROX_TOKENIZER.count_text(r) <= budget(model) for r in model.requests)


async def test_a_failed_chunk_is_retried_alone() -> None:
    model = FakeModel(fail_on={2})
    summarizer = ChunkedSummarizer(model)
    events = turns([150] * 12)
    chunks = summarizer.chunks(events)
    assert len(chunks) >= 3
    await summarizer.summarize(SummaryRequest(filter_key="", previous=None, events=events))
    # Call 2 (the second chunk) failed and call 3 is the same request again; chunks 1 and 3 went once.
    assert model.requests[2] == model.requests[1]
    assert model.requests.count(model.requests[0]) == 1


async def test_a_chunk_that_keeps_failing_raises_after_its_attempts() -> None:
    model = FakeModel(fail_on={1, 2, 3})
    with pytest.raises(RuntimeError, match="503"):
        await ChunkedSummarizer(model, attempts=3).summarize(
            SummaryRequest(filter_key="", previous=None, events=turns([10]))
        )
    assert len(model.requests) == 3


async def test_summaries_of_summaries_when_chunk_summaries_do_not_fit_one_request() -> None:
    model = FakeModel(words=60)  # verbose: chunk summaries pile up past one request
    events = turns([150] * 60)
    summarizer = ChunkedSummarizer(model)
    result = await summarizer.summarize(SummaryRequest(filter_key="", previous=None, events=events))
    chunks = len(summarizer.chunks(events))
    assert chunks > 1 and len(result.sections) > 1
    assert len(model.requests) > chunks + 1  # the roll-up needed more than one request
    assert all(APPROX_TOKENIZER.count_text(r) <= budget(model) for r in model.requests)
    # Sections keep their ranges: contiguous, oldest first, covering every seq.
    assert result.sections[0].first_seq == 1 and result.sections[-1].last_seq == 60
    for a, b in zip(result.sections, result.sections[1:], strict=False):
        assert b.first_seq in (a.last_seq, a.last_seq + 1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=900), min_size=1, max_size=25))
def test_chunks_cover_every_event_within_the_room(sizes: list[int]) -> None:
    summarizer = ChunkedSummarizer(FakeModel())
    events = turns(sizes)
    chunks = summarizer.chunks(events)
    room = summarizer.room()
    assert all(sum(APPROX_TOKENIZER.count_text(line) + 1 for line in lines) <= room for _, _, lines in chunks)
    joined = " ".join(" ".join(lines) for _, _, lines in chunks)
    assert joined.split() == " ".join(conversation_lines(e)[0] for e in events).split()
