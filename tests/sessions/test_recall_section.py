"""Section-scoped recall (issue 24, item 4; C1): `session_search` within a summary
section's range finds the evidence inside it and nothing outside, for the session's own
user only, and answers a bad range with a message naming it, as `session_load` does."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import InMemoryRecallIndex, RangeError, session_search
from sessions_app.core.recall.sections import SectionRef, rank_sections, search_sections
from sessions_app.core.session import Summary
from sessions_app.recall_tools import recall_tools
from tests.sessions.test_provenance import tool_context
from tests.sessions.test_recall_django import Backend, backend  # noqa: F401  (the parametrised fixture)


def said(role: str, text: str) -> Event:
    return Event(author="user" if role == "user" else "agent", message=Message(role=role, content=text))  # type: ignore[arg-type]


def ledger() -> list[Event]:
    # The invoice number is discussed twice: in seqs 2-3 and again in 6-7.
    return [
        said("user", "Let's plan the trip to Lisbon."),  # 1
        said("user", "The hotel invoice number is INV-100 for the Lisbon stay."),  # 2
        said("assistant", "Noted, invoice INV-100 for the hotel."),  # 3
        said("user", "Now the car rental for Porto."),  # 4
        said("assistant", "The rental desk opens at nine."),  # 5
        said("user", "The rental invoice number is INV-200 for the Porto car."),  # 6
        said("assistant", "Noted, invoice INV-200 for the car."),  # 7
    ]


def seqs(answer: dict[str, Any]) -> list[int]:
    return [r["seq"] for r in answer["results"]]


@pytest.mark.django_db(transaction=True)
async def test_a_section_scoped_search_returns_only_hits_inside_the_range(backend: Backend) -> None:  # noqa: F811
    session = await backend.session("alice", ledger(), hide_through=7)
    whole = await session_search(backend.index, session=session, query="invoice number", scope="current_session")
    assert {2, 3, 6, 7} <= set(seqs(whole))
    scoped = await session_search(backend.index, session=session, query="invoice number", section="[events 4-7]")
    assert seqs(scoped) and set(seqs(scoped)) <= {4, 5, 6, 7}
    assert seqs(scoped)[0] == 6 and scoped["section"] == "4-7"
    by_seqs = await session_search(backend.index, session=session, query="invoice number", first_seq=1, last_seq=3)
    assert seqs(by_seqs) and set(seqs(by_seqs)) <= {1, 2, 3}
    # A range the summary does not hide is searched too: the range, not the boundary, decides.
    tail = await backend.session("alice", ledger(), hide_through=2)
    assert set(seqs(await session_search(backend.index, session=tail, query="INV-200", section="5-7"))) <= {5, 6, 7}


@pytest.mark.django_db(transaction=True)
async def test_a_section_without_the_answer_says_no_match(backend: Backend) -> None:  # noqa: F811
    session = await backend.session("alice", ledger(), hide_through=7)
    answer = await session_search(backend.index, session=session, query="Lisbon hotel breakfast", section="4-7")
    assert answer["results"] == [] and answer["no_match"] is True and answer["section"] == "4-7"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"first_seq": 5, "last_seq": 2}, "is after last_seq"),
        ({"section": "five to nine"}, "is not a range"),
        ({"first_seq": 2}, "needs both"),
        ({"first_seq": 0, "last_seq": 3}, "start at 1"),
        ({"section": "4-60"}, "ends at seq 7"),
        ({"section": "2-3", "first_seq": 2, "last_seq": 3}, "give the range once"),
    ],
)
async def test_a_bad_section_is_refused_with_a_message_that_names_it(
    backend: Backend,  # noqa: F811
    kwargs: dict[str, Any],
    message: str,
) -> None:
    session = await backend.session("alice", ledger())
    with pytest.raises(RangeError, match=message):
        await session_search(backend.index, session=session, query="invoice", **kwargs)


@pytest.mark.django_db(transaction=True)
async def test_a_section_search_cannot_read_another_users_session(backend: Backend) -> None:  # noqa: F811
    bobs = await backend.session("bob", [said("user", "bob's invoice secret INV-900")])
    alice = await backend.session("alice", ledger())
    # Bob's session id with Alice as the user: the index refuses it, whatever the range.
    spoofed = dataclasses.replace(bobs, user_id=alice.user_id)
    with pytest.raises(LookupError):
        await session_search(backend.index, session=spoofed, query="invoice secret", section="1-1")


async def test_the_tool_searches_a_section_and_answers_a_bad_one_with_an_error_dict() -> None:
    service = InMemorySessionService()
    session = await service.create_session(app="sec", user_id="alice")
    for event in ledger():
        await service.append_event(session, event)
    tool = next(t for t in recall_tools() if t.name == "session_search")
    context = tool_context(session, InMemoryRecallIndex(service))
    good = await tool.call(context, {"query": "invoice number", "section": "4-7"})
    assert seqs(good) and set(seqs(good)) <= {4, 5, 6, 7}
    assert "is after last_seq" in (await tool.call(context, {"query": "invoice", "section": "9-3"}))["error"]
    assert "ends at seq 7" in (await tool.call(context, {"query": "invoice", "first_seq": 1, "last_seq": 99}))["error"]
    assert "section" in tool.description and "[events F-L]" in tool.description
    assert {"section", "first_seq", "last_seq"} <= set(tool.spec().parameters["properties"])


# -- which sections to follow (issue 24, item 4: `rank_sections`) -------------------------------

LISBON = SectionRef(first_seq=1, last_seq=3, text="The user planned a trip and talked about a hotel.")
PORTO = SectionRef(first_seq=4, last_seq=7, text="Opening hours of a desk.")


def test_the_probe_picks_the_section_that_holds_the_best_hit_when_the_summary_says_little() -> None:
    # Neither text names an invoice: the probe's best hit (seq 6) decides.
    choice = rank_sections("rental invoice number", [LISBON, PORTO], [6, 2, 7], top=1)
    assert choice.sections == (PORTO,) and not choice.weak
    assert choice.sections[0].range == "4-7"


def test_the_summary_and_the_probe_both_count() -> None:
    # The summary points at Lisbon's hotel, the probe at Porto: with room for two, both are followed,
    # the section both signals favour first.
    hotel = SectionRef(first_seq=1, last_seq=3, text="The hotel invoice for the trip.")
    choice = rank_sections("hotel invoice", [hotel, PORTO], [2, 6], top=2)
    assert choice.sections == (hotel, PORTO) and not choice.weak


def test_sections_without_a_probe_hit_are_weak_evidence() -> None:
    # The summary matches but the probe found nothing in either range: the caller searches everything.
    choice = rank_sections("hotel trip", [LISBON, PORTO], [12, 15], top=2)
    assert choice.weak and set(choice.sections) == {LISBON, PORTO}
    assert rank_sections("hotel", [], [1]).weak
    assert rank_sections("hotel", [LISBON], [1], top=0).sections == ()
    empty = SectionRef(first_seq=5, last_seq=4, text="hotel")
    assert rank_sections("hotel", [empty, LISBON], [2], top=2).sections == (LISBON,)


@pytest.mark.django_db(transaction=True)
async def test_following_the_picked_section_finds_the_evidence(backend: Backend) -> None:  # noqa: F811
    session = await backend.session("alice", ledger(), hide_through=7)
    query = "rental invoice number for the car"
    probe = await session_search(backend.index, session=session, query=query, min_confidence=0)
    choice = rank_sections(query, [LISBON, PORTO], seqs(probe), top=1)
    assert choice.sections == (PORTO,) and not choice.weak
    scoped = await session_search(backend.index, session=session, query=query, section=choice.sections[0].range)
    assert seqs(scoped)[0] == 6 and set(seqs(scoped)) <= {4, 5, 6, 7}


@pytest.mark.django_db(transaction=True)
async def test_search_sections_follows_the_picked_sections_and_falls_back_when_they_hold_nothing(
    backend: Backend,  # noqa: F811
) -> None:
    session = await backend.session("alice", ledger(), hide_through=7)
    boundary = next(iter((await backend.index.summaries(session.key)).values())).boundary
    text = f"[events 1-3]\n{LISBON.text}\n\n[events 4-7]\n{PORTO.text}"
    await backend.service.put_summary(session.key, Summary(text=text, boundary=boundary))
    loaded = await backend.service.get_session(session.key)
    assert loaded is not None
    answer = await search_sections(backend.index, session=loaded, query="rental invoice number for the car")
    assert answer["sections"][0] == "4-7" and answer["results"][0]["seq"] == 6
    assert answer["count"] == len(answer["results"]) > 0
    # Nothing in any section: a plain search answers, and it says no match.
    nothing = await search_sections(backend.index, session=loaded, query="zebra migration patterns")
    assert nothing["sections"] == [] and nothing["results"] == []
