"""What a summary write and the incremental reads of the post-run jobs cost the database
(issue 23): one statement in the common case, a second only to tell "not this user's
session" from "nothing to write / nothing new". Through the session service, on the Django
backends (SQLite here, PostgreSQL with DATABASE_URL)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Event, Message
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError, Summary, SummaryBoundary

pytestmark = pytest.mark.django_db(transaction=True)

APP = "statements"


def _summary(text: str, through: Event) -> Summary:
    assert through.seq is not None
    boundary = SummaryBoundary(cutoff_at=through.created_at, last_event_id=through.id, last_seq=through.seq)
    return Summary(filter_key=APP, text=text, boundary=boundary, updated_at=datetime.now(UTC))


def _session(service: DjangoSessionService, owner: Any) -> tuple[Session, list[Event]]:
    session = async_to_sync(service.create_session)(app=APP, user_id=str(owner.pk))
    events = async_to_sync(service.append_events)(
        session, [Event(author="user", message=Message(role="user", content=f"turn {n}")) for n in range(4)]
    )
    return session, events


def _not_queries(seen: list[str]) -> list[str]:
    # Transaction control that an autocommit backend may add is not a statement about data.
    return [s for s in seen if not s.upper().startswith(("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT"))]


def test_a_first_summary_and_an_advance_are_one_statement_each(alice: Any, statements: list[str]) -> None:
    service = DjangoSessionService()
    session, events = _session(service, alice)
    statements.clear()
    first = async_to_sync(service.advance_summary)(session.key, _summary("two turns", events[1]))
    assert first is not None and (first.text, first.version, first.boundary) == (
        "two turns",
        1,
        _summary("", events[1]).boundary,
    )
    assert len(_not_queries(statements)) == 1, statements
    statements.clear()
    advanced = async_to_sync(service.advance_summary)(session.key, _summary("four turns", events[3]))
    assert advanced is not None and (advanced.text, advanced.version) == ("four turns", 2)
    assert len(_not_queries(statements)) == 1, statements
    stored = async_to_sync(service.get_summary)(session.key, filter_key=APP)
    assert stored is not None and (stored.text, stored.version, stored.boundary) == (
        "four turns",
        2,
        advanced.boundary,
    )


def test_a_summary_not_past_the_stored_one_writes_nothing(alice: Any, statements: list[str]) -> None:
    service = DjangoSessionService()
    session, events = _session(service, alice)
    async_to_sync(service.advance_summary)(session.key, _summary("four turns", events[3]))
    statements.clear()
    assert async_to_sync(service.advance_summary)(session.key, _summary("two turns", events[1])) is None
    assert async_to_sync(service.advance_summary)(session.key, _summary("again", events[3])) is None
    assert len(_not_queries(statements)) == 4, statements  # each: the write, then whose session
    stored = async_to_sync(service.get_summary)(session.key, filter_key=APP)
    assert stored is not None and (stored.text, stored.version) == ("four turns", 1)


def test_another_users_session_is_not_found_and_gets_no_summary(alice: Any, bob: Any) -> None:
    service = DjangoSessionService()
    session, events = _session(service, alice)
    theirs = SessionKey(app=APP, user_id=str(bob.pk), session_id=session.id)
    with pytest.raises(SessionNotFoundError):
        async_to_sync(service.advance_summary)(theirs, _summary("not mine", events[3]))
    malformed = SessionKey(app=APP, user_id="bob", session_id=session.id)
    with pytest.raises(SessionNotFoundError):
        async_to_sync(service.advance_summary)(malformed, _summary("not mine", events[3]))
    with pytest.raises(SessionNotFoundError):
        async_to_sync(service.get_summary)(theirs, filter_key=APP)
    assert async_to_sync(service.get_summary)(session.key, filter_key=APP) is None


def test_reading_events_after_a_seq_is_one_statement_when_there_are_some(alice: Any, statements: list[str]) -> None:
    service = DjangoSessionService()
    session, events = _session(service, alice)
    statements.clear()
    after = async_to_sync(service.list_events)(session.key, after_seq=events[1].seq or 0, limit=10)
    assert [e.id for e in after] == [e.id for e in events[2:]]
    assert len(_not_queries(statements)) == 1, statements
    statements.clear()
    assert async_to_sync(service.list_events)(session.key, after_seq=events[3].seq or 0, limit=10) == []
    assert len(_not_queries(statements)) == 2, statements  # nothing new: then whose session
    theirs = SessionKey(app=APP, user_id=str(alice.pk + 1000), session_id=session.id)  # no such user
    with pytest.raises(SessionNotFoundError):
        async_to_sync(service.list_events)(theirs, after_seq=0, limit=10)
