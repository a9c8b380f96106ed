"""History fingerprints of sessions (issue 25, item 5): the lookup a stateless /v1 request
makes and the update after its run. Both are one indexed statement; the fingerprint itself
is computed by runs.core.context.fingerprint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import F

from sessions_app import models as orm


@dataclass(frozen=True)
class HistoryMatch:
    session_id: str
    ambiguous: bool
    """More than one of the user's sessions holds this history; the most recent was taken."""


def session_of_history(*, user: Any, fingerprint: str) -> HistoryMatch | None:
    """The user's most recently updated session whose ledger is exactly the chat with this
    fingerprint: it was taken after the session's last /v1 run and nothing was added since
    (`last_seq` unchanged). Other users' sessions never match."""
    rows = list(
        orm.Session.objects.filter(
            app=settings.AGENTSITE_APP, user=user, history_fingerprint=fingerprint, last_seq=F("fingerprint_seq")
        )
        .order_by("-updated_at")
        .values_list("id", flat=True)[:2]
    )
    return HistoryMatch(session_id=rows[0], ambiguous=len(rows) > 1) if rows else None


def remember_history(*, user: Any, session_id: str, fingerprint: str) -> None:
    """Store the fingerprint of the chat the client now holds, at the ledger's current
    length; the session's earlier fingerprint (a shorter chat) no longer matches."""
    orm.Session.objects.filter(app=settings.AGENTSITE_APP, user=user, id=session_id).update(
        history_fingerprint=fingerprint, fingerprint_seq=F("last_seq")
    )
