"""Session rows: create, read (the turn's window of events, or the head with its summaries),
list and delete."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Case, Expression, IntegerField, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.db.models.lookups import Exact, IsNull

from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.artifact_files import artifacts_delete
from sessions_app.backends.db import Converter, _owned, column_converter, converted
from sessions_app.backends.state import _merge_scopes, _view, with_scoped_state
from sessions_app.core.events import utcnow
from sessions_app.core.session import Session, SessionKey, Summary, select_summary, split_state


def _create(app: str, user_id: str, session_id: str, agent: str, title: str, state: dict[str, Any]) -> Session:
    now = utcnow()
    initial = split_state(state)
    try:
        with transaction.atomic():
            row = orm.Session.objects.create(
                id=session_id,
                app=app,
                user_id=int(user_id),
                agent=agent,
                title=title,
                state=initial.session,
                created_at=now,
                updated_at=now,
            )
            _merge_scopes(app, user_id, initial.app, initial.user)
    except IntegrityError:
        raise ValueError(f"session {session_id!r} already exists") from None
    session = mapping.session_from_row(row)
    # A new session shows the app's and the user's state from its first turn: one read.
    scoped = with_scoped_state(orm.Session.objects.filter(pk=row.pk)).values_list("app_state_view", "user_state_view")
    app_state, user_state = scoped.first() or (None, None)
    session.state = _view(row.state, app_state, user_state)
    return session


def get_session_sync(
    key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
) -> Session | None:
    """`DjangoSessionService.get_session` for synchronous callers (views, tasks).

    The session, its state view and its summaries come from the head statement (one
    statement, written out once); the window is a second one, skipped when the ledger is
    empty (issue 23: a new session's first run read its row, its summaries and its empty
    ledger through the ORM, three statements and most of a run's session load)."""
    session = get_session_head_sync(key)
    if session is None or session.last_seq == 0:
        return session
    events = orm.Event.objects.filter(session_id=key.session_id)
    if after_summary is not None:
        start = _turn_start(key.session_id, session.summaries, after_summary)
        if start is not None:
            events = events.filter(seq__gt=start)
    # Only the columns an Event is rebuilt from: building full model rows (text, JSON
    # payload twice over) for a window of hundreds of events dominated a turn's start.
    rows = events.order_by("-seq").values_list("payload", "seq", "event_id")
    if event_limit is not None:
        rows = rows[:event_limit]
    loaded = [mapping.event_from_values(payload, seq, event_id) for payload, seq, event_id in rows]
    loaded.reverse()
    session.events = loaded
    return session


_HEAD_FIELDS = ("app", "user_id", "id", "agent", "title", "state", "last_seq", "created_at", "updated_at")
_HEAD_SUMMARY_FIELDS = (
    "filter_key",
    "text",
    "cutoff_at",
    "last_event_id",
    "last_seq",
    "updated_at",
    "version",
    "covered_events",
    "covered_tokens",
)


def get_session_head_sync(key: SessionKey, *, known: Mapping[str, Summary] | None = None) -> Session | None:
    """The session row, its app's and user's state and its summaries in one statement (a
    LEFT JOIN, a row per summary).

    With `known` (the summaries a caller already holds, by filter key), only the summaries
    that differ from them are read: one row when none changed (issue 18: a session with a
    summary per filter key otherwise read a row per key on every turn). The caller merges.

    The statement is written out once per number of known summaries (`_head_sql`), its
    columns converted as the ORM converts them: a process that keeps the session reads its
    head at the start of every run, and building that query through the ORM each time took
    most of the read (issue 18, item 6: 2.3 ms of CPU against 0.1 ms for the statement)."""
    if not (key.user_id.isascii() and key.user_id.isdigit()):
        return None  # Session.user is an integer key: a malformed id owns no session
    shape = tuple(sorted(known)) if known is not None else None
    sql = _head_sql(connection.vendor, None if shape is None else len(shape))
    params: list[Any] = []
    if known is not None:
        updated_at = orm.Summary._meta.get_field("updated_at")
        for filter_key in shape or ():
            held = known[filter_key]
            params.extend([filter_key, held.version, updated_at.get_db_prep_value(held.updated_at, connection)])
    params.extend([key.app, int(key.user_id), key.session_id])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return None
    convert = _head_converters(connection.vendor)
    head_fields = len(_HEAD_FIELDS) + 2
    first = [converted(value, convert[i]) for i, value in enumerate(rows[0][:head_fields])]
    fields = dict(zip((*_HEAD_FIELDS, "app_state_view", "user_state_view"), first, strict=True))
    session = Session(
        app=fields["app"],
        user_id=str(fields["user_id"]),
        id=fields["id"],
        agent=fields["agent"],
        title=fields["title"],
        state=_view(fields["state"], fields["app_state_view"], fields["user_state_view"]),
        last_seq=fields["last_seq"],
        created_at=fields["created_at"],
        updated_at=fields["updated_at"],
    )
    for row in rows:
        if row[head_fields] is None:
            continue  # the LEFT JOIN's row of a session without (changed) summaries
        values = [converted(value, convert[head_fields + i]) for i, value in enumerate(row[head_fields:])]
        columns = dict(zip(_HEAD_SUMMARY_FIELDS, values, strict=True))
        session.summaries[columns["filter_key"]] = mapping.summary_from_row(orm.Summary(**columns))
    return session


@functools.lru_cache(maxsize=64)
def _head_sql(vendor: str, known: int | None) -> str:
    """The head statement for a vendor, and `known` summaries to leave out (None: read every
    summary). Parameters: (filter key, version, updated_at) for each known summary, then
    app, user pk and session id. A summary row without text is only the database lock's lease
    holder (sessions_app.locks): never read. Summaries only advance, and every write stamps
    a new version or time, so one that matches all three is the one the caller holds."""
    del vendor  # part of the cache key: quoting and types are the same on both backends
    session, summary = orm.Session._meta, orm.Summary._meta
    app_state, user_state = orm.AppState._meta, orm.UserState._meta

    def column(meta: Any, name: str) -> str:
        return '"' + str(meta.get_field(name).column) + '"'

    join = [f'"m".{column(summary, "session")} = "s".{column(session, "id")}', f"\"m\".{column(summary, 'text')} <> ''"]
    join.extend(
        f'NOT ("m".{column(summary, "filter_key")} = %s AND "m".{column(summary, "version")} = %s'
        f' AND "m".{column(summary, "updated_at")} = %s)'
        for _ in range(known or 0)
    )
    selected = [f'"s".{column(session, name)}' for name in _HEAD_FIELDS]
    selected.append(
        f'(SELECT "a".{column(app_state, "state")} FROM "{app_state.db_table}" "a"'
        f' WHERE "a".{column(app_state, "app")} = "s".{column(session, "app")} LIMIT 1)'
    )
    selected.append(
        f'(SELECT "u".{column(user_state, "state")} FROM "{user_state.db_table}" "u"'
        f' WHERE "u".{column(user_state, "app")} = "s".{column(session, "app")}'
        f' AND "u".{column(user_state, "user")} = "s".{column(session, "user")} LIMIT 1)'
    )
    selected.extend(f'"m".{column(summary, name)}' for name in _HEAD_SUMMARY_FIELDS)
    return (
        f'SELECT {", ".join(selected)} FROM "{session.db_table}" "s"'
        f' LEFT OUTER JOIN "{summary.db_table}" "m" ON ({" AND ".join(join)})'
        f' WHERE "s".{column(session, "app")} = %s AND "s".{column(session, "user")} = %s'
        f' AND "s".{column(session, "id")} = %s'
    )


def session_summaries_sync(key: SessionKey) -> dict[str, Summary]:
    """Every summary row of the session, by filter key, the database lock's lease holders
    (rows without text) included; {} when the session is not the key's. One statement,
    written once, its columns converted as the ORM converts them (issue 23: recall reads
    them once per run, and building the query through the ORM took most of the read)."""
    if not (key.user_id.isascii() and key.user_id.isdigit()):
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_summaries_sql(connection.vendor), [key.session_id, key.app, int(key.user_id)])
        rows = cursor.fetchall()
    convert = _head_converters(connection.vendor)[len(_HEAD_FIELDS) + 2 :]
    found: dict[str, Summary] = {}
    for row in rows:
        values = [converted(value, converter) for value, converter in zip(row, convert, strict=True)]
        columns = dict(zip(_HEAD_SUMMARY_FIELDS, values, strict=True))
        found[columns["filter_key"]] = mapping.summary_from_row(orm.Summary(**columns))
    return found


@functools.lru_cache(maxsize=4)
def _summaries_sql(vendor: str) -> str:
    """`session_summaries_sync`'s statement; parameters: session id, app, user pk."""
    del vendor  # part of the cache key: quoting and types are the same on both backends
    session, summary = orm.Session._meta, orm.Summary._meta

    def column(meta: Any, name: str) -> str:
        return '"' + str(meta.get_field(name).column) + '"'

    selected = ", ".join(f'"m".{column(summary, name)}' for name in _HEAD_SUMMARY_FIELDS)
    return (
        f'SELECT {selected} FROM "{summary.db_table}" "m"'
        f' INNER JOIN "{session.db_table}" "s" ON ("m".{column(summary, "session")} = "s".{column(session, "id")})'
        f' WHERE "m".{column(summary, "session")} = %s AND "s".{column(session, "app")} = %s'
        f' AND "s".{column(session, "user")} = %s'
    )


@functools.lru_cache(maxsize=4)
def _head_converters(vendor: str) -> list[Converter]:
    """Per column of `_head_sql`, the converters the ORM would apply to it (JSON text to
    Python, SQLite's datetime text to an aware datetime) and the column they are given."""
    del vendor  # part of the cache key
    fields = [orm.Session._meta.get_field(name if name != "user_id" else "user") for name in _HEAD_FIELDS]
    fields.append(orm.AppState._meta.get_field("state"))
    fields.append(orm.UserState._meta.get_field("state"))
    fields.extend(orm.Summary._meta.get_field(name) for name in _HEAD_SUMMARY_FIELDS)
    return [column_converter(field) for field in fields]


def _turn_start(session_id: str, summaries: Mapping[str, Summary], filter_key: str) -> Expression | None:
    """The seq after which a turn's window starts: the boundary, or just before the user
    message of the turn the boundary cuts. An expression of two scalar subqueries (index
    scans on (session, seq), stopping at the first match), so that the window is one
    statement; None when there is no boundary."""
    chosen = select_summary(summaries, filter_key)
    if chosen is None or chosen.last_seq == 0:
        return None
    boundary = Value(chosen.last_seq)
    following = Subquery(
        orm.Event.objects.filter(session_id=session_id, seq__gt=chosen.last_seq)
        .exclude(role="system")
        .order_by("seq")
        .values("role")[:1]
    )
    head = Subquery(
        orm.Event.objects.filter(session_id=session_id, seq__lte=chosen.last_seq, role="user")
        .order_by("-seq")
        .values("seq")[:1]
    )
    return Case(
        # The boundary ends a turn (or nothing follows it): nothing to anchor.
        When(IsNull(following, True), then=boundary),
        When(Exact(following, "user"), then=boundary),
        default=Coalesce(head - 1, boundary),
        output_field=IntegerField(),
    )


def _list(app: str, user_id: str) -> list[Session]:
    rows = orm.Session.objects.filter(app=app, user_id=int(user_id)).order_by("-updated_at")
    return [mapping.session_from_row(r) for r in rows]


@transaction.atomic
def _delete(key: SessionKey) -> bool:
    artifacts_delete(rows=orm.Artifact.objects.filter(session__in=_owned(key)))
    deleted, _ = _owned(key).delete()
    return deleted > 0
