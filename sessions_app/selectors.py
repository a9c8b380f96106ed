"""Reads for the API and the admin; every one checks ownership."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Max, Min, OuterRef, QuerySet, Subquery

from sessions_app import models as orm
from sessions_app.core.events import Event
from sessions_app.mapping import event_from_row, event_from_values


def session_list(*, user: Any) -> QuerySet[orm.Session]:
    return orm.Session.objects.filter(app=settings.AGENTSITE_APP, user=user).order_by("-updated_at")


def session_get(*, user: Any, session_id: str) -> orm.Session | None:
    """The user's session, or None (also when it belongs to someone else)."""
    return session_list(user=user).filter(id=session_id).first()


def event_page(*, session: orm.Session, after_seq: int, limit: int) -> tuple[list[orm.Event], bool]:
    """Up to `limit` events after `after_seq`, oldest first, and whether more follow."""
    rows = list(orm.Event.objects.filter(session=session, seq__gt=after_seq).order_by("seq")[: limit + 1])
    return rows[:limit], len(rows) > limit


def session_of_another(*, user: Any, session_id: str) -> bool:
    """Whether another user has a session with this id (to refuse reusing someone else's).

    One query: asking "is it mine?" and then "does it exist?" would call a session that the
    same user's concurrent request created in between someone else's."""
    return orm.Session.objects.filter(app=settings.AGENTSITE_APP, id=session_id).exclude(user=user).exists()


def session_owner_id(*, session_id: str) -> int | None:
    """Who owns a session of this app (None: no such session). For a caller that has no
    user yet to scope by (a protocol checking whose context an id names)."""
    return (
        orm.Session.objects.filter(app=settings.AGENTSITE_APP, id=session_id).values_list("user_id", flat=True).first()
    )


def session_list_with_first_message(*, user: Any, limit: int) -> QuerySet[orm.Session]:
    """The user's `limit` newest sessions, each with the text of its first user message
    (`first_message`), in one query."""
    first_message = orm.Event.objects.filter(session=OuterRef("pk"), role="user").order_by("seq").values("text")[:1]
    return session_list(user=user).annotate(first_message=Subquery(first_message))[:limit]


def first_user_message(*, session: orm.Session) -> str:
    """The text of the session's first user message ("" before there is one)."""
    event = session.events.filter(role="user").order_by("seq").only("text").first()
    return event.text if event is not None else ""


def request_events(*, session_id: str, request_id: str) -> list[Event]:
    """The ledger events one request wrote to a session (a run's turn), oldest first."""
    rows = orm.Event.objects.filter(session_id=session_id, request_id=request_id).order_by("seq")
    return [event_from_row(row) for row in rows]


SessionRow = orm.Session
"""A session row as the selectors hand it out: for a caller that passes it back (`runs`
types it without importing the models)."""


def user_messages_newest_first(*, session: orm.Session) -> Iterator[Event]:
    """The events the session's user wrote (`role` and `author` "user"), newest first, read
    a few at a time: a caller looking for the latest one of some kind stops early."""
    rows = orm.Event.objects.filter(session=session, role="user", author="user").order_by("-seq")
    for row in rows.iterator(chunk_size=20):
        yield event_from_row(row)


def session_event(*, session: orm.Session, event_id: str) -> Event | None:
    """The session's ledger event `event_id`, or None (also when it is another session's)."""
    row = orm.Event.objects.filter(session=session, event_id=event_id).first()
    return event_from_row(row) if row is not None else None


def request_user_event_id(*, session_id: str, request_id: str) -> str | None:
    """The id of the user message one request wrote to a session, if it wrote one."""
    found: str | None = (
        orm.Event.objects.filter(session_id=session_id, request_id=request_id, role="user", author="user")
        .order_by("seq")
        .values_list("event_id", flat=True)
        .first()
    )
    return found


@functools.lru_cache(maxsize=4)
def _page_sql(vendor: str) -> tuple[str, list[Any], Any]:
    """`events_after`'s statement without a request id, written once (issue 23: every live
    socket reads pages while runs stream, and the ORM built each anew), and the converters
    the ORM applies to its payload column."""
    del vendor  # part of the cache key: quoting is the same on both backends
    meta = orm.Event._meta
    payload = meta.get_field("payload")
    session, seq, event_id = (meta.get_field(name).column for name in ("session", "seq", "event_id"))
    sql = (
        f'SELECT "{payload.column}", "{seq}", "{event_id}" FROM "{meta.db_table}"'
        f' WHERE "{session}" = %s AND "{seq}" > %s ORDER BY "{seq}" ASC LIMIT %s'
    )
    col = payload.get_col(meta.db_table)
    return sql, [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)], col


def events_after(*, session_id: str, after_seq: int, limit: int, request_id: str | None = None) -> list[Event]:
    """Up to `limit` of the session's ledger events after `after_seq`, oldest first (only
    request `request_id`'s when given): a replay page, read as payload, seq and id alone."""
    if request_id is None:
        sql, converters, col = _page_sql(connection.vendor)
        with connection.cursor() as cursor:
            cursor.execute(sql, [session_id, after_seq, limit])
            found = cursor.fetchall()
        page: list[Event] = []
        for payload, seq, event_id in found:
            for convert in converters:
                payload = convert(payload, col, connection)
            page.append(event_from_values(payload, seq, event_id))
        return page
    rows = orm.Event.objects.filter(session_id=session_id, seq__gt=after_seq)
    rows = rows.filter(request_id=request_id)
    values = rows.order_by("seq").values_list("payload", "seq", "event_id")[:limit]
    return [event_from_values(payload, seq, event_id) for payload, seq, event_id in values]


def last_seq(*, session_id: str) -> int:
    """The seq of the session's newest ledger event (0 before there is one)."""
    found = orm.Event.objects.filter(session_id=session_id).order_by("-seq").values_list("seq", flat=True).first()
    return int(found or 0)


def requests_spanning(*, session_id: str, after_seq: int) -> set[str]:
    """Request ids with ledger events at or before `after_seq` and after it (runs a client
    saw start before it disconnected and that went on after), in one grouped query."""
    spans = (
        orm.Event.objects.filter(session_id=session_id)
        .exclude(request_id="")
        .values("request_id")
        .annotate(first=Min("seq"), last=Max("seq"))
        .filter(first__lte=after_seq, last__gt=after_seq)
    )
    return {row["request_id"] for row in spans}


def requests_first_seq(*, session_id: str, request_ids: list[str]) -> dict[str, int]:
    """request id -> the seq of its first ledger event in the session, for those of
    `request_ids` that wrote one."""
    rows = (
        orm.Event.objects.filter(session_id=session_id, request_id__in=request_ids)
        .values("request_id")
        .annotate(first=Min("seq"))
    )
    return {row["request_id"]: row["first"] for row in rows}
