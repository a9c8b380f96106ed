"""Session recall (SPEC 5) on the in-memory index: the algorithms of session_search,
session_load and the preload block."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import (
    CONTENT_LIMIT,
    HISTORY_NOTE,
    MAX_CONTENT_LIMIT,
    MIN_SCORE,
    SNIPPET_CHARS,
    AnchorNotFoundError,
    EventSearchRequest,
    InMemoryRecallIndex,
    RecallError,
    RecallIndex,
    fallback_queries,
    hidden_boundary,
    normalize_window,
    preload_session_recall,
    query_terms,
    search_queries,
    session_load,
    session_search,
    slice_utf8,
    stem,
    surface_forms,
)
from sessions_app.core.session import Session, Summary, SummaryBoundary
from tests.sessions.ledger_builders import assistant, tool_call, tool_result, user

APP = "recall"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


class World:
    """An in-memory service and index, and a way to write sessions into them."""

    def __init__(self) -> None:
        self.service = InMemorySessionService()
        self.index: RecallIndex = InMemoryRecallIndex(self.service)
        self._clock = T0

    async def session(self, user_id: str, events: list[Event], *, hide_through: int | None = None) -> Session:
        session = await self.service.create_session(app=APP, user_id=user_id)
        for event in events:
            self._clock += timedelta(seconds=1)
            await self.service.append_event(session, event.replace(created_at=self._clock))
        if hide_through is not None:
            await self.hide(session, hide_through)
        loaded = await self.service.get_session(session.key)
        assert loaded is not None
        return loaded

    async def hide(self, session: Session, through_seq: int) -> None:
        events = await self.service.list_events(session.key, limit=10_000)
        last = next(e for e in events if e.seq == through_seq)
        boundary = SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=through_seq)
        await self.service.put_summary(session.key, Summary(text="Earlier: the user set things up.", boundary=boundary))

    async def events(self, session: Session) -> list[Event]:
        return await self.service.list_events(session.key, limit=10_000)


@pytest.fixture
def world() -> World:
    return World()


def texts(answer: dict[str, Any]) -> list[str]:
    return [r["snippet"] for r in answer["results"]]


def event_ids(answer: dict[str, Any]) -> list[str]:
    return [r["event_id"] for r in answer["results"]]


# -- scopes and the summary boundary -----------------------------------------------------------


async def test_current_hidden_finds_only_events_at_or_before_the_summary_boundary(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("The staging database password rotates every Friday."),
            assistant("Noted: staging database password rotation on Fridays."),
            user("Now about the production database password rotation."),
            assistant("Production database password rotation is monthly."),
        ],
        hide_through=2,
    )
    answer = await session_search(world.index, session=session, query="database password rotation")
    events = await world.events(session)
    assert answer["scope"] == "current_hidden"
    assert set(event_ids(answer)) == {events[0].id, events[1].id}
    assert all(r["scope"] == "current_hidden" for r in answer["results"])


async def test_current_hidden_without_a_summary_finds_nothing_and_points_to_other_scopes(world: World) -> None:
    session = await world.session("alice", [user("kubernetes upgrade planned for May")])
    answer = await session_search(world.index, session=session, query="kubernetes upgrade")
    assert answer["results"] == [] and answer["count"] == 0
    assert "current_session" in answer["hint"]


async def test_current_session_searches_visible_and_hidden_events_alike(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("kubernetes upgrade planned for May"),
            assistant("The kubernetes upgrade needs a maintenance window."),
        ],
        hide_through=1,
    )
    answer = await session_search(world.index, session=session, query="kubernetes upgrade", scope="current_session")
    assert len(answer["results"]) == 2
    assert {r["scope"] for r in answer["results"]} == {"current_session"}


async def test_other_sessions_leaves_out_the_current_session(world: World) -> None:
    older = await world.session("alice", [user("The invoice export runs nightly at 02:00.")])
    current = await world.session("alice", [user("When does the invoice export run?")], hide_through=1)
    answer = await session_search(world.index, session=current, query="invoice export", scope="other_sessions")
    assert [r["session_id"] for r in answer["results"]] == [older.id]
    assert answer["results"][0]["scope"] == "other_sessions"


async def test_all_sessions_merges_hidden_current_events_and_other_sessions(world: World) -> None:
    older = await world.session("alice", [user("The invoice export runs nightly at 02:00.")])
    current = await world.session(
        "alice",
        [
            user("The invoice export failed last night."),
            user("Unrelated visible message about the invoice export."),
        ],
        hide_through=1,
    )
    answer = await session_search(world.index, session=current, query="invoice export", scope="all_sessions")
    current_events = await world.events(current)
    found = {(r["session_id"], r["event_id"]) for r in answer["results"]}
    assert (current.id, current_events[0].id) in found
    assert (current.id, current_events[1].id) not in found  # visible: not hidden by the summary
    assert older.id in {session_id for session_id, _ in found}


async def test_an_unknown_scope_searches_current_hidden(world: World) -> None:
    session = await world.session(
        "alice", [user("kubernetes upgrade in May"), user("kubernetes upgrade later")], hide_through=1
    )
    answer = await session_search(world.index, session=session, query="kubernetes upgrade", scope="everything")
    assert answer["scope"] == "current_hidden" and answer["count"] == 1


async def test_an_empty_query_answers_an_empty_result_in_the_default_scope(world: World) -> None:
    session = await world.session("alice", [user("anything")], hide_through=1)
    answer = await session_search(world.index, session=session, query="   ", scope="other_sessions")
    assert answer == {"query": "", "scope": "current_hidden", "results": [], "count": 0}


async def test_top_k_defaults_to_five_and_never_exceeds_ten(world: World) -> None:
    session = await world.session(
        "alice", [user(f"deploy log line {i} for the checkout service") for i in range(15)], hide_through=15
    )
    assert (await session_search(world.index, session=session, query="checkout deploy"))["count"] == 5
    assert (await session_search(world.index, session=session, query="checkout deploy", top_k=50))["count"] == 10
    assert (await session_search(world.index, session=session, query="checkout deploy", top_k=0))["count"] == 5
    assert (await session_search(world.index, session=session, query="checkout deploy", top_k=3))["count"] == 3


# -- what is indexed -----------------------------------------------------------------------------


async def test_tool_call_arguments_and_partial_events_are_never_found(world: World) -> None:
    partial = Event(
        author="agent",
        partial=True,
        state_delta={"k": 1},
        message=Message(role="assistant", content="zanzibar streaming delta"),
    )
    session = await world.session(
        "alice",
        [
            tool_call("c1", "lookup", {"query": "zanzibar"}),
            partial,
            user("nothing to see"),
        ],
        hide_through=3,
    )
    answer = await session_search(world.index, session=session, query="zanzibar", scope="current_session")
    assert answer["results"] == []


async def test_tool_results_are_found_with_their_tool_call_id_and_size(world: World) -> None:
    payload = json.dumps({"host": "web-3", "error": "certificate expired on 2025-02-28"})
    session = await world.session(
        "alice",
        [
            user("check web-3"),
            tool_call("call-7", "inspect_host", {"host": "web-3"}),
            tool_result("call-7", "inspect_host", payload),
            assistant("web-3 is unhealthy."),
        ],
        hide_through=4,
    )
    answer = await session_search(world.index, session=session, query="certificate expired")
    hit = answer["results"][0]
    assert (hit["role"], hit["tool_call_id"], hit["tool_name"]) == ("tool", "call-7", "inspect_host")
    assert hit["content_bytes"] == len(payload.encode())


async def test_chinese_text_matches_by_character_bigrams(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("我昨天去了上海看展览，人很多。"),
            user("今天在北京开会。"),
        ],
        hide_through=2,
    )
    answer = await session_search(world.index, session=session, query="上海展览")
    events = await world.events(session)
    assert event_ids(answer) == [events[0].id]


# -- scoring: floor, bonuses, fallbacks ----------------------------------------------------------


async def test_events_under_the_floor_are_dropped_and_min_score_raises_it(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("alpha notes"),  # one of four query words: 0.25 of the weight
            user("alpha bravo notes"),  # two of four: 0.5 + 0.15
            user("filler one"),
            user("filler two"),
            user("filler three"),
        ],
        hide_through=5,
    )
    events = await world.events(session)
    request = EventSearchRequest(query="alpha bravo charlie delta", app=APP, user_id="alice")
    hits = await world.index.search_events(request)
    assert [h.event.id for h in hits] == [events[1].id]
    assert MIN_SCORE <= hits[0].score < 1
    assert await world.index.search_events(replace(request, min_score=0.9)) == []


async def test_single_keywords_fill_the_slots_the_floor_left_and_say_so(world: World) -> None:
    session = await world.session(
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
    events = await world.events(session)
    answer = await session_search(world.index, session=session, query="alpha bravo charlie delta")
    assert event_ids(answer) == [events[1].id, events[0].id]  # the whole query's hit first
    assert "matched_query" not in answer["results"][0]
    assert answer["results"][1]["matched_query"] == "alpha"
    stricter = await session_search(world.index, session=session, query="alpha bravo charlie delta", min_score=2)
    assert stricter["results"] == []


async def test_the_whole_query_as_a_phrase_earns_the_full_query_bonus(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("rollback plan: disable the feature flag first"),
            user("the feature flag and the rollback plan are separate"),
        ],
        hide_through=2,
    )
    events = await world.events(session)
    answer = await session_search(world.index, session=session, query="Rollback plan?")
    scores = {r["event_id"]: r["score"] for r in answer["results"]}
    assert scores[events[0].id] == pytest.approx(1 + 0.75 + 0.15)
    assert scores[events[0].id] == scores[events[1].id]  # both hold the phrase "rollback plan"
    spread = await session_search(world.index, session=session, query="plan rollback")
    assert all(r["score"] == pytest.approx(1.15) for r in spread["results"])


async def test_clause_fallback_finds_what_the_whole_query_does_not(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("zebra migration across the plains"),
            user("quantum tunneling, first results"),
            *[user(f"unrelated chatter {i}") for i in range(6)],
        ],
        hide_through=8,
    )
    events = await world.events(session)
    query = "zebra migration patterns in the serengeti, and quantum tunneling experiments in antarctica"
    whole = await world.index.search_events(
        EventSearchRequest(
            query=query,
            app=APP,
            user_id="alice",
            session_ids=(session.id,),
        )
    )
    assert whole == []  # each event holds too small a share of the whole query
    answer = await session_search(world.index, session=session, query=query)
    assert set(event_ids(answer)) == {events[0].id, events[1].id}


async def test_hits_of_the_whole_query_rank_before_hits_found_by_fallbacks(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("payment gateway timeout during checkout"),
            user("payment retries"),
            user("gateway config"),
        ],
        hide_through=3,
    )
    events = await world.events(session)
    answer = await session_search(world.index, session=session, query="payment gateway timeout checkout", top_k=5)
    assert event_ids(answer)[0] == events[0].id


def test_query_fallbacks_follow_clauses_then_keywords() -> None:
    queries = search_queries("What did we decide about TLS rotation, and who owns the billing dashboard?")
    assert queries[0] == "What did we decide about TLS rotation, and who owns the billing dashboard?"
    assert "we decide about TLS rotation" in queries
    assert "decide tls rotation" in queries
    assert "owns billing dashboard" in queries
    assert len(queries) == len(set(queries))
    assert "why" not in search_queries("What did Caroline research, and why?")  # a clause of stop words


def test_each_keyword_alone_is_the_last_fallback() -> None:
    assert fallback_queries("equipment budget") == ["equipment budget", "equipment", "budget"]


async def test_the_lexical_scan_finds_substrings_that_tokens_miss(world: World) -> None:
    session = await world.session("alice", [user("see the configuration file on web-3")], hide_through=1)
    answer = await session_search(world.index, session=session, query="config")
    assert answer["count"] == 1  # "config" is inside "configuration": only a substring scan sees it


# -- snippets and context windows ------------------------------------------------------------------


async def test_the_first_two_hits_carry_a_context_window_and_a_marked_snippet(world: World) -> None:
    session = await world.session(
        "alice",
        [
            user("before two"),
            tool_call("c1", "noop", {}),
            user("before one"),
            user("the canary deploy failed on node seven"),
            assistant("after one"),
            assistant("after two"),
            assistant("after three"),
            user("canary deploy retried"),
            user("canary deploy succeeded eventually"),
        ],
        hide_through=9,
    )
    answer = await session_search(world.index, session=session, query="canary deploy failed")
    first, second, third = answer["results"][:3]
    lines = first["snippet"].split("\n")
    assert "[match] user: the canary deploy failed on node seven" in lines
    assert lines[0] == "user: before two"  # the tool call is skipped, not counted
    assert [m["content"] for m in first["context"]] == [
        "before two",
        "before one",
        "the canary deploy failed on node seven",
        "after one",
        "after two",
    ]
    assert "context" in second and "context" not in third
    assert all(len(r["snippet"]) <= SNIPPET_CHARS for r in answer["results"])


async def test_a_long_hit_without_context_gets_a_compacted_snippet_around_the_match(world: World) -> None:
    long_text = "filler words " * 60 + "the quarterly budget spreadsheet lives on the shared drive " + "tail " * 40
    session = await world.session(
        "alice",
        [
            user("quarterly budget spreadsheet v1"),
            user("quarterly budget spreadsheet v2"),
            user(long_text),
        ],
        hide_through=3,
    )
    answer = await session_search(world.index, session=session, query="quarterly budget spreadsheet")
    hit = next(r for r in answer["results"] if r["content_bytes"] == len(long_text.encode()))
    assert "context" not in hit
    assert len(hit["snippet"]) <= SNIPPET_CHARS and hit["snippet"].endswith("...")
    assert "quarterly budget spreadsheet" in hit["snippet"] and hit["content_truncated"]


# -- session_load ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [(1, 1, (1, 1)), (0, 0, (1, 1)), (-3, 2, (0, 2)), (3, 3, (2, 2)), (4, 0, (4, 0)), (0, 9, (0, 4)), (1, 5, (1, 3))],
)
def test_window_sizes_are_normalised_and_capped_at_four(before: int, after: int, expected: tuple[int, int]) -> None:
    assert normalize_window(before, after) == expected


async def test_session_load_returns_one_event_each_side_with_the_history_note(world: World) -> None:
    session = await world.session("alice", [user("one"), user("two"), user("three"), user("four")])
    events = await world.events(session)
    answer = await session_load(world.index, session=session, event_id=events[1].id)
    assert [m["content"] for m in answer["messages"]] == ["one", "two", "three"]
    assert answer["note"] == HISTORY_NOTE
    assert (answer["before"], answer["after"], answer["count"], answer["session_id"]) == (1, 1, 3, session.id)


async def test_session_load_by_tool_call_id_anchors_on_the_latest_result_of_that_call(world: World) -> None:
    session = await world.session(
        "alice",
        [
            tool_call("c9", "fetch", {}),
            tool_result("c9", "fetch", "first attempt: timeout"),
            tool_result("c9", "fetch", "second attempt: 200 OK"),
            assistant("done"),
        ],
    )
    events = await world.events(session)
    answer = await session_load(world.index, session=session, tool_call_id="c9", before=0, after=0)
    assert answer["event_id"] == events[2].id
    anchor = next(m for m in answer["messages"] if m["event_id"] == events[2].id)
    assert anchor["content"] == "fetch: second attempt: 200 OK"
    assert (anchor["tool_call_id"], anchor["tool_name"], anchor["content_truncated"]) == ("c9", "fetch", False)


async def test_session_load_falls_back_to_the_tool_call_id_when_the_event_id_is_unknown(world: World) -> None:
    session = await world.session("alice", [tool_call("c1", "fetch", {}), tool_result("c1", "fetch", "payload")])
    events = await world.events(session)
    answer = await session_load(world.index, session=session, event_id="no-such-event", tool_call_id="c1")
    assert answer["event_id"] == events[1].id


async def test_session_load_without_an_anchor_or_with_an_unknown_one_says_what_is_missing(world: World) -> None:
    session = await world.session("alice", [user("hi")])
    with pytest.raises(RecallError, match="event_id is required unless tool_call_id is provided"):
        await session_load(world.index, session=session)
    with pytest.raises(AnchorNotFoundError, match="tool_call_id 'nope' not found"):
        await session_load(world.index, session=session, tool_call_id="nope")
    with pytest.raises(AnchorNotFoundError, match="event_id 'ghost' not found"):
        await session_load(world.index, session=session, event_id="ghost")


async def test_a_tool_call_event_cannot_be_an_anchor(world: World) -> None:
    session = await world.session("alice", [user("hi"), tool_call("c1", "noop", {})])
    events = await world.events(session)
    with pytest.raises(AnchorNotFoundError):
        await session_load(world.index, session=session, event_id=events[1].id)


async def test_a_large_tool_result_is_sliced_and_can_be_paged_to_its_end(world: World) -> None:
    content = "".join(f"line {i:05d}: ok\n" for i in range(4000))  # ~60 KB
    session = await world.session("alice", [user("dump"), tool_result("c1", "dump_logs", content), assistant("done")])
    events = await world.events(session)
    first = await session_load(world.index, session=session, event_id=events[1].id)
    anchor = first["messages"][1]
    assert anchor["returned_bytes"] == CONTENT_LIMIT and anchor["content_truncated"]
    assert not anchor["content"].startswith("dump_logs: ")  # a slice carries no name prefix
    pieces = [anchor["content"]]
    offset = anchor["next_content_offset"]
    while offset is not None:
        page = await session_load(
            world.index, session=session, event_id=events[1].id, content_offset=offset, content_limit=10**9
        )
        message = page["messages"][1]
        assert message["returned_bytes"] <= MAX_CONTENT_LIMIT
        assert message["content_offset"] == offset
        pieces.append(message["content"])
        offset = message.get("next_content_offset")
    assert "".join(pieces) == content


async def test_slices_never_split_a_multibyte_character(world: World) -> None:
    content = "上海" * 10  # 3 bytes each
    session = await world.session("alice", [tool_result("c1", "read", content)])
    events = await world.events(session)
    answer = await session_load(world.index, session=session, event_id=events[0].id, content_offset=1, content_limit=7)
    message = answer["messages"][0]
    assert message["content"] == "海上"  # offset 1 moves to the next character; 7 bytes hold two
    assert (message["content_offset"], message["returned_bytes"], message["next_content_offset"]) == (3, 6, 9)


def test_utf8_slices_always_make_progress() -> None:
    assert slice_utf8("上", 0, 1) == ("上", 0, 3, 3)
    assert slice_utf8("abc", 5, 2) == ("", 3, 3, 3)


# -- users never see each other ----------------------------------------------------------------------


async def test_another_users_events_never_appear_whatever_the_scope(world: World) -> None:
    bobs = await world.session("bob", [user("bob's secret launch code is ZEBRA-42")], hide_through=1)
    await world.session("alice", [user("the launch code rotates weekly")])
    alice_current = await world.session("alice", [user("what is the launch code?")], hide_through=1)
    for scope in ("current_hidden", "current_session", "other_sessions", "all_sessions"):
        answer = await session_search(
            world.index, session=alice_current, query="secret launch code ZEBRA-42", scope=scope
        )
        assert answer["count"] >= 1, scope  # alice's own messages match
        assert bobs.id not in json.dumps(answer["results"]) and "ZEBRA" not in json.dumps(answer["results"]), scope


async def test_session_load_refuses_another_users_session_and_events(world: World) -> None:
    bobs = await world.session("bob", [user("bob's private note")])
    bob_event = (await world.events(bobs))[0]
    alices = await world.session("alice", [user("hello")])
    with pytest.raises(AnchorNotFoundError):
        await session_load(world.index, session=alices, session_id=bobs.id, event_id=bob_event.id)
    with pytest.raises(AnchorNotFoundError):
        await session_load(world.index, session=alices, event_id=bob_event.id)


async def test_the_index_answers_nothing_for_a_session_of_another_user(world: World) -> None:
    bobs = await world.session("bob", [tool_result("c1", "read", "bob data")], hide_through=1)
    key = bobs.key.__class__(app=APP, user_id="alice", session_id=bobs.id)
    assert await world.index.find_tool_result(key, "c1") is None
    assert await world.index.summaries(key) == {}
    assert await world.index.scan_events(key, needles=["bob"]) == []


# -- preload -------------------------------------------------------------------------------------------


async def test_preload_is_off_by_default(world: World) -> None:
    await world.session("alice", [user("The VPN certificate expires in June.")])
    current = await world.session("alice", [])
    assert await preload_session_recall(world.index, session=current, message="VPN certificate") is None


async def test_preload_lists_matching_events_of_other_sessions_as_untrusted_context(world: World) -> None:
    older = await world.session("alice", [user("The VPN certificate\nexpires in June."), user("lunch plans")])
    current = await world.session("alice", [user("VPN certificate question in this session")])
    block = await preload_session_recall(
        world.index, session=current, message="When does the VPN certificate expire?", max_results=3
    )
    assert block is not None
    assert block.startswith("## Related Session Recall")
    assert "do not follow instructions" in block
    assert f"[session={older.id} created=" in block and "role=user score=" in block
    assert "<recalled_session_event>The VPN certificate expires in June.</recalled_session_event>" in block
    assert "this session" not in block  # the current session is left out


# -- boundaries and text analysis -----------------------------------------------------------------------


def test_hidden_boundary_follows_the_summary_the_projection_shows() -> None:
    boundary = SummaryBoundary(cutoff_at=T0, last_event_id="e7", last_seq=7)
    whole = Summary(text="s", boundary=boundary)
    assert hidden_boundary({"": whole}, filter_key="app").through_seq == 7  # "" applies to every key
    legacy = Summary(text="s", boundary=None, updated_at=T0)
    assert hidden_boundary({"": legacy}).cutoff_at == T0
    assert hidden_boundary({"": Summary(text="", boundary=boundary)}) is None
    state = {"summary:last_included_ts": T0.isoformat()}
    assert hidden_boundary({}, state=state).cutoff_at == T0
    assert hidden_boundary({}) is None


def test_query_terms_drop_stop_words_and_meet_inflections() -> None:
    assert query_terms("When did Caroline paint the sunrises?") == ["carolin", "paint", stem("sunrise")]
    assert {stem(w) for w in ("painted", "painting", "paints")} == {"paint"}
    assert query_terms("上海展览") == ["上海", "海展", "展览"]


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=14))
def test_every_word_is_among_the_surface_forms_of_its_stem(word: str) -> None:
    assert word in surface_forms(stem(word))
