"""Summary rows: read, write and advance (the idempotent, conditional update of SPEC 1.8)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, QuerySet
from django.db.models.sql.subqueries import UpdateQuery

from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.backends.db import _owned
from sessions_app.core.session import SessionKey, SessionNotFoundError, Summary


def _get_summary(key: SessionKey, filter_key: str) -> Summary | None:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    row = orm.Summary.objects.filter(session_id=key.session_id, filter_key=filter_key).exclude(text="").first()
    return mapping.summary_from_row(row) if row is not None else None


def _put_summary(key: SessionKey, summary: Summary) -> None:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    orm.Summary.objects.update_or_create(
        session_id=key.session_id,
        filter_key=summary.filter_key,
        defaults={**mapping.summary_fields(summary), "version": summary.version},
    )


def _update_returning(rows: QuerySet[orm.Summary], values: Mapping[str, Any]) -> orm.Summary | None:
    """UPDATE `rows` with `values` in one statement and return the (first) row it changed,
    as stored after it; None when it changed none."""
    query = rows.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(connection=connection).as_sql()
    columns = ", ".join(f'"{f.column}"' for f in orm.Summary._meta.concrete_fields)
    changed = list(orm.Summary.objects.raw(f"{sql} RETURNING {columns}", params))
    return changed[0] if changed else None


def _advance_summary(key: SessionKey, summary: Summary) -> Summary | None:
    if summary.boundary is None:
        raise ValueError("advance_summary needs a summary with a boundary")
    fields = mapping.summary_fields(summary)
    # Summary rows belong to the session row (the key's owner): matching through it makes
    # an update of someone else's session touch nothing, without a check of its own.
    mine = orm.Summary.objects.filter(session__in=_owned(key), filter_key=summary.filter_key)
    # The idempotency guard is in the WHERE clause: a write whose boundary is not past the
    # stored one changes nothing, whoever else wrote in between. The common case, an
    # existing row advanced, is that one statement (issue 18: it was BEGIN, UPDATE and a
    # SELECT of the row); the row it changed comes back with RETURNING.
    advanced = _update_returning(
        mine.filter(last_seq__lt=summary.boundary.last_seq), {**fields, "version": F("version") + 1}
    )
    if advanced is not None:
        return mapping.summary_from_row(advanced)
    with transaction.atomic():
        updated = mine.filter(last_seq__lt=summary.boundary.last_seq).update(**fields, version=F("version") + 1)
        if not updated:
            if not _owned(key).exists():
                raise SessionNotFoundError(f"session {key.session_id!r} not found")
            if mine.exists():
                return None
            try:
                with transaction.atomic():
                    orm.Summary.objects.create(
                        session_id=key.session_id, filter_key=summary.filter_key, version=1, **fields
                    )
            except IntegrityError:
                # Created by a concurrent writer (or the lock) since: compare against it.
                if not mine.filter(last_seq__lt=summary.boundary.last_seq).update(**fields, version=F("version") + 1):
                    return None
        return mapping.summary_from_row(mine.get())
