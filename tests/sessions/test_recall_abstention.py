"""session_search can say "nothing" (issue 24, item 2): below the confidence threshold it
answers no_match and tells the agent to say it does not know."""

from __future__ import annotations

import pytest

from sessions_app.core.events import Event, Message
from sessions_app.core.recall import NO_MATCH_BELOW, NO_MATCH_NOTE, answer_confidence, session_search
from sessions_app.recall_tools import RECALL_INSTRUCTION, SEARCH_DESCRIPTION
from tests.sessions.ledger_builders import user
from tests.sessions.test_recall import World, event_ids


def said(author: str, text: str) -> Event:
    return Event(author=author, message=Message(role="user" if author == "ann" else "assistant", content=text))


@pytest.fixture
def world() -> World:
    return World()


async def test_a_query_the_history_does_not_hold_answers_no_match_with_the_note(world: World) -> None:
    session = await world.session(
        "alice",
        [user("We moved the invoices to the new billing database."), user("The staging cluster runs Kubernetes 1.29.")],
        hide_through=2,
    )
    # One shared word ("database") used to clear the keyword fallback's floor.
    answer = await session_search(
        world.index,
        session=session,
        query="which password manager and secrets vault does the security team use for the database admins",
    )
    assert answer["results"] == [] and answer["count"] == 0
    assert answer["no_match"] is True and answer["note"] == NO_MATCH_NOTE
    assert answer["best_confidence"] < NO_MATCH_BELOW
    # Abstention off: the weak hit comes back, with its confidence.
    weak = await session_search(
        world.index,
        session=session,
        query="which password manager and secrets vault does the security team use for the database admins",
        min_confidence=0,
    )
    assert weak["count"] == 1 and weak["results"][0]["confidence"] < NO_MATCH_BELOW and "no_match" not in weak


async def test_a_query_the_history_answers_returns_hits_with_their_confidence(world: World) -> None:
    session = await world.session(
        "alice",
        [user("We moved the invoices to the new billing database."), user("The staging cluster runs Kubernetes 1.29.")],
        hide_through=2,
    )
    events = await world.events(session)
    answer = await session_search(world.index, session=session, query="where did the invoices move?")
    assert event_ids(answer)[0] == events[0].id and "no_match" not in answer
    assert answer["results"][0]["confidence"] == 1.0 == answer["best_confidence"]


async def test_a_question_about_one_participant_counts_the_others_words_for_half(world: World) -> None:
    session = await world.session(
        "alice",
        [said("bob", "I ran a charity race last weekend and it felt great."), said("ann", "Wow, well done!")],
        hide_through=2,
    )
    about_bob = await session_search(world.index, session=session, query="What did bob run last weekend?")
    about_ann = await session_search(world.index, session=session, query="What did ann run last weekend?")
    assert about_ann["results"][0]["event_id"] == about_bob["results"][0]["event_id"]
    assert about_ann["best_confidence"] == pytest.approx(about_bob["best_confidence"] / 2, abs=1e-3)
    assert about_ann["best_confidence"] > 0


def test_confidence_is_the_share_of_the_query_held_whatever_the_session() -> None:
    assert answer_confidence("invoices billing database", "the billing database holds invoices") == 1.0
    assert answer_confidence("invoices billing database", "a database") == pytest.approx(1 / 3)
    assert answer_confidence("invoices billing database", "nothing here") == 0.0
    assert answer_confidence("config", "see the configuration file") == 1.0  # inside a word, as the scan finds it
    assert (
        answer_confidence(
            "what did ann say about invoices", "invoices are late", author="bob", participants=["ann", "bob"]
        )
        == 0.5
    )
    long_text = "the billing database holds invoices " + "filler words " * 500
    assert answer_confidence("invoices billing database", long_text) == 1.0  # length does not dilute it


def test_the_agent_is_told_to_say_it_does_not_know_on_no_match() -> None:
    assert "no_match" in RECALL_INSTRUCTION and "do not know" in RECALL_INSTRUCTION
    assert "no_match" in SEARCH_DESCRIPTION
