"""Reads of run records, with ownership."""

from __future__ import annotations

from typing import Any

from runs import models as orm
from runs.backends import record_from_row
from runs.core.records import RunRecord


def run_get(*, user: Any, run_id: str) -> RunRecord | None:
    row = orm.Run.objects.filter(pk=run_id, user=user).first()
    return record_from_row(row) if row is not None else None


def run_list(*, user: Any, session_id: str | None = None, status: str | None = None, limit: int = 50) -> list[RunRecord]:
    """The user's runs, newest first, optionally of one session and one status."""
    rows = orm.Run.objects.filter(user=user)
    if session_id:
        rows = rows.filter(session_id=session_id)
    if status:
        rows = rows.filter(status=status)
    return [record_from_row(r) for r in rows.order_by("-created_at")[:limit]]
