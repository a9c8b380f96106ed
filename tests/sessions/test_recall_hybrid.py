"""Evidence-grade recall (issue 12, C7): hybrid ranking, filters, why a hit is hidden,
unit-complete loads. Run against the in-memory index and DjangoRecallIndex."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import (
    InMemoryRecallIndex,
    RecallIndex,
    SearchHit,
    hybrid_rank,
    last_manifest_dispositions,
    named_speakers,
    session_load,
    session_search,
)
from sessions_app.core.session import Session, SessionService, Summary, SummaryBoundary
from tests.sessions.ledger_builders import tool_call, tool_result

APP = "recall"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

pytestmark = pytest.mark.django_db(transaction=True)


def said(author: str, text: str, role: str = "user") -> Event:
    return Event(author=author, message=Message(role=role, content=text))  # type: ignore[arg-type]  # user/assistant


class Backend:
    def __init__(self, service: SessionService, index: RecallIndex, users: Callable[[str], str]) -> None:
        self.service = service
        self.index = index
        self.user = users
        self._clock = T0

    async def session(self, events: list[Event], *, hide_through: int | None = None) -> Session:
        session = await self.service.create_session(app=APP, user_id=self.user("alice"))
        for event in events:
            self._clock += timedelta(seconds=1)
            await self.service.append_event(session, event.replace(created_at=self._clock))
        if hide_through is not None:
            stored = await self.service.list_events(session.key, limit=10_000)
            last = next(e for e in stored if e.seq == hide_through)
            boundary = SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=hide_through)
            await self.service.put_summary(session.key, Summary(text="Earlier things happened.", boundary=boundary))
        loaded = await self.service.get_session(session.key)
        assert loaded is not None
        return loaded


@pytest.fixture(params=["memory", "django"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        service = InMemorySessionService()
        return Backend(service, InMemoryRecallIndex(service), lambda name: name)
    from django.contrib.auth import get_user_model

    from sessions_app.backends import DjangoSessionService
    from sessions_app.recall_backends import DjangoRecallIndex

    users = {"alice": str(get_user_model().objects.create_user(username="alice").pk)}
    return Backend(DjangoSessionService(), DjangoRecallIndex(), users.__getitem__)


def hit(seq: int, author: str, text: str, session_id: str = "s") -> SearchHit:
    event = said(author, text).replace(seq=seq)
    return SearchHit(session_id=session_id, event=event, text=text, role="user", score=1.0)


def test_hybrid_rank_prefers_the_speaker_the_query_names() -> None:
    pool = [hit(1, "Melanie", "I went hiking with my kids."), hit(9, "Caroline", "Hiking is my therapy.")]
    ranked = hybrid_rank("Where did Caroline go hiking?", pool)
    assert [h.event.author for h in ranked] == ["Caroline", "Melanie"]


def test_hybrid_rank_lifts_a_hit_next_to_a_strong_one() -> None:
    pool = [hit(10, "a", "question"), hit(30, "b", "far"), hit(40, "c", "farther"), hit(11, "d", "answer")]
    ranked = hybrid_rank("unrelated words", pool)
    assert [h.event.seq for h in ranked][:2] == [10, 11]


def test_hybrid_rank_is_a_permutation_and_keeps_lexical_order_without_signals() -> None:
    pool = [hit(s, "x", "zzz") for s in (1, 5, 9, 13)]
    assert hybrid_rank("qqq", pool) == pool
    assert hybrid_rank("qqq", pool[:1]) == pool[:1]


def test_named_speakers_match_whole_words_only() -> None:
    assert named_speakers("What did Jon say to Jonathan?", ["Jon", "Jo", "Jonathan", "Gina"]) == {"Jon", "Jonathan"}


async def test_search_filters_by_speaker_role_and_tool(backend: Backend) -> None:
    session = await backend.session(
        [
            said("Caroline", "The adoption agency called about the paperwork."),
            said("Melanie", "Adoption paperwork takes months, the agency said.", "assistant"),
            tool_call("c1", "lookup_agency", {"q": "adoption"}),
            tool_result("c1", "lookup_agency", "adoption agency paperwork: open Mondays"),
            said("Caroline", "Thanks."),
        ],
        hide_through=5,
    )
    by = await session_search(backend.index, session=session, query="adoption agency paperwork", speaker="caroline")
    assert [r["seq"] for r in by["results"]] == [1]
    tools = await session_search(
        backend.index, session=session, query="adoption agency paperwork", tool_name="lookup_agency"
    )
    assert [r["seq"] for r in tools["results"]] == [4]
    roles = await session_search(backend.index, session=session, query="adoption agency paperwork", role="assistant")
    assert [r["seq"] for r in roles["results"]] == [2]


async def test_each_hit_says_why_it_is_hidden(backend: Backend) -> None:
    big = "deploy log line " * 400
    session = await backend.session(
        [
            said("user", "Deploy the canary to eu-west."),
            tool_call("c1", "deploy", {"region": "eu-west"}),
            tool_result("c1", "deploy", "canary deploy ok " + big),
            tool_call("c2", "deploy", {"region": "us-east"}),
            tool_result("c2", "deploy", "canary deploy failed " + big),
            said("agent", "The canary deploy failed in us-east.", "assistant"),
        ],
        hide_through=1,
    )
    # The last call's manifest, as the runner stores it on the answer event.
    manifest = {
        "ranges": [
            ["summarized", 1, 1],
            ["verbatim", 2, 2],
            ["placeholder", 3, 3],
            ["verbatim", 4, 4],
            ["truncated", 5, 5],
            ["verbatim", 6, 6],
        ]
    }
    session.events.append(session.events[-1].replace(extensions={"context": {"manifest": manifest}}))
    assert last_manifest_dispositions(session)[3] == "placeholder"
    answer = await session_search(
        backend.index, session=session, query="canary deploy", scope="current_session", top_k=10
    )
    reasons = {r["seq"]: r["hidden"] for r in answer["results"]}
    assert reasons == {1: "summarized", 3: "elided", 5: "truncated", 6: "visible"}


async def test_hidden_is_unknown_before_any_call_recorded_a_manifest(backend: Backend) -> None:
    session = await backend.session([said("user", "The kiln fires at 1200 degrees."), said("user", "ok")])
    answer = await session_search(backend.index, session=session, query="kiln degrees", scope="current_session")
    assert [r["hidden"] for r in answer["results"]] == ["unknown"]


async def test_unit_load_brings_a_tool_result_with_its_call(backend: Backend) -> None:
    session = await backend.session(
        [
            said("user", "Check the invoice."),
            tool_call("c7", "read_invoice", {"number": "INV-88"}),
            tool_result("c7", "read_invoice", "INV-88: 420 EUR, paid"),
            said("agent", "It is paid.", "assistant"),
        ]
    )
    result = next(e for e in session.events if e.seq == 3)
    loaded = await session_load(backend.index, session=session, event_id=result.id, unit=True)
    assert [m["seq"] for m in loaded["messages"]] == [2, 3]
    assert loaded["messages"][0]["tool_calls"] == [
        {"id": "c7", "name": "read_invoice", "arguments": json.dumps({"number": "INV-88"})}
    ]
    assert loaded["messages"][1]["content"] == "read_invoice: INV-88: 420 EUR, paid"
    window = await session_load(backend.index, session=session, event_id=result.id)
    assert [m["seq"] for m in window["messages"]] == [1, 3, 4]  # the seed's ±1 window: no call


async def test_unit_load_of_a_message_is_the_whole_message_alone(backend: Backend) -> None:
    text = "A long user turn. " * 300
    session = await backend.session([said("user", "before"), said("user", text), said("user", "after")])
    loaded = await session_load(backend.index, session=session, seq=2, unit=True, before=3, after=3)
    assert [m["content"] for m in loaded["messages"]] == [text]
    assert loaded["unit"] is True
