"""Recall's read of a session's summaries (issue 23: one statement written once) gives what
the ORM's rows give: every row, lease holders included, and nothing of another user's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sessions_app.core.session import SessionKey

pytestmark = pytest.mark.django_db(transaction=True)

AT = datetime(2026, 2, 3, 4, 5, 6, 789_000, tzinfo=UTC)


def test_recall_reads_every_summary_row_as_the_orm_maps_it(alice: Any, bob: Any) -> None:
    from sessions_app import mapping, search, services
    from sessions_app import models as orm

    session = services.session_create(user=alice, agent="support")
    orm.Summary.objects.create(
        session=session,
        filter_key="",
        text="They talked about the payments logs.",
        cutoff_at=AT,
        last_event_id="e-12",
        last_seq=12,
        updated_at=AT,
        version=3,
        covered_events=12,
        covered_tokens=480,
    )
    orm.Summary.objects.create(session=session, filter_key="branch:a", text="", updated_at=AT)  # a lease holder
    expected = {row.filter_key: mapping.summary_from_row(row) for row in orm.Summary.objects.filter(session=session)}
    key = SessionKey(app=session.app, user_id=str(alice.pk), session_id=session.id)

    found = search.summaries(key)

    assert found == expected and set(found) == {"", "branch:a"}
    assert found[""].boundary is not None and found[""].boundary.cutoff_at == AT
    assert search.summaries(SessionKey(app=session.app, user_id=str(bob.pk), session_id=session.id)) == {}
    assert search.summaries(SessionKey(app="elsewhere", user_id=str(alice.pk), session_id=session.id)) == {}
    assert search.summaries(SessionKey(app=session.app, user_id="x1", session_id=session.id)) == {}
