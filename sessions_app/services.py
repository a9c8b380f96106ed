"""Writes on sessions outside a run (the ledger itself is written only by the Runner)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from sessions_app import models as orm
from sessions_app.artifact_files import artifacts_delete
from sessions_app.core.events import new_id, utcnow
from sessions_app.signals import session_deleted, session_deleting


@transaction.atomic
def session_create(*, user: Any, agent: str, title: str = "", state: dict[str, Any] | None = None) -> orm.Session:
    """`state`: the new session's own initial state (the caller has checked its keys)."""
    now = utcnow()
    return orm.Session.objects.create(
        id=new_id(),
        app=settings.AGENTSITE_APP,
        user=user,
        agent=agent,
        title=title,
        state=state or {},
        created_at=now,
        updated_at=now,
    )


def session_rename(*, session: orm.Session, title: str) -> orm.Session:
    """Set the session's title; `updated_at` stays, so a rename does not move the chat up the list."""
    session.title = title
    session.save(update_fields=["title"])
    return session


def session_delete(*, session: orm.Session) -> None:
    """Delete the session, its ledger and derived rows, and its artifacts' files.

    Its runs are stopped first (`session_deleting`), so none writes to a session that is
    going; the wait happens before the transaction, which it would otherwise hold open.
    """
    session_id, user_id = session.id, session.user_id
    session_deleting.send(sender=orm.Session, session=session)
    with transaction.atomic():
        artifacts_delete(rows=orm.Artifact.objects.filter(session=session))
        session.delete()
    session_deleted.send(sender=orm.Session, session_id=session_id, user_id=user_id)
