"""Summary rows: read, write and advance (the idempotent, conditional update of SPEC 1.8)."""

from __future__ import annotations

import functools

from django.db import connection

from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.backends.db import _owned
from sessions_app.core.session import SessionKey, SessionNotFoundError, Summary


def _get_summary(key: SessionKey, filter_key: str) -> Summary | None:
    # Through the key's session row, so that a stored summary is one statement; the check of
    # the session only when none came back ("not yours" is an error, "none yet" is not).
    row = (
        orm.Summary.objects.filter(session__in=_owned(key), session_id=key.session_id, filter_key=filter_key)
        .exclude(text="")
        .first()
    )
    if row is not None:
        return mapping.summary_from_row(row)
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    return None


def _put_summary(key: SessionKey, summary: Summary) -> None:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    orm.Summary.objects.update_or_create(
        session_id=key.session_id,
        filter_key=summary.filter_key,
        defaults={**mapping.summary_fields(summary), "version": summary.version},
    )


@functools.cache
def _advance_statement(columns: tuple[str, ...]) -> str:
    """The one statement of an advance (written once per set of `columns`, those
    `mapping.summary_fields` sets): insert the session's first summary for the filter
    key, or advance the stored one when the new boundary is past it (the idempotency guard of
    SPEC 1.8, in the conflict's WHERE), through the key's own session row, so that another
    user's session gets nothing written. It returns the row as stored, or nothing."""
    quote = connection.ops.quote_name
    table, sessions = quote(orm.Summary._meta.db_table), quote(orm.Session._meta.db_table)
    named = ", ".join(quote(c) for c in columns)
    changed = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in columns)
    returned = ", ".join(quote(f.column) for f in orm.Summary._meta.concrete_fields)
    values = ", ".join(["%s"] * len(columns))
    return (
        f'INSERT INTO {table} ("session_id", "filter_key", {named}, "version", "lease_token", "lease_until") '
        f"SELECT s.\"id\", %s, {values}, 1, '', NULL FROM {sessions} s "
        f'WHERE s."id" = %s AND s."app" = %s AND s."user_id" = %s '
        f'ON CONFLICT ("session_id", "filter_key") DO UPDATE SET {changed}, "version" = {table}."version" + 1 '
        f'WHERE {table}."last_seq" < excluded."last_seq" RETURNING {returned}'
    )


def _advance_summary(key: SessionKey, summary: Summary) -> Summary | None:
    """Store `summary` when its boundary is past the stored one's (or none is stored): the
    row as stored, else None; SessionNotFoundError when the session is not the key's.

    One statement whatever the case (issue 23: a session's first summary took eight, an
    UPDATE that found nothing twice, two checks, a savepoint, the INSERT and a read back);
    a second only to tell "not yours" from "not past the stored one" when it wrote nothing."""
    if summary.boundary is None:
        raise ValueError("advance_summary needs a summary with a boundary")
    if not key.user_id.isdigit():  # Session.user is an integer key: no session is this key's
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    fields = mapping.summary_fields(summary)
    prepared = [orm.Summary._meta.get_field(name).get_db_prep_save(value, connection) for name, value in fields.items()]
    params = [summary.filter_key, *prepared, key.session_id, key.app, int(key.user_id)]
    stored = list(orm.Summary.objects.raw(_advance_statement(tuple(fields)), params))
    if stored:
        return mapping.summary_from_row(stored[0])
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    return None
