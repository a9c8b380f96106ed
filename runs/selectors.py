"""Reads of run records, with ownership."""

from __future__ import annotations

from typing import Any

from runs import models as orm
from runs.backends import record_from_row
from runs.core.records import RunRecord


def run_get(*, user: Any, run_id: str) -> RunRecord | None:
    row = orm.Run.objects.filter(pk=run_id, user=user).first()
    return record_from_row(row) if row is not None else None
