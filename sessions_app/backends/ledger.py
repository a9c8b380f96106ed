"""The ledger on the ORM: appending events (one transaction, with the joined writes of
issue 18; one statement on PostgreSQL) and listing them."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from django.db import IntegrityError, connection, transaction

from runs.core.tokens import count_text
from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.backends.db import _owned, _user_pk
from sessions_app.backends.state import _merge_scopes
from sessions_app.core.events import Event, utcnow
from sessions_app.core.session import SessionKey, SessionNotFoundError, split_state

_EVENT_FIELDS = [f for f in orm.Event._meta.concrete_fields if not f.primary_key]
_EVENT_COLUMNS = ", ".join(f'"{f.column}"' for f in _EVENT_FIELDS)
# Columns whose Python value the database driver cannot take as it is (JSON, an aware
# datetime on SQLite); the others are plain strings, integers and booleans.
_ADAPTED = frozenset({"payload", "created_at"})
# Rows one PostgreSQL statement takes (65,535 parameters); a longer append (a seeded
# history) goes in batches inside a transaction.
_ONE_STATEMENT_ROWS = 1000


def _row_values(event: Event, *, session_id: str, seq: int) -> list[Any]:
    """One ledger row's column values as `bulk_create` would send them, without its
    per-value compilation (issue 18: that was half of a step write's time)."""
    row = mapping.event_to_row(event, session_id=session_id, seq=seq, tokens=count_text(event.text))
    return [
        field.get_db_prep_save(getattr(row, field.attname), connection)
        if field.name in _ADAPTED
        else getattr(row, field.attname)
        for field in _EVENT_FIELDS
    ]


JoinedWrite = Callable[[str | None], tuple[str, Sequence[Any]]]
"""A data-modifying statement (SQL and parameters, made in the worker thread) that commits
with an append or not at all: a run store's record write joining the run's last step
(issue 18). It must touch no ledger table. Its argument is a SQL condition it must add
to its WHERE clause (None: none), so that it changes nothing when the append stores
nothing (PostgreSQL's single statement runs every part; the condition ties them)."""


def _append(key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite] = ()) -> list[tuple[Event, bool]]:
    """Append `events` in one transaction, with `joined` in it: (stored event, whether this
    call wrote it) each."""
    if not any(e.state_delta for e in events):
        try:
            return _append_fast(key, events, joined)
        except IntegrityError:
            pass  # an id already in the ledger (a retried append): the careful path sorts it out
    return _append_checked(key, events, joined)


def _append_fast(
    key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite] = ()
) -> list[tuple[Event, bool]]:
    """Take n seqs from the session row (its write lock serialises appenders) and insert the
    rows, in one transaction. A duplicate id fails the insert, and the whole transaction
    with it (IntegrityError). On PostgreSQL it is one statement (issue 18: a step write
    was four round trips, BEGIN, UPDATE, INSERT, COMMIT); elsewhere two in a transaction."""
    if connection.vendor == "postgresql" and not connection.in_atomic_block and len(events) <= _ONE_STATEMENT_ROWS:
        return _append_one_statement(key, events, joined)
    session_table = orm.Session._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{session_table}" SET "last_seq" = "last_seq" + %s, "updated_at" = %s '
            'WHERE "id" = %s AND "app" = %s AND "user_id" = %s RETURNING "last_seq"',
            [
                len(events),
                connection.ops.adapt_datetimefield_value(utcnow()),
                key.session_id,
                key.app,
                _user_pk(key.user_id),
            ],
        )
        found = cursor.fetchone()
        if found is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        first = found[0] - len(events) + 1
        saved = [e.replace(seq=first + i) for i, e in enumerate(events)]
        rows = [_row_values(e, session_id=key.session_id, seq=e.seq or 0) for e in saved]
        # A seeded history can be long: batches within the database's parameter limit.
        batch = max(1, min(connection.ops.bulk_batch_size(_EVENT_FIELDS, rows), _ONE_STATEMENT_ROWS))
        for at in range(0, len(rows), batch):
            chunk = rows[at : at + batch]
            placeholders = ", ".join(["(" + ", ".join(["%s"] * len(_EVENT_FIELDS)) + ")"] * len(chunk))
            cursor.execute(
                f'INSERT INTO "{orm.Event._meta.db_table}" ({_EVENT_COLUMNS}) VALUES {placeholders}',
                [value for row in chunk for value in row],
            )
        _run_joined(cursor, joined)
    return [(e, True) for e in saved]


def _run_joined(cursor: Any, joined: Sequence[JoinedWrite]) -> None:
    for write in joined:
        sql, params = write(None)  # the transaction already holds the append
        cursor.execute(sql, list(params))


def _recordset_type(field: Any) -> str:
    """A column's type in the row set the one-statement append reads its rows from."""
    return str(field.db_type(connection))


@functools.lru_cache(maxsize=256)
def _one_statement_sql(count: int, joined: tuple[str, ...]) -> str:
    """The SQL of `_append_one_statement` for `count` rows and the joined writes' statements,
    made once per shape. The rows come as one JSON array parameter (`jsonb_to_recordset`):
    the statement's text and its number of parameters do not grow with the rows, so the
    driver parses it once (issue 23: it parsed each append of over 50 parameters anew, and
    quoted every value of every row apart)."""
    session_table, event_table = orm.Session._meta.db_table, orm.Event._meta.db_table
    parts = [
        f'"s" AS (UPDATE "{session_table}" SET "last_seq" = "last_seq" + %s, "updated_at" = %s '
        'WHERE "id" = %s AND "app" = %s AND "user_id" = %s RETURNING "last_seq")'
    ]
    parts.extend(f'"j{index}" AS ({sql})' for index, sql in enumerate(joined))
    record = ", ".join(f'"{f.column}" {_recordset_type(f)}' for f in _EVENT_FIELDS)
    select = ", ".join(
        f'"s"."last_seq" - {count} + "v"."seq"'
        if f.column == "seq"
        else f'jsonb_set("v"."payload", \'{{seq}}\', to_jsonb("s"."last_seq" - {count} + "v"."seq"))'
        if f.column == "payload"
        else f'"v"."{f.column}"'
        for f in _EVENT_FIELDS
    )
    return (
        f'WITH {", ".join(parts)} INSERT INTO "{event_table}" ({_EVENT_COLUMNS}) '
        f'SELECT {select} FROM "s", jsonb_to_recordset(%s::jsonb) AS "v" ({record}) RETURNING "seq"'
    )


def _row_json(event: Event, *, session_id: str, seq: int) -> dict[str, Any]:
    """One ledger row's column values for the JSON row set (a time as ISO 8601 text)."""
    row = mapping.event_row_values(event, session_id=session_id, seq=seq, tokens=count_text(event.text))
    values = {f.column: row[f.attname] for f in _EVENT_FIELDS}
    values["created_at"] = values["created_at"].isoformat()
    return values


def _append_one_statement(
    key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite]
) -> list[tuple[Event, bool]]:
    """PostgreSQL: the seq counter's UPDATE, the joined writes and the INSERT of the rows as
    one statement (data-modifying CTEs), atomic in autocommit. The rows take their seqs
    from the UPDATE's RETURNING; no row comes back when the session is not the key's."""
    count = len(events)
    params: list[Any] = [count, utcnow(), key.session_id, key.app, _user_pk(key.user_id)]
    joined_sql: list[str] = []
    for write in joined:
        sql, joined_params = write('EXISTS (SELECT 1 FROM "s")')
        joined_sql.append(sql)
        params.extend(joined_params)
    # The payload holds the event's seq, known only once the counter moved: each row's
    # offset goes in its place and the INSERT sets it from the counter.
    rows = [_row_json(event, session_id=key.session_id, seq=offset) for offset, event in enumerate(events, start=1)]
    params.append(json.dumps(rows))
    sql = _one_statement_sql(count, tuple(joined_sql))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    if not returned:
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    first = min(seq for (seq,) in returned)
    return [(e.replace(seq=first + i), True) for i, e in enumerate(events)]


def _append_checked(
    key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite] = ()
) -> list[tuple[Event, bool]]:
    with transaction.atomic():
        # The session row lock serialises appends: seq is the row's counter plus one.
        row = _owned(key).select_for_update().first()
        if row is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        stored = {r.event_id: r for r in orm.Event.objects.filter(session=row, event_id__in=[e.id for e in events])}
        out: list[tuple[Event, bool]] = []
        rows: list[orm.Event] = []
        seq = row.last_seq
        state = dict(row.state or {})
        app_delta: dict[str, Any] = {}
        user_delta: dict[str, Any] = {}
        written: dict[str, Event] = {}
        for event in events:
            if event.id in stored:
                out.append((mapping.event_from_row(stored[event.id]), False))
                continue
            if event.id in written:  # the same id twice in one batch: stored once
                out.append((written[event.id], False))
                continue
            seq += 1
            saved = event.replace(seq=seq)
            written[event.id] = saved
            rows.append(mapping.event_to_row(saved, session_id=row.id, seq=seq, tokens=count_text(event.text)))
            scoped = split_state(copy.deepcopy(dict(event.state_delta)))
            state.update(scoped.session)
            app_delta.update(scoped.app)
            user_delta.update(scoped.user)
            out.append((saved, True))
        if rows:
            orm.Event.objects.bulk_create(rows)
            updates: dict[str, Any] = {"last_seq": seq, "updated_at": utcnow()}
            if any(e.state_delta for e in written.values()):
                updates["state"] = state
            orm.Session.objects.filter(pk=row.pk).update(**updates)
            # The app's and the user's keys in the same transaction as the events that set them.
            _merge_scopes(key.app, key.user_id, app_delta, user_delta)
        if joined:
            with connection.cursor() as cursor:
                _run_joined(cursor, joined)
    return out


def _list_events(key: SessionKey, after_seq: int, limit: int) -> list[Event]:
    # Through the key's session row: events are one statement, and the check of the session
    # only when none came back ("not yours" is an error, "nothing new" is not).
    mine = orm.Event.objects.filter(session__in=_owned(key), session_id=key.session_id, seq__gt=after_seq)
    rows = list(mine.order_by("seq")[:limit])
    if not rows and not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    return [mapping.event_from_row(r) for r in rows]
