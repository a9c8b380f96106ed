"""Reads for the API and the admin; every one checks ownership."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from sessions_app import models as orm


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
