"""DjangoSessionService: the SessionService contract on the ORM.

Each async method wraps one synchronous, transactional function. They run in worker
threads (`thread_sensitive=False`): a run's loop must never wait on the one thread that
serves synchronous views, which may itself be waiting for the run.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction

from runs.core.tokens import count_text
from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.core.events import Event, new_id, utcnow
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError, Summary

P = ParamSpec("P")
R = TypeVar("R")


def db_call(func: Callable[P, R]) -> Callable[P, Any]:
    """Run a synchronous ORM function from async code, in a worker thread.

    Worker threads keep their connection between calls (no connect per call); one that
    breaks (database restarted, network blip) is dropped so the thread's next call
    reconnects instead of failing forever.
    """

    @functools.wraps(func)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError):
            connection.close()
            raise

    return sync_to_async(guarded, thread_sensitive=False)


def _owned(key: SessionKey) -> Any:
    return orm.Session.objects.filter(app=key.app, user_id=key.user_id, id=key.session_id)


def _create(app: str, user_id: str, session_id: str, agent: str, title: str, state: dict[str, Any]) -> Session:
    now = utcnow()
    try:
        with transaction.atomic():
            row = orm.Session.objects.create(
                id=session_id, app=app, user_id=int(user_id), agent=agent, title=title, state=state,
                created_at=now, updated_at=now,
            )
    except IntegrityError:
        raise ValueError(f"session {session_id!r} already exists") from None
    return mapping.session_from_row(row)


def _get(key: SessionKey, event_limit: int | None) -> Session | None:
    row = _owned(key).first()
    if row is None:
        return None
    # Only the columns an Event is rebuilt from: building full model rows (text, JSON
    # payload twice over) for a window of hundreds of events dominated a turn's start.
    rows = orm.Event.objects.filter(session=row).order_by("-seq").values_list("payload", "seq", "event_id")
    if event_limit is not None:
        rows = rows[:event_limit]
    loaded = [mapping.event_from_values(payload, seq, event_id) for payload, seq, event_id in rows]
    loaded.reverse()
    session = mapping.session_from_row(row, loaded)
    session.summaries = {s.filter_key: mapping.summary_from_row(s) for s in row.summaries.all()}
    return session


def _list(app: str, user_id: str) -> list[Session]:
    rows = orm.Session.objects.filter(app=app, user_id=int(user_id)).order_by("-updated_at")
    return [mapping.session_from_row(r) for r in rows]


def _delete(key: SessionKey) -> bool:
    deleted, _ = _owned(key).delete()
    return deleted > 0


def _append(key: SessionKey, event: Event) -> tuple[Event, bool]:
    with transaction.atomic():
        # The session row lock serialises appends: seq is the row's counter plus one.
        row = _owned(key).select_for_update().first()
        if row is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        existing = orm.Event.objects.filter(session=row, event_id=event.id).first()
        if existing is not None:
            return mapping.event_from_row(existing), False
        seq = row.last_seq + 1
        tokens = count_text(event.text)
        orm.Event.objects.bulk_create([mapping.event_to_row(event, session_id=row.id, seq=seq, tokens=tokens)])
        updates: dict[str, Any] = {"last_seq": seq, "updated_at": utcnow()}
        if event.state_delta:
            state = dict(row.state or {})
            state.update(copy.deepcopy(dict(event.state_delta)))
            updates["state"] = state
        orm.Session.objects.filter(pk=row.pk).update(**updates)
    return event.replace(seq=seq), True


def _list_events(key: SessionKey, after_seq: int, limit: int) -> list[Event]:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    rows = orm.Event.objects.filter(session_id=key.session_id, seq__gt=after_seq).order_by("seq")[:limit]
    return [mapping.event_from_row(r) for r in rows]


def _get_summary(key: SessionKey, filter_key: str) -> Summary | None:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    row = orm.Summary.objects.filter(session_id=key.session_id, filter_key=filter_key).first()
    return mapping.summary_from_row(row) if row is not None else None


def _put_summary(key: SessionKey, summary: Summary) -> None:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    boundary = summary.boundary
    orm.Summary.objects.update_or_create(
        session_id=key.session_id,
        filter_key=summary.filter_key,
        defaults={
            "text": summary.text,
            "cutoff_at": boundary.cutoff_at if boundary else None,
            "last_event_id": boundary.last_event_id if boundary else "",
            "last_seq": boundary.last_seq if boundary else 0,
            "updated_at": summary.updated_at,
            "version": summary.version,
        },
    )


class DjangoSessionService:
    """SessionService on the Django ORM (SQLite or PostgreSQL)."""

    async def create_session(
        self,
        *,
        app: str,
        user_id: str,
        session_id: str | None = None,
        agent: str = "",
        title: str = "",
        state: Mapping[str, Any] | None = None,
    ) -> Session:
        session_id = session_id or new_id()
        SessionKey(app=app, user_id=user_id, session_id=session_id)
        return await db_call(_create)(app, user_id, session_id, agent, title, dict(state or {}))

    async def get_session(self, key: SessionKey, *, event_limit: int | None = None) -> Session | None:
        return await db_call(_get)(key, event_limit)

    async def list_sessions(self, *, app: str, user_id: str) -> list[Session]:
        return await db_call(_list)(app, user_id)

    async def delete_session(self, key: SessionKey) -> bool:
        return await db_call(_delete)(key)

    async def append_event(self, session: Session, event: Event) -> Event:
        saved, created = await db_call(_append)(session.key, event)
        if created:
            session.events.append(saved)
            session.state.update(copy.deepcopy(dict(saved.state_delta)))
            session.last_seq = max(session.last_seq, saved.seq or 0)
            session.updated_at = utcnow()
        return saved

    async def list_events(self, key: SessionKey, *, after_seq: int = 0, limit: int = 100) -> list[Event]:
        return await db_call(_list_events)(key, after_seq, limit)

    async def get_summary(self, key: SessionKey, *, filter_key: str = "") -> Summary | None:
        return await db_call(_get_summary)(key, filter_key)

    async def put_summary(self, key: SessionKey, summary: Summary) -> None:
        await db_call(_put_summary)(key, summary)
