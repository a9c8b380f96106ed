"""The SessionService contract, run against every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from sessions_app.core.cache import CachedSessionService
from sessions_app.core.events import Event, EventError, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import (
    SessionKey,
    SessionNotFoundError,
    SessionService,
    StateKeyError,
    Summary,
    SummaryBoundary,
)

APP = "contract"

# The Django backend works from worker threads, so its tests need committed data.
pytestmark = pytest.mark.django_db(transaction=True)


class Backend:
    def __init__(self, service: SessionService, users: Callable[[str], str]) -> None:
        self.service = service
        self.user = users


@pytest.fixture(params=["memory", "django", "cached-django"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return Backend(InMemorySessionService(), lambda name: name)
    from django.contrib.auth import get_user_model

    from sessions_app.backends import DjangoSessionService

    # Users are made here, in sync code: the tests themselves run inside an event loop.
    users = {name: str(get_user_model().objects.create_user(username=name).pk) for name in ("alice", "bob")}
    if request.param == "cached-django":
        # The process cache over the Django backend (issue 18) keeps the whole contract.
        return Backend(CachedSessionService(DjangoSessionService()), users.__getitem__)
    return Backend(DjangoSessionService(), users.__getitem__)


def user_event(text: str, **kwargs: Any) -> Event:
    return Event(author="user", message=Message(role="user", content=text), **kwargs)


def assistant_event(text: str = "", **kwargs: Any) -> Event:
    return Event(author="agent", message=Message(role="assistant", content=text), **kwargs)


async def test_created_session_is_empty_and_can_be_read_back(backend: Backend) -> None:
    alice = backend.user("alice")
    created = await backend.service.create_session(app=APP, user_id=alice, agent="support", title="TLS", state={"k": 1})
    loaded = await backend.service.get_session(created.key)
    assert loaded is not None
    assert (loaded.id, loaded.agent, loaded.title, loaded.state) == (created.id, "support", "TLS", {"k": 1})
    assert loaded.events == [] and loaded.last_seq == 0


async def test_creating_a_session_with_a_taken_id_is_refused(backend: Backend) -> None:
    alice = backend.user("alice")
    await backend.service.create_session(app=APP, user_id=alice, session_id="s-1")
    with pytest.raises(ValueError, match="s-1"):
        await backend.service.create_session(app=APP, user_id=alice, session_id="s-1")


async def test_appended_events_get_consecutive_seqs_and_round_trip(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    call = ToolCall(id="c1", name="lookup", arguments='{"id": "INC-1"}')
    originals = [
        user_event("hello"),
        Event(author="agent", message=Message(role="assistant", tool_calls=(call,)), usage=None),
        Event(
            author="agent",
            object="tool.response",
            message=Message(role="tool", content='{"ok": true}', tool_call_id="c1", tool_name="lookup"),
        ),
        assistant_event("done", done=True, finish_reason="stop", extensions={"x": [1, 2]}),
        Event(
            author="agent",
            object="error",
            error=EventError(type="model_error", message="boom"),
            message=Message(role="assistant", content="An error occurred"),
        ),
    ]
    saved = [await backend.service.append_event(session, e) for e in originals]
    assert [e.seq for e in saved] == [1, 2, 3, 4, 5]
    stored = await backend.service.list_events(session.key)
    assert [e.seq for e in stored] == [1, 2, 3, 4, 5]
    for original, back in zip(originals, stored, strict=True):
        assert back == original.replace(seq=back.seq)
    assert session.last_seq == 5 and [e.id for e in session.events] == [e.id for e in originals]


async def test_appending_the_same_event_id_twice_stores_it_once(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    event = user_event("once")
    first = await backend.service.append_event(session, event)
    again = await backend.service.append_event(session, event)
    assert first.seq == again.seq == 1
    assert len(await backend.service.list_events(session.key)) == 1
    assert len(session.events) == 1


async def test_a_batch_appends_in_order_with_consecutive_seqs(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    await backend.service.append_event(session, user_event("first"))
    saved = await backend.service.append_events(
        session, [assistant_event("a"), assistant_event("b"), assistant_event("c")]
    )
    assert [e.seq for e in saved] == [2, 3, 4]
    assert [e.text for e in await backend.service.list_events(session.key)] == ["first", "a", "b", "c"]
    assert [e.seq for e in session.events] == [1, 2, 3, 4] and session.last_seq == 4
    assert await backend.service.append_events(session, []) == []


async def test_a_batch_stores_an_id_already_in_the_ledger_or_the_batch_once(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    known = await backend.service.append_event(session, user_event("known"))
    fresh = assistant_event("fresh")
    saved = await backend.service.append_events(session, [user_event("known", id=known.id), fresh, fresh])
    assert [e.seq for e in saved] == [1, 2, 2]
    assert [e.text for e in await backend.service.list_events(session.key)] == ["known", "fresh"]
    assert len(session.events) == 2 and session.last_seq == 2


async def test_a_batch_merges_state_deltas_in_order(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice, state={"a": 1})
    await backend.service.append_events(
        session,
        [
            assistant_event("x", state_delta={"a": 2, "b": 1}),
            Event(author="agent", state_delta={"b": 3}),
        ],
    )
    loaded = await backend.service.get_session(session.key)
    assert loaded is not None and loaded.state == {"a": 2, "b": 3} == session.state


async def test_a_batch_into_a_deleted_or_foreign_session_is_refused_whole(backend: Backend) -> None:
    alice, bob = backend.user("alice"), backend.user("bob")
    session = await backend.service.create_session(app=APP, user_id=alice)
    foreign = await backend.service.get_session(session.key)
    assert foreign is not None
    foreign.user_id = bob
    with pytest.raises(SessionNotFoundError):
        await backend.service.append_events(foreign, [user_event("x"), user_event("y")])
    await backend.service.delete_session(session.key)
    with pytest.raises(SessionNotFoundError):
        await backend.service.append_events(session, [user_event("x")])


async def test_state_deltas_merge_into_session_state(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice, state={"a": 1, "b": 1})
    await backend.service.append_event(session, assistant_event("x", state_delta={"b": 2, "c": {"d": 3}}))
    await backend.service.append_event(session, Event(author="agent", state_delta={"c": None}))
    loaded = await backend.service.get_session(session.key)
    assert loaded is not None
    assert loaded.state == {"a": 1, "b": 2, "c": None}
    assert session.state == loaded.state


async def test_event_limit_loads_only_the_newest_events_in_order(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    for i in range(7):
        await backend.service.append_event(session, user_event(f"m{i}"))
    loaded = await backend.service.get_session(session.key, event_limit=3)
    assert loaded is not None
    assert [e.text for e in loaded.events] == ["m4", "m5", "m6"]
    assert loaded.last_seq == 7


async def test_list_events_pages_by_seq(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    for i in range(5):
        await backend.service.append_event(session, user_event(f"m{i}"))
    page = await backend.service.list_events(session.key, after_seq=2, limit=2)
    assert [e.seq for e in page] == [3, 4]


async def test_another_users_session_is_invisible(backend: Backend) -> None:
    alice, bob = backend.user("alice"), backend.user("bob")
    session = await backend.service.create_session(app=APP, user_id=alice)
    await backend.service.append_event(session, user_event("secret"))
    bobs_key = SessionKey(app=APP, user_id=bob, session_id=session.id)
    assert await backend.service.get_session(bobs_key) is None
    assert await backend.service.list_sessions(app=APP, user_id=bob) == []
    assert await backend.service.delete_session(bobs_key) is False
    with pytest.raises(SessionNotFoundError):
        await backend.service.list_events(bobs_key)
    assert await backend.service.get_session(session.key) is not None


async def test_list_sessions_shows_newest_first(backend: Backend) -> None:
    alice = backend.user("alice")
    first = await backend.service.create_session(app=APP, user_id=alice)
    second = await backend.service.create_session(app=APP, user_id=alice)
    await backend.service.append_event(first, user_event("bump"))
    listed = await backend.service.list_sessions(app=APP, user_id=alice)
    assert [s.id for s in listed] == [first.id, second.id]


async def test_deleting_a_session_removes_its_ledger(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    await backend.service.append_event(session, user_event("bye"))
    assert await backend.service.delete_session(session.key) is True
    assert await backend.service.get_session(session.key) is None
    with pytest.raises(SessionNotFoundError):
        await backend.service.append_event(session, user_event("after delete"))


async def test_concurrent_appends_never_share_a_seq(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    await asyncio.gather(*(backend.service.append_event(session, user_event(f"c{i}")) for i in range(20)))
    stored = await backend.service.list_events(session.key, limit=100)
    assert sorted(e.seq for e in stored) == list(range(1, 21))
    assert len({e.id for e in stored}) == 20


async def test_summaries_are_stored_per_filter_key(backend: Backend) -> None:
    alice = backend.user("alice")
    session = await backend.service.create_session(app=APP, user_id=alice)
    assert await backend.service.get_summary(session.key) is None
    boundary = SummaryBoundary(cutoff_at=datetime(2026, 1, 2, tzinfo=UTC), last_event_id="e9", last_seq=9)
    await backend.service.put_summary(session.key, Summary(filter_key="", text="v1", boundary=boundary))
    await backend.service.put_summary(session.key, Summary(filter_key="app/x", text="branch"))
    await backend.service.put_summary(session.key, Summary(filter_key="", text="v2", boundary=boundary))
    whole = await backend.service.get_summary(session.key)
    branch = await backend.service.get_summary(session.key, filter_key="app/x")
    assert whole is not None and whole.text == "v2" and whole.boundary == boundary
    assert branch is not None and branch.text == "branch" and branch.boundary is None


# -- context governance: summaries that advance, turns loaded after a summary ----------------


def _boundary_at(event: Event) -> SummaryBoundary:
    assert event.seq is not None
    return SummaryBoundary(cutoff_at=event.created_at, last_event_id=event.id, last_seq=event.seq)


async def _turns(backend: Backend, count: int, *, tool_round: bool = False) -> tuple[Any, list[Event]]:
    """`count` turns of user message, [tool call, tool result], answer, each its own invocation."""
    session = await backend.service.create_session(app=APP, user_id=backend.user("alice"))
    saved = []
    for i in range(count):
        inv = f"inv-{i}"
        saved.append(
            await backend.service.append_event(session, user_event(f"q{i}", invocation_id=inv, filter_key=APP))
        )
        if tool_round:
            call = ToolCall(id=f"c{i}", name="lookup")
            saved.append(
                await backend.service.append_event(
                    session,
                    Event(
                        author="agent",
                        invocation_id=inv,
                        filter_key=APP,
                        message=Message(role="assistant", tool_calls=(call,)),
                    ),
                )
            )
            saved.append(
                await backend.service.append_event(
                    session,
                    Event(
                        author="agent",
                        invocation_id=inv,
                        filter_key=APP,
                        object="tool.response",
                        message=Message(role="tool", content="r", tool_call_id=f"c{i}", tool_name="lookup"),
                    ),
                )
            )
        saved.append(
            await backend.service.append_event(
                session, assistant_event(f"a{i}", invocation_id=inv, filter_key=APP, done=True)
            )
        )
    return session, saved


async def test_advancing_a_summary_writes_text_and_boundary_together_and_counts_versions(backend: Backend) -> None:
    session, saved = await _turns(backend, 3)
    first = await backend.service.advance_summary(
        session.key,
        Summary(filter_key=APP, text="v1", boundary=_boundary_at(saved[1]), covered_events=2, covered_tokens=9),
    )
    second = await backend.service.advance_summary(
        session.key,
        Summary(filter_key=APP, text="v2", boundary=_boundary_at(saved[3]), covered_events=4, covered_tokens=20),
    )
    assert first is not None and second is not None
    assert (first.version, second.version) == (1, 2)
    stored = await backend.service.get_summary(session.key, filter_key=APP)
    assert stored is not None
    assert (stored.text, stored.boundary, stored.version) == ("v2", _boundary_at(saved[3]), 2)
    assert (stored.covered_events, stored.covered_tokens) == (4, 20)


async def test_advancing_a_summary_never_moves_its_boundary_backwards(backend: Backend) -> None:
    session, saved = await _turns(backend, 3)
    assert await backend.service.advance_summary(
        session.key, Summary(filter_key=APP, text="late", boundary=_boundary_at(saved[5]))
    )
    assert (
        await backend.service.advance_summary(
            session.key, Summary(filter_key=APP, text="early", boundary=_boundary_at(saved[2]))
        )
        is None
    )
    assert (
        await backend.service.advance_summary(
            session.key, Summary(filter_key=APP, text="again", boundary=_boundary_at(saved[5]))
        )
        is None
    )
    stored = await backend.service.get_summary(session.key, filter_key=APP)
    assert stored is not None and (stored.text, stored.last_seq, stored.version) == ("late", 6, 1)
    with pytest.raises(ValueError, match="boundary"):
        await backend.service.advance_summary(session.key, Summary(filter_key=APP, text="no boundary"))


async def test_concurrent_advances_keep_the_furthest_boundary(backend: Backend) -> None:
    session, saved = await _turns(backend, 5)
    results = await asyncio.gather(
        *(
            backend.service.advance_summary(
                session.key, Summary(filter_key=APP, text=f"to {e.seq}", boundary=_boundary_at(e))
            )
            for e in saved
        )
    )
    stored = await backend.service.get_summary(session.key, filter_key=APP)
    assert stored is not None and stored.last_seq == 10 and stored.text == "to 10"
    assert stored.version == sum(1 for r in results if r is not None)


async def test_a_turn_loads_only_the_events_after_the_summary_boundary(backend: Backend) -> None:
    session, saved = await _turns(backend, 4)
    await backend.service.advance_summary(
        session.key, Summary(filter_key=APP, text="s", boundary=_boundary_at(saved[3]))
    )
    loaded = await backend.service.get_session(session.key, event_limit=100, after_summary=APP)
    assert loaded is not None
    assert [e.seq for e in loaded.events] == [5, 6, 7, 8]
    assert loaded.summaries[APP].text == "s" and loaded.last_seq == 8
    # Without after_summary the newest window loads, whatever the summary says.
    plain = await backend.service.get_session(session.key, event_limit=3)
    assert plain is not None and [e.seq for e in plain.events] == [6, 7, 8]


async def test_a_turn_cut_by_the_boundary_is_loaded_from_its_user_message(backend: Backend) -> None:
    session, saved = await _turns(backend, 3, tool_round=True)
    # Turn 2 is seqs 5-8 (user, call, result, answer); the summary stops at its tool call.
    await backend.service.advance_summary(
        session.key, Summary(filter_key=APP, text="s", boundary=_boundary_at(saved[5]))
    )
    loaded = await backend.service.get_session(session.key, after_summary=APP)
    assert loaded is not None and [e.seq for e in loaded.events] == [5, 6, 7, 8, 9, 10, 11, 12]
    capped = await backend.service.get_session(session.key, event_limit=2, after_summary=APP)
    assert capped is not None and [e.seq for e in capped.events] == [11, 12]


async def test_a_summary_of_a_parent_key_bounds_the_load_when_the_key_has_none(backend: Backend) -> None:
    session, saved = await _turns(backend, 2)
    await backend.service.advance_summary(
        session.key, Summary(filter_key="", text="all", boundary=_boundary_at(saved[1]))
    )
    loaded = await backend.service.get_session(session.key, after_summary=APP)
    assert loaded is not None and [e.seq for e in loaded.events] == [3, 4]
    none = await backend.service.get_session(session.key, after_summary="unrelated")
    assert none is not None and [e.seq for e in none.events] == [3, 4]  # "" covers every key


# -- state scopes (SPEC 2.1, 2.5) -----------------------------------------------------------------


async def test_spec_2_1_user_state_is_shared_by_the_users_sessions(backend: Backend) -> None:
    alice, bob = backend.user("alice"), backend.user("bob")
    first = await backend.service.create_session(app=APP, user_id=alice)
    await backend.service.append_event(first, assistant_event("noted", state_delta={"user:lang": "fr", "step": 1}))
    assert first.state == {"user:lang": "fr", "step": 1}
    second = await backend.service.create_session(app=APP, user_id=alice)
    assert second.state == {"user:lang": "fr"}  # the user's keys, not the other session's
    loaded = await backend.service.get_session(second.key)
    assert loaded is not None and loaded.state == {"user:lang": "fr"}
    bobs = await backend.service.create_session(app=APP, user_id=bob)
    assert bobs.state == {}
    assert await backend.service.list_user_states(app=APP, user_id=alice) == {"lang": "fr"}
    assert await backend.service.list_user_states(app=APP, user_id=bob) == {}
    assert await backend.service.list_user_states(app="other-app", user_id=alice) == {}
    # A listing shows each session's own state, without the scopes.
    listed = {s.id: s.state for s in await backend.service.list_sessions(app=APP, user_id=alice)}
    assert listed == {first.id: {"step": 1}, second.id: {}}


async def test_spec_2_1_app_state_is_shared_by_every_user_of_the_app(backend: Backend) -> None:
    alice, bob = backend.user("alice"), backend.user("bob")
    session = await backend.service.create_session(app=APP, user_id=alice)
    await backend.service.append_events(
        session,
        [
            assistant_event("a", state_delta={"app:banner": "v1"}),
            assistant_event("b", state_delta={"app:banner": "v2"}),
        ],
    )
    bobs = await backend.service.create_session(app=APP, user_id=bob)
    loaded = await backend.service.get_session(bobs.key)
    assert loaded is not None and loaded.state == {"app:banner": "v2"} == bobs.state
    assert await backend.service.list_app_states(app=APP) == {"banner": "v2"}
    assert await backend.service.list_app_states(app="other-app") == {}


async def test_spec_2_5_app_and_user_state_update_list_delete(backend: Backend) -> None:
    alice = backend.user("alice")
    service = backend.service
    await service.update_app_state(app=APP, state={"app:theme": "dark", "limit": 3})
    await service.update_user_state(app=APP, user_id=alice, state={"user:tz": "UTC", "name": "Alice"})
    assert await service.list_app_states(app=APP) == {"theme": "dark", "limit": 3}
    assert await service.list_user_states(app=APP, user_id=alice) == {"tz": "UTC", "name": "Alice"}
    session = await service.create_session(app=APP, user_id=alice, state={"k": 1})
    assert session.state == {"k": 1, "app:theme": "dark", "app:limit": 3, "user:tz": "UTC", "user:name": "Alice"}
    await service.delete_app_state(app=APP, key="app:limit")
    await service.delete_user_state(app=APP, user_id=alice, key="name")
    await service.delete_user_state(app=APP, user_id=alice, key="never-set")  # no error
    assert await service.list_app_states(app=APP) == {"theme": "dark"}
    loaded = await service.get_session(session.key)
    assert loaded is not None and loaded.state == {"k": 1, "app:theme": "dark", "user:tz": "UTC"}


async def test_spec_2_5_scope_updates_refuse_keys_of_another_scope(backend: Backend) -> None:
    alice = backend.user("alice")
    service = backend.service
    with pytest.raises(StateKeyError, match="user:x"):
        await service.update_app_state(app=APP, state={"user:x": 1})
    with pytest.raises(StateKeyError, match="temp:x"):
        await service.update_user_state(app=APP, user_id=alice, state={"temp:x": 1})
    with pytest.raises(StateKeyError, match="app:x"):
        await service.update_user_state(app=APP, user_id=alice, state={"app:x": 1})
    with pytest.raises(ValueError, match="app"):
        await service.list_app_states(app="")
    assert await service.list_app_states(app=APP) == {}


async def test_spec_2_1_update_session_state_refuses_app_and_user_keys_and_writes_no_event(backend: Backend) -> None:
    alice = backend.user("alice")
    service = backend.service
    session = await service.create_session(app=APP, user_id=alice, state={"a": 1})
    for key in ("app:x", "user:x"):
        with pytest.raises(StateKeyError, match=key):
            await service.update_session_state(session.key, {key: 1})
    await service.update_session_state(session.key, {"a": 2, "temp:scratch": "s"})
    loaded = await service.get_session(session.key)
    assert loaded is not None and loaded.state == {"a": 2, "temp:scratch": "s"}
    assert loaded.last_seq == 0 and await service.list_events(session.key) == []
    bobs = SessionKey(app=APP, user_id=backend.user("bob"), session_id=session.id)
    with pytest.raises(SessionNotFoundError):
        await service.update_session_state(bobs, {"a": 3})


async def test_spec_2_5_state_initialisation_sets_a_key_once(backend: Backend) -> None:
    alice = backend.user("alice")
    service = backend.service
    session = await service.create_session(app=APP, user_id=alice)
    results = await asyncio.gather(
        *(service.initialize_session_state(session.key, state_key="plan", value=f"plan {i}") for i in range(5))
    )
    assert sum(created for _, created in results) == 1
    stored = {value for value, _ in results}
    assert len(stored) == 1
    loaded = await service.get_session(session.key)
    assert loaded is not None and loaded.state == {"plan": stored.pop()}
    with pytest.raises(StateKeyError):
        await service.initialize_session_state(session.key, state_key="user:plan", value=1)


async def test_spec_2_1_a_new_sessions_initial_state_goes_to_its_scopes(backend: Backend) -> None:
    alice = backend.user("alice")
    service = backend.service
    session = await service.create_session(app=APP, user_id=alice, state={"user:lang": "de", "topic": "tls"})
    assert session.state == {"user:lang": "de", "topic": "tls"}
    other = await service.create_session(app=APP, user_id=alice)
    assert other.state == {"user:lang": "de"}


async def test_spec_2_1_a_cached_session_never_shows_stale_user_state(backend: Backend) -> None:
    alice = backend.user("alice")
    service = backend.service
    session = await service.create_session(app=APP, user_id=alice)
    await service.append_event(session, user_event("hello"))
    assert (await service.get_session(session.key)) is not None  # warm whatever cache there is
    other = await service.create_session(app=APP, user_id=alice)
    await service.append_event(other, assistant_event("x", state_delta={"user:lang": "fr"}))
    await service.update_app_state(app=APP, state={"mode": "beta"})
    loaded = await service.get_session(session.key)
    assert loaded is not None and loaded.state == {"user:lang": "fr", "app:mode": "beta"}
    assert [e.text for e in loaded.events] == ["hello"]


async def test_spec_2_1_concurrent_writers_of_one_users_state_lose_no_key(backend: Backend) -> None:
    alice = backend.user("alice")
    service = backend.service
    sessions = [await service.create_session(app=APP, user_id=alice) for _ in range(4)]
    await asyncio.gather(
        *(
            service.append_event(session, assistant_event(f"{i}", state_delta={f"user:k{i}": i, "app:seen": True}))
            for i, session in enumerate(sessions)
        ),
        *(service.update_user_state(app=APP, user_id=alice, state={f"direct{i}": i}) for i in range(4)),
    )
    assert await service.list_user_states(app=APP, user_id=alice) == {
        **{f"k{i}": i for i in range(4)},
        **{f"direct{i}": i for i in range(4)},
    }
    assert await service.list_app_states(app=APP) == {"seen": True}
