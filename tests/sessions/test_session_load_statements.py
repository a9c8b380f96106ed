"""What loading a session costs the database (issue 23): the head statement, then the window
only when the ledger holds events."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.core.events import Event, Message
from sessions_app.core.session import Summary, SummaryBoundary

APP = "loads"


def _user(text: str) -> Event:
    return Event(author="user", message=Message(role="user", content=text))


def _agent(text: str) -> Event:
    return Event(author="agent", message=Message(role="assistant", content=text))


@pytest.mark.django_db(transaction=True)
def test_a_session_with_events_loads_its_window_in_a_second_statement(alice: Any) -> None:
    from sessions_app.backends import DjangoSessionService, get_session_sync

    service = DjangoSessionService()
    session = async_to_sync(service.create_session)(app=APP, user_id=str(alice.pk), state={"k": 1})
    async_to_sync(service.append_events)(
        session,
        [_user(f"message {n}") for n in range(1, 4)],
    )
    with CaptureQueriesContext(connection) as reads:
        loaded = get_session_sync(session.key, event_limit=2)
    assert loaded is not None
    assert [e.text for e in loaded.events] == ["message 2", "message 3"]
    assert [e.seq for e in loaded.events] == [2, 3] and loaded.last_seq == 3
    assert loaded.state == {"k": 1}
    assert len(reads) == 2  # the head (row, scopes, summaries), then the window


@pytest.mark.django_db(transaction=True)
def test_a_session_window_after_its_summary_starts_past_the_boundary(alice: Any) -> None:
    from sessions_app.backends import DjangoSessionService, get_session_sync

    service = DjangoSessionService()
    session = async_to_sync(service.create_session)(app=APP, user_id=str(alice.pk))
    saved = async_to_sync(service.append_events)(
        session,
        [
            _user("first"),
            _agent("one"),
            _user("second"),
            _agent("two"),
        ],
    )
    boundary = SummaryBoundary(cutoff_at=saved[1].created_at, last_event_id=saved[1].id, last_seq=2)
    async_to_sync(service.put_summary)(session.key, Summary(filter_key="", text="they said one", boundary=boundary))
    loaded = get_session_sync(session.key, after_summary="")
    assert loaded is not None
    assert [e.text for e in loaded.events] == ["second", "two"]
    assert loaded.summaries[""].text == "they said one"


@pytest.mark.django_db(transaction=True)
def test_a_session_of_another_user_loads_as_none(alice: Any, bob: Any) -> None:
    from sessions_app.backends import DjangoSessionService, get_session_sync

    service = DjangoSessionService()
    session = async_to_sync(service.create_session)(app=APP, user_id=str(alice.pk))
    async_to_sync(service.append_events)(session, [_user("mine")])
    key = session.key.__class__(app=APP, user_id=str(bob.pk), session_id=session.id)
    assert get_session_sync(key) is None


@pytest.mark.django_db(transaction=True)
def test_a_replay_page_is_the_ledger_after_the_seq_in_order_and_one_statement(alice: Any) -> None:
    from sessions_app import selectors
    from sessions_app.backends import DjangoSessionService

    service = DjangoSessionService()
    session = async_to_sync(service.create_session)(app=APP, user_id=str(alice.pk))
    saved = async_to_sync(service.append_events)(
        session, [_user("first"), _agent("one ✓"), _user("second"), _agent("two")]
    )
    with CaptureQueriesContext(connection) as reads:
        page = selectors.events_after(session_id=session.id, after_seq=1, limit=2)
    assert page == saved[1:3]
    assert [e.text for e in page] == ["one ✓", "second"] and [e.seq for e in page] == [2, 3]
    assert len(reads) == 1
    assert selectors.events_after(session_id=session.id, after_seq=4, limit=10) == []
    assert selectors.events_after(session_id="no-such-session", after_seq=0, limit=10) == []
    own = selectors.events_after(session_id=session.id, after_seq=0, limit=10, request_id="")
    assert own == saved  # the request filter: these events carry no request id
