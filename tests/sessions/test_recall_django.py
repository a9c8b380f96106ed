"""The RecallIndex contract, run against the in-memory index and DjangoRecallIndex.

The Django backend runs on the configured database: SQLite by default (BM25 in Python),
PostgreSQL when DATABASE_URL says so (full text + pg_trgm); the last tests check what is
particular to each.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import (
    CONTENT_LIMIT,
    HISTORY_NOTE,
    UNSEGMENTED_RANGES,
    AnchorNotFoundError,
    EventSearchRequest,
    InMemoryRecallIndex,
    RecallIndex,
    session_load,
    session_search,
)
from sessions_app.core.session import Session, SessionKey, SessionService, Summary, SummaryBoundary
from tests.sessions.ledger_builders import assistant, tool_call, tool_result, user

APP = "recall"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

# The Django backend reads from worker threads, so its tests need committed data.
pytestmark = pytest.mark.django_db(transaction=True)


class Backend:
    def __init__(self, name: str, service: SessionService, index: RecallIndex, users: Callable[[str], str]) -> None:
        self.name = name
        self.service = service
        self.index = index
        self.user = users
        self._clock = T0

    async def session(self, persona: str, events: list[Event], *, hide_through: int | None = None) -> Session:
        session = await self.service.create_session(app=APP, user_id=self.user(persona))
        for event in events:
            self._clock += timedelta(seconds=1)
            await self.service.append_event(session, event.replace(created_at=self._clock))
        if hide_through is not None:
            events_ = await self.service.list_events(session.key, limit=10_000)
            last = next(e for e in events_ if e.seq == hide_through)
            boundary = SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=hide_through)
            await self.service.put_summary(session.key, Summary(text="Earlier things happened.", boundary=boundary))
        loaded = await self.service.get_session(session.key)
        assert loaded is not None
        return loaded

    async def events(self, session: Session) -> list[Event]:
        return await self.service.list_events(session.key, limit=10_000)


@pytest.fixture(params=["memory", "django"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        service = InMemorySessionService()
        return Backend("memory", service, InMemoryRecallIndex(service), lambda name: name)
    from django.contrib.auth import get_user_model

    from sessions_app.backends import DjangoSessionService
    from sessions_app.recall_backends import DjangoRecallIndex

    # Users are made here, in sync code: the tests themselves run inside an event loop.
    users = {name: str(get_user_model().objects.create_user(username=name).pk) for name in ("alice", "bob")}
    return Backend("django", DjangoSessionService(), DjangoRecallIndex(), users.__getitem__)


def test_both_indexes_implement_the_recall_protocol(backend: Backend) -> None:
    assert isinstance(backend.index, RecallIndex)


def ids(answer: dict[str, Any]) -> list[str]:
    return [r["event_id"] for r in answer["results"]]


# -- search --------------------------------------------------------------------------------------


async def test_hidden_scope_stops_at_the_summary_boundary(backend: Backend) -> None:
    session = await backend.session(
        "alice",
        [
            user("The staging database password rotates every Friday."),
            assistant("Noted: staging database password rotation on Fridays."),
            user("Now about the production database password rotation."),
        ],
        hide_through=2,
    )
    events = await backend.events(session)
    answer = await session_search(backend.index, session=session, query="database password rotation")
    assert set(ids(answer)) == {events[0].id, events[1].id}
    everything = await session_search(
        backend.index, session=session, query="database password rotation", scope="current_session"
    )
    assert set(ids(everything)) == {e.id for e in events}


async def test_other_and_all_sessions_cover_the_users_sessions_only(backend: Backend) -> None:
    older = await backend.session("alice", [user("The invoice export runs nightly at 02:00.")])
    bobs = await backend.session("bob", [user("bob's invoice export runs hourly")])
    current = await backend.session(
        "alice", [user("The invoice export failed."), user("invoice export visible")], hide_through=1
    )
    others = await session_search(backend.index, session=current, query="invoice export", scope="other_sessions")
    assert [r["session_id"] for r in others["results"]] == [older.id]
    everything = await session_search(backend.index, session=current, query="invoice export", scope="all_sessions")
    assert {r["session_id"] for r in everything["results"]} == {older.id, current.id}
    assert bobs.id not in json.dumps(everything)


async def test_the_index_never_returns_another_users_event_whatever_the_request(backend: Backend) -> None:
    bobs = await backend.session("bob", [user("bob's launch code is ZEBRA-42")])
    request = EventSearchRequest(
        query="launch code ZEBRA-42", app=APP, user_id=backend.user("alice"), session_ids=(bobs.id,)
    )
    assert await backend.index.search_events(request) == []
    alice_key = SessionKey(app=APP, user_id=backend.user("alice"), session_id=bobs.id)
    assert await backend.index.scan_events(alice_key, needles=["zebra"]) == []
    assert await backend.index.summaries(alice_key) == {}


async def test_tool_calls_and_partial_events_are_not_indexed_but_tool_results_are(backend: Backend) -> None:
    partial = Event(
        author="agent",
        partial=True,
        state_delta={"k": 1},
        message=Message(role="assistant", content="zanzibar streaming delta"),
    )
    session = await backend.session(
        "alice",
        [
            tool_call("c1", "lookup", {"query": "zanzibar"}),
            partial,
            tool_result("c1", "lookup", '{"island": "zanzibar", "ferry": "daily"}'),
        ],
    )
    answer = await session_search(backend.index, session=session, query="zanzibar", scope="current_session")
    assert [(r["role"], r["tool_call_id"], r["tool_name"]) for r in answer["results"]] == [("tool", "c1", "lookup")]


async def test_events_under_the_floor_are_dropped(backend: Backend) -> None:
    session = await backend.session(
        "alice",
        [
            user("alpha notes"),
            user("alpha bravo notes"),
            user("filler one"),
            user("filler two"),
            user("filler three"),
        ],
        hide_through=5,
    )
    events = await backend.events(session)
    request = EventSearchRequest(query="alpha bravo charlie delta", app=APP, user_id=backend.user("alice"))
    assert [h.event.id for h in await backend.index.search_events(request)] == [events[1].id]
    answer = await session_search(backend.index, session=session, query="alpha bravo charlie delta")
    assert ids(answer) == [events[1].id, events[0].id]  # the second found by the keyword "alpha" alone
    assert answer["results"][1]["matched_query"] == "alpha"


async def test_clause_fallback_finds_what_the_whole_query_does_not(backend: Backend) -> None:
    session = await backend.session(
        "alice",
        [
            user("zebra migration across the plains"),
            user("quantum tunneling, first results"),
            *[user(f"unrelated chatter {i}") for i in range(6)],
        ],
        hide_through=8,
    )
    events = await backend.events(session)
    query = "zebra migration patterns in the serengeti, and quantum tunneling experiments in antarctica"
    answer = await session_search(backend.index, session=session, query=query)
    assert set(ids(answer)) == {events[0].id, events[1].id}


async def test_chinese_text_is_found_by_its_words(backend: Backend) -> None:
    session = await backend.session(
        "alice",
        [
            user("我昨天去了上海看展览，人很多。"),
            user("今天在北京开会，讨论预算。"),
            user("English text about budgets."),
        ],
        hide_through=3,
    )
    events = await backend.events(session)
    assert ids(await session_search(backend.index, session=session, query="上海展览")) == [events[0].id]
    assert ids(await session_search(backend.index, session=session, query="北京 预算")) == [events[1].id]


async def test_the_substring_scan_finds_what_words_do_not(backend: Backend) -> None:
    session = await backend.session(
        "alice", [user("see the configuration file on web-3"), user("展览馆周一闭馆")], hide_through=2
    )
    events = await backend.events(session)
    assert ids(await session_search(backend.index, session=session, query="config")) == [events[0].id]
    scanned = await backend.index.scan_events(session.key, needles=["览馆"])
    assert [e.id for e in scanned] == [events[1].id]


async def test_the_first_hits_carry_a_window_that_skips_tool_calls(backend: Backend) -> None:
    session = await backend.session(
        "alice",
        [
            user("before two"),
            tool_call("c1", "noop", {}),
            user("before one"),
            user("the canary deploy failed on node seven"),
            assistant("after one"),
            assistant("after two"),
            assistant("after three"),
        ],
        hide_through=7,
    )
    answer = await session_search(backend.index, session=session, query="canary deploy failed")
    assert [m["content"] for m in answer["results"][0]["context"]] == [
        "before two",
        "before one",
        "the canary deploy failed on node seven",
        "after one",
        "after two",
    ]
    assert "[match] user: the canary deploy failed on node seven" in answer["results"][0]["snippet"]
    assert answer["note"] == HISTORY_NOTE


# -- load ----------------------------------------------------------------------------------------


async def test_load_anchors_on_an_event_or_on_the_latest_result_of_a_tool_call(backend: Backend) -> None:
    session = await backend.session(
        "alice",
        [
            user("fetch it"),
            tool_call("c9", "fetch", {}),
            tool_result("c9", "fetch", "first attempt: timeout"),
            tool_result("c9", "fetch", "second attempt: 200 OK"),
            assistant("done"),
        ],
    )
    events = await backend.events(session)
    by_event = await session_load(backend.index, session=session, event_id=events[2].id)
    assert [m["event_id"] for m in by_event["messages"]] == [events[0].id, events[2].id, events[3].id]
    # A session object holding none of its events (as a runner loads one after a summary):
    # the tool call id is resolved through the index.
    bare = Session(app=session.app, user_id=session.user_id, id=session.id)
    by_call = await session_load(backend.index, session=bare, tool_call_id="c9", before=0, after=0)
    assert by_call["event_id"] == events[3].id
    assert by_call["messages"][1]["content"] == "fetch: second attempt: 200 OK"
    assert by_call["note"] == HISTORY_NOTE
    with pytest.raises(AnchorNotFoundError):
        await session_load(backend.index, session=session, tool_call_id="nope")


async def test_load_slices_a_large_tool_result_and_pages_to_its_end(backend: Backend) -> None:
    content = "".join(f"line {i:05d}: ok ✓\n" for i in range(3000))
    session = await backend.session("alice", [tool_result("c1", "dump_logs", content)])
    event = (await backend.events(session))[0]
    pieces = []
    offset: int | None = 0
    while offset is not None:
        page = await session_load(backend.index, session=session, event_id=event.id, content_offset=offset)
        message = page["messages"][0]
        assert message["returned_bytes"] <= CONTENT_LIMIT
        pieces.append(message["content"])
        offset = message.get("next_content_offset")
    assert len(pieces) > 1 and "".join(pieces) == content


async def test_load_refuses_another_users_session(backend: Backend) -> None:
    bobs = await backend.session("bob", [user("bob's private note")])
    bob_event = (await backend.events(bobs))[0]
    alices = await backend.session("alice", [user("hello")])
    with pytest.raises(AnchorNotFoundError):
        await session_load(backend.index, session=alices, session_id=bobs.id, event_id=bob_event.id)
    with pytest.raises(AnchorNotFoundError):
        await session_load(backend.index, session=alices, event_id=bob_event.id)
    other_key = SessionKey(app=APP, user_id=backend.user("alice"), session_id=bobs.id)
    assert await backend.index.find_tool_result(other_key, "c1") is None


# -- what is particular to each database ---------------------------------------------------------


def test_the_search_expressions_are_the_indexed_ones() -> None:
    from sessions_app import search

    migration = importlib.import_module("sessions_app.migrations.0003_event_search")
    assert search.FTS_DOCUMENT == migration.FTS_DOCUMENT
    assert search.TRGM_DOCUMENT == migration.TRGM_DOCUMENT
    # The index splits exactly the scripts that the Python analyser cuts into bigrams.
    ranges = re.findall(r"(.)-(.)", UNSEGMENTED_RANGES)
    assert ranges and all(f"\\u{ord(a):04x}-\\u{ord(b):04x}" in search.FTS_DOCUMENT for a, b in ranges)


def _postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


async def test_postgres_search_and_scan_use_the_full_text_and_trigram_indexes(backend: Backend) -> None:
    if backend.name != "django" or not _postgres():
        pytest.skip("PostgreSQL only")
    from asgiref.sync import sync_to_async
    from django.db import connection

    from sessions_app import search

    session = await backend.session("alice", [user("我昨天去了上海看展览"), user("kubernetes upgrade")])

    def plans() -> tuple[str, str, str]:
        # With the table this small the planner prefers other paths; forbidding sequential
        # scans shows whether the statements' expressions can use the indexes at all.
        with connection.cursor() as cursor:
            cursor.execute("SET enable_seqscan = off")
            try:
                explained = []
                for condition, param in (
                    (f"{search.FTS_DOCUMENT} @@ to_tsquery('simple', %s)", search.tsquery_for("上海")),
                    (f"{search.TRGM_DOCUMENT} ILIKE %s", "%上海看%"),
                ):
                    cursor.execute(f"EXPLAIN SELECT id FROM sessions_app_event WHERE {condition}", [param])
                    explained.append("\n".join(row[0] for row in cursor.fetchall()))
            finally:
                cursor.execute("RESET enable_seqscan")
        request = EventSearchRequest(query="上海 kubernetes", app=APP, user_id=backend.user("alice"))
        return explained[0], explained[1], search.explain_search(request)

    fts_plan, trgm_plan, search_plan = await sync_to_async(plans, thread_sensitive=True)()
    assert "event_text_fts" in fts_plan
    assert "event_text_trgm" in trgm_plan
    assert "Execution Time" in search_plan
    scanned = await backend.index.scan_events(session.key, needles=["上海看"])
    assert len(scanned) == 1


async def test_sqlite_search_reads_only_the_newest_events_up_to_the_scan_cap(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend.name != "django" or _postgres():
        pytest.skip("SQLite only")
    from sessions_app import search

    monkeypatch.setattr(search, "SCAN_CAP", 3)
    session = await backend.session(
        "alice", [user("orchid greenhouse notes"), *[user(f"filler {i}") for i in range(3)]]
    )
    request = EventSearchRequest(query="orchid greenhouse", app=APP, user_id=backend.user("alice"))
    assert await backend.index.search_events(request) == []
    monkeypatch.setattr(search, "SCAN_CAP", 10)
    hits = await backend.index.search_events(request)
    assert [h.session_id for h in hits] == [session.id]
