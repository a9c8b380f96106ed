"""Reads of run records, with ownership."""

from __future__ import annotations

from typing import Any

from runs import models as orm
from runs.backends import record_from_row
from runs.core.records import RunRecord
from sessions_app import selectors as session_selectors
from sessions_app.core.events import Event


def run_get(*, user: Any, run_id: str) -> RunRecord | None:
    row = orm.Run.objects.filter(pk=run_id, user=user).first()
    return record_from_row(row) if row is not None else None


def run_list(
    *, user: Any, session_id: str | None = None, status: str | None = None, limit: int = 50
) -> list[RunRecord]:
    """The user's runs, newest first, optionally of one session and one status."""
    rows = orm.Run.objects.filter(user=user)
    if session_id:
        rows = rows.filter(session_id=session_id)
    if status:
        rows = rows.filter(status=status)
    return [record_from_row(r) for r in rows.order_by("-created_at")[:limit]]


def run_by_request(*, user: Any, request_id: str) -> RunRecord | None:
    """The user's run made under a request id (the client's idempotency key), if any."""
    row = orm.Run.objects.filter(user=user, request_id=request_id).first()
    return record_from_row(row) if row is not None else None


def run_turn(*, record: RunRecord) -> list[Event]:
    """The ledger events of a run's turn (its input and what the run wrote), oldest first."""
    return session_selectors.request_events(session_id=record.session_id, request_id=record.request_id)


def session_has_run_in(*, session_id: str, statuses: tuple[str, ...]) -> bool:
    """Whether a run of the session has one of `statuses` (not scoped by user: the caller
    checked the session is the user's)."""
    return orm.Run.objects.filter(session_id=session_id, status__in=statuses).exists()


def request_agent(*, session_id: str, request_id: str) -> str | None:
    """The agent of the session's run made under `request_id`, if that run is known."""
    agent: str | None = (
        orm.Run.objects.filter(session_id=session_id, request_id=request_id).values_list("agent", flat=True).first()
    )
    return agent
