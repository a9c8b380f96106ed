"""Issue 18, item 6: the session head is read with a statement written out once per shape,
not built through the ORM on every run. It must say what the ORM's window load says about
the session: its fields, its state view (the app's and the user's keys included), its
summaries with their boundaries and stamps, and nothing of another user's session. Runs on
the Django backends (SQLite here, PostgreSQL with DATABASE_URL)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model

from sessions_app.backends import DjangoSessionService, get_session_head_sync, get_session_sync
from sessions_app.core.events import Event, Message
from sessions_app.core.session import Session, SessionKey, Summary, SummaryBoundary
from sessions_app.locks import DatabaseSummaryLock

pytestmark = pytest.mark.django_db(transaction=True)

APP = "head"


def _user(name: str) -> str:
    return str(get_user_model().objects.create_user(username=name).pk)


def _fields(session: Session | None) -> object:
    assert session is not None
    return (
        session.key,
        session.agent,
        session.title,
        session.state,
        session.last_seq,
        session.created_at,
        session.updated_at,
        session.summaries,
    )


def _session(service: DjangoSessionService, user: str) -> SessionKey:
    async def make() -> SessionKey:
        session = await service.create_session(
            app=APP, user_id=user, agent="writer", title="A title", state={"topic": "tides", "app:tone": "dry"}
        )
        await service.append_events(
            session,
            [
                Event(
                    author="user",
                    message=Message(role="user", content=f"q{n}"),
                    filter_key=APP,
                    state_delta={"user:lang": "fr"} if n == 1 else {},
                )
                for n in range(4)
            ],
        )
        return session.key

    return async_to_sync(make)()


def test_the_head_says_what_a_window_load_says() -> None:
    service = DjangoSessionService()
    key = _session(service, _user("alice"))
    boundary = SummaryBoundary(
        cutoff_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), last_event_id="e2", last_seq=2
    )
    async_to_sync(service.advance_summary)(key, Summary(filter_key=APP, text="two turns", boundary=boundary))
    # A summary without a boundary (put as it is) and the lock's lease holder, which is none.
    async_to_sync(service.put_summary)(key, Summary(filter_key="other", text="no boundary"))
    assert async_to_sync(DatabaseSummaryLock().acquire)(key, "locked", wait_s=0) is not None

    head = get_session_head_sync(key)
    loaded = get_session_sync(key, event_limit=0)
    assert _fields(head) == _fields(loaded)
    assert head is not None and head.events == []
    assert head.state == {"topic": "tides", "app:tone": "dry", "user:lang": "fr"}
    assert set(head.summaries) == {APP, "other"}
    assert head.summaries[APP].boundary == boundary and head.summaries["other"].boundary is None


def test_known_summaries_are_left_out_only_while_they_are_the_stored_ones() -> None:
    service = DjangoSessionService()
    key = _session(service, _user("alice"))
    for filter_key in (APP, ""):
        boundary = SummaryBoundary(cutoff_at=datetime(2026, 1, 1, tzinfo=UTC), last_event_id="e1", last_seq=1)
        async_to_sync(service.advance_summary)(key, Summary(filter_key=filter_key, text="first", boundary=boundary))
    full = get_session_head_sync(key)
    assert full is not None and len(full.summaries) == 2

    unchanged = get_session_head_sync(key, known=full.summaries)
    assert unchanged is not None and unchanged.summaries == {}
    assert (unchanged.state, unchanged.last_seq) == (full.state, full.last_seq)

    # One known summary with another version (as a stale cache would hold it) is read again.
    stale = {**full.summaries, APP: Summary(filter_key=APP, text="first", version=99)}
    again = get_session_head_sync(key, known=stale)
    assert again is not None and again.summaries == {APP: full.summaries[APP]}


def test_another_users_session_and_a_malformed_user_id_have_no_head() -> None:
    service = DjangoSessionService()
    key = _session(service, _user("alice"))
    bob = _user("bob")
    assert get_session_head_sync(SessionKey(app=APP, user_id=bob, session_id=key.session_id)) is None
    assert get_session_head_sync(SessionKey(app="elsewhere", user_id=key.user_id, session_id=key.session_id)) is None
    assert get_session_head_sync(SessionKey(app=APP, user_id="1x", session_id=key.session_id)) is None
    assert get_session_head_sync(SessionKey(app=APP, user_id=key.user_id, session_id="missing")) is None
