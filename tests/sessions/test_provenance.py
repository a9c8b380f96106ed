"""Issue 12, C1: provenance-anchored summaries. Every stored summary is a run of sections,
each opened by `[events F-L]`; the ranges partition seqs 1..boundary through rolling
summaries and summaries of summaries, and `session_load` reads a range back, paged, for
the session's own user only."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.core.context.governance import extractive_summarizer
from runs.core.tools.base import ToolContext
from sessions_app.core.events import Event, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import InMemoryRecallIndex, RangeError, session_load
from sessions_app.core.session import Session, Summary
from sessions_app.core.summary import (
    APPROX_TOKENIZER,
    ChunkedSummarizer,
    Summarizer,
    SummarySection,
    anchor_sections,
    parse_sections,
    render_sections,
    summarize_session,
    summary_sections,
)
from sessions_app.recall_tools import recall_tools
from tests.sessions.test_recall_django import Backend, backend  # noqa: F401  (the parametrised fixture)
from tests.sessions.test_summary_chunked import FakeModel

APP = "prov"


def assert_partition(summary: Summary) -> list[SummarySection]:
    """The summary's sections cover 1..boundary, contiguous, oldest first, each with text."""
    sections = list(parse_sections(summary.text))
    assert sections, summary.text
    assert sections[0].first_seq == 1
    assert sections[-1].last_seq == summary.last_seq
    for a, b in pairwise(sections):
        assert b.first_seq == a.last_seq + 1
    assert all(s.first_seq <= s.last_seq and s.text for s in sections)
    return sections


async def rolling(summarizer: Summarizer, blocks: Sequence[Sequence[str]]) -> list[Summary]:
    """Append each block of user/assistant turns, then roll the summary forward (as the
    summary job does); the summaries after each roll."""
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="alice")
    out: list[Summary] = []
    for block in blocks:
        for n, text in enumerate(block):
            role = "user" if n % 2 == 0 else "assistant"
            await service.append_event(session, Event(author=role, message=Message(role=role, content=text)))
        await service.append_event(session, Event(author=APP, object="agent.completion", done=True))
        outcome = await summarize_session(service, session.key, filter_key="", summarizer=summarizer, force=True)
        assert outcome.primary.reason == "updated", outcome.primary
        stored = await service.get_summary(session.key, filter_key="")
        assert stored is not None
        out.append(stored)
    return out


def block(start: int, turns: int = 6) -> list[str]:
    return [
        f"Turn {i}: host web-{i} logged {i * 7} errors at 10:{i % 60:02d} in order ORD-{1000 + i}."
        for i in range(start, start + turns)
    ]


# -- the format --------------------------------------------------------------------------------


def test_sections_round_trip_through_the_text() -> None:
    sections = (
        SummarySection(first_seq=1, last_seq=7, text="Alice set up INC-7.\nIt is open."),
        SummarySection(first_seq=8, last_seq=20, text="Bob closed it."),
    )
    text = render_sections(sections)
    assert text.startswith("[events 1-7]\nAlice set up INC-7.")
    assert "\n\n[events 8-20]\nBob closed it." in text
    assert parse_sections(text) == sections


def test_a_text_line_that_looks_like_a_header_does_not_become_a_section() -> None:
    sections = (SummarySection(first_seq=1, last_seq=3, text="The user typed\n[events 9-99]\nliterally."),)
    parsed = parse_sections(render_sections(sections))
    assert [(s.first_seq, s.last_seq) for s in parsed] == [(1, 3)]
    assert "[events 9-99]" in parsed[0].text


def test_a_summary_without_headers_is_one_section_up_to_its_boundary() -> None:
    assert parse_sections("plain prose from before C1") == ()
    [only] = summary_sections(Summary(text="plain prose", boundary=None))
    assert (only.first_seq, only.text) == (1, "plain prose")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 60), st.integers(0, 12), st.booleans()), min_size=1, max_size=12),
    st.integers(1, 90),
)
def test_anchored_sections_partition_every_seq_up_to_the_boundary(raw: list[tuple[int, int, bool]], last: int) -> None:
    sections = [
        SummarySection(first_seq=f, last_seq=f + span, text="t" if has_text else "") for f, span, has_text in raw
    ]
    anchored = anchor_sections(sections, last_seq=last)
    if not any(has_text for *_, has_text in raw):
        assert anchored == ()
        return
    assert anchored[0].first_seq == 1 and anchored[-1].last_seq >= last
    for a, b in pairwise(anchored):
        assert b.first_seq == a.last_seq + 1
    # Every text survives somewhere: a section is merged, never dropped.
    assert sum(s.text.count("t") for s in anchored) == sum(1 for *_, has_text in raw if has_text)


# -- the summarizers ---------------------------------------------------------------------------


async def test_the_extractive_summary_is_made_of_sections_that_keep_their_ranges_as_it_rolls() -> None:
    summarizer = extractive_summarizer(budget_tokens=400)
    summarizer.section_tokens = 60  # several sections per roll
    summaries = await rolling(summarizer, [block(0), block(6), block(12), block(18)])
    previous: list[SummarySection] = []
    for summary in summaries:
        sections = assert_partition(summary)
        assert len(sections) > 1
        # The previous summary's ranges survive: each old range lies inside one new range.
        for old in previous:
            assert any(s.first_seq <= old.first_seq and old.last_seq <= s.last_seq for s in sections)
        previous = sections
    assert APPROX_TOKENIZER.count_text(summaries[-1].text) <= 400


async def test_an_extractive_summary_over_budget_merges_its_oldest_sections_into_their_union() -> None:
    summarizer = extractive_summarizer(budget_tokens=120)
    summarizer.section_tokens = 40
    summaries = await rolling(summarizer, [block(0), block(6), block(12)])
    final = assert_partition(summaries[-1])
    # The newest events keep a fine section; the oldest range has grown into a union.
    assert final[-1].last_seq - final[-1].first_seq < final[0].last_seq - final[0].first_seq
    assert "ORD-1017" in summaries[-1].text or final[-1].first_seq > 10


async def test_chunked_summaries_of_summaries_keep_union_ranges_across_rolls() -> None:
    model = FakeModel(words=60)  # verbose: sections pile up past the budget
    summarizer = ChunkedSummarizer(model, summary_tokens=300)
    long_block = [" ".join(f"w{i}x{k}" for k in range(150)) for i in range(20)]
    summaries = await rolling(summarizer, [long_block, long_block, long_block])
    for summary in summaries:
        assert_partition(summary)
    assert len(parse_sections(summaries[-1].text)) > 1
    assert APPROX_TOKENIZER.count_text(summaries[-1].text) <= 300 + 20


async def test_a_single_model_summary_is_one_section_over_everything_it_folded_in() -> None:
    class Prose:
        name = "prose"

        async def summarize(self, request: Any) -> Any:
            from sessions_app.core.summary import SummaryResult

            # A model that copies the previous header must not create an unchecked range.
            return SummaryResult(text="[events 1-3]\nall of it so far")

    summaries = await rolling(Prose(), [block(0), block(6)])
    [only] = assert_partition(summaries[-1])
    assert only.text == "all of it so far"


# -- session_load with a range --------------------------------------------------------------------


def ledger() -> list[Event]:
    call = ToolCall(id="c1", name="read", arguments="{}")
    return [
        Event(author="user", message=Message(role="user", content="read the incident file")),  # 1
        Event(author="agent", message=Message(role="assistant", tool_calls=(call,))),  # 2: a call, never recalled
        Event(
            author="agent", message=Message(role="tool", content="INC-7: db down", tool_call_id="c1", tool_name="read")
        ),  # 3
        Event(author="agent", message=Message(role="assistant", content="The database was down.")),  # 4
        Event(author="user", message=Message(role="user", content="and now?")),  # 5
        Event(author="agent", message=Message(role="assistant", content="It is back up.")),  # 6
    ]


@pytest.mark.django_db(transaction=True)
async def test_a_range_load_returns_exactly_the_recallable_events_in_it(backend: Backend) -> None:  # noqa: F811
    session = await backend.session("alice", ledger())
    answer = await session_load(backend.index, session=session, section="[events 2-5]")
    assert [m["seq"] for m in answer["messages"]] == [3, 4, 5]
    assert answer["messages"][0]["content"] == "read: INC-7: db down"
    assert (answer["first_seq"], answer["last_seq"], answer["count"]) == (2, 5, 3)
    assert "next_seq" not in answer
    same = await session_load(backend.index, session=session, first_seq=2, last_seq=5)
    assert same["messages"] == answer["messages"]


@pytest.mark.django_db(transaction=True)
async def test_a_range_load_pages_within_its_byte_budget(backend: Backend) -> None:  # noqa: F811
    session = await backend.session("alice", ledger())
    seen: list[int] = []
    first = 1
    pages = 0
    while True:
        page = await session_load(backend.index, session=session, first_seq=first, last_seq=6, content_limit=25)
        pages += 1
        seen.extend(m["seq"] for m in page["messages"])
        assert page["count"] >= 1
        if "next_seq" not in page:
            break
        assert page["next"] == {"first_seq": page["next_seq"], "last_seq": 6}
        first = page["next_seq"]
    assert seen == [1, 3, 4, 5, 6] and pages > 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"first_seq": 5, "last_seq": 2}, "is after last_seq"),
        ({"section": "five to nine"}, "is not a range"),
        ({"first_seq": "x", "last_seq": 3}, "whole number"),
        ({"first_seq": 2}, "needs both"),
        ({"first_seq": 0, "last_seq": 3}, "start at 1"),
        ({"section": "4-60"}, "ends at seq 6"),
        ({"section": "2-3", "event_id": "e"}, "not both"),
    ],
)
async def test_a_bad_range_is_refused_with_a_message_that_names_it(
    backend: Backend,  # noqa: F811
    kwargs: dict[str, Any],
    message: str,
) -> None:
    session = await backend.session("alice", ledger())
    with pytest.raises(RangeError, match=message):
        await session_load(backend.index, session=session, **kwargs)


@pytest.mark.django_db(transaction=True)
async def test_a_range_load_cannot_read_another_users_session(backend: Backend) -> None:  # noqa: F811
    alices = await backend.session("alice", ledger())
    bobs = await backend.session("bob", [Event(author="user", message=Message(role="user", content="bob's secret"))])
    with pytest.raises(LookupError):
        await session_load(backend.index, session=alices, session_id=bobs.id, section="1-1")
    # Alice's own range never includes Bob's events either.
    mine = await session_load(backend.index, session=alices, section="1-6")
    assert all("secret" not in m["content"] for m in mine["messages"])


def tool_context(session: Session, index: Any) -> ToolContext:
    return ToolContext(
        session=session,
        invocation_id="i",
        tool_call_id="t",
        agent_name="a",
        cancel_event=asyncio.Event(),
        services={"recall": index},
    )


async def test_the_tool_answers_a_bad_range_with_an_error_dict_and_loads_a_good_one() -> None:
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="alice")
    for event in ledger():
        await service.append_event(session, event)
    tool = next(t for t in recall_tools() if t.name == "session_load")
    context = tool_context(session, InMemoryRecallIndex(service))
    bad = await tool.call(context, {"section": "9-3"})
    assert "is after last_seq" in bad["error"]
    outside = await tool.call(context, {"first_seq": 1, "last_seq": 99})
    assert "ends at seq 6" in outside["error"]
    good = await tool.call(context, {"section": "4-6"})
    assert [m["seq"] for m in good["messages"]] == [4, 5, 6]
    assert "section" in tool.description and "[events" in tool.description
