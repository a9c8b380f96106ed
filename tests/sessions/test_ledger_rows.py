"""The ledger's rows on PostgreSQL (sessions_app/backends/ledger.py): the one-statement append
reads its rows from one JSON parameter (issue 23); what it stores must be what the row-by-row
path stores, column for column."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import DataError, connection

from sessions_app import models as orm
from sessions_app.backends.ledger import _append_checked, _append_one_statement
from sessions_app.backends.reads import _create
from sessions_app.core.events import Event, EventError, Message, Usage

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the one-statement append is PostgreSQL's"),
]

APP = "agentsite"
ODD_TEXT = "üñí \u2028 'single' \"double\" \\ back\nslash ☃ 😀 %s %(name)s {seq}"


def _events() -> list[Event]:
    return [
        Event(author="user", request_id="q1", message=Message(role="user", content=ODD_TEXT)),
        Event(
            author="support",
            request_id="q1",
            invocation_id="i1",
            branch="support",
            filter_key="k",
            message=Message(role="assistant", content="done " * 50),
            usage=Usage(prompt_tokens=3, completion_tokens=4),
            extensions={"nested": {"list": [1, 2.5, None, True], "text": ODD_TEXT}},
        ),
        Event(author="support", request_id="q1", error=EventError(type="x", message="it failed")),
    ]


def _rows(session_id: str) -> list[dict[str, Any]]:
    columns = [f.attname for f in orm.Event._meta.concrete_fields if f.attname not in ("id", "session_id")]
    return list(orm.Event.objects.filter(session_id=session_id).order_by("seq").values(*columns))


def test_the_one_statement_append_stores_the_rows_the_row_by_row_append_stores(alice: Any) -> None:
    one = _create(APP, str(alice.pk), "s-one", "", "", {})
    checked = _create(APP, str(alice.pk), "s-checked", "", "", {})
    events = _events()

    saved_one = _append_one_statement(one.key, events, [])
    saved_checked = _append_checked(checked.key, events, [])

    assert [e.seq for e, _ in saved_one] == [e.seq for e, _ in saved_checked] == [1, 2, 3]
    rows = _rows(one.id)
    assert rows == _rows(checked.id)
    assert rows[0]["text"] == ODD_TEXT and rows[0]["payload"]["seq"] == 1
    assert [r["created_at"] for r in rows] == [e.created_at for e in events]  # to the microsecond


def test_a_value_too_long_for_its_column_stores_nothing(alice: Any) -> None:
    session = _create(APP, str(alice.pk), "s-long", "", "", {})
    fine = Event(author="support", message=Message(role="assistant", content="fine"))
    too_long = Event(author="a" * 200, message=Message(role="assistant", content="author over 128 characters"))

    with pytest.raises(DataError):
        _append_one_statement(session.key, [fine, too_long], [])

    assert _rows(session.id) == []
    assert orm.Session.objects.get(pk=session.id).last_seq == 0
