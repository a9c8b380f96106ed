"""DjangoRunStore: the RunStore contract on the ORM."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime

from django.db import IntegrityError, transaction

from runs import models as orm
from runs.core.errors import DuplicateRequestError
from runs.core.records import RunRecord
from sessions_app.backends import db_call

_FIELDS = [
    "status", "started_at", "ended_at", "last_event_at", "heartbeat_at", "error", "answer", "event_count",
    "model_calls", "tool_calls", "prompt_tokens", "completion_tokens",
]


_LIVE = ("queued", "running")


def record_from_row(row: orm.Run) -> RunRecord:
    return RunRecord(
        id=row.id, app=row.app, user_id=str(row.user_id), session_id=row.session_id, agent=row.agent,
        request_id=row.request_id, owner=row.owner, status=row.status, created_at=row.created_at,  # type: ignore[arg-type]  # choices are the Literal
        **{name: getattr(row, name) for name in _FIELDS if name != "status"},
    )


def _create(record: RunRecord) -> RunRecord:
    data = asdict(record)
    data["user_id"] = int(data["user_id"])
    try:
        with transaction.atomic():
            orm.Run.objects.create(**data)
    except IntegrityError:
        if orm.Run.objects.filter(request_id=record.request_id).exists():
            raise DuplicateRequestError(record.request_id) from None
        raise
    return record


def _save(record: RunRecord) -> None:
    data = asdict(record)
    orm.Run.objects.filter(pk=record.id).update(**{name: data[name] for name in _FIELDS})


def _get(run_id: str) -> RunRecord | None:
    row = orm.Run.objects.filter(pk=run_id).first()
    return record_from_row(row) if row is not None else None


def _heartbeat(run_ids: list[str], at: datetime) -> None:
    orm.Run.objects.filter(pk__in=run_ids, status__in=_LIVE).update(heartbeat_at=at)


def _running() -> list[RunRecord]:
    return [record_from_row(r) for r in orm.Run.objects.filter(status__in=_LIVE)]


def _interrupt(run_id: str, at: datetime, reason: str) -> RunRecord | None:
    error = {"type": "interrupted", "message": reason, "code": None}
    # A conditional update claims the run: when two processes reap at once, one wins.
    won = orm.Run.objects.filter(pk=run_id, status__in=_LIVE).update(status="interrupted", ended_at=at, error=error)
    return _get(run_id) if won else None


class DjangoRunStore:
    async def create(self, record: RunRecord) -> RunRecord:
        return await db_call(_create)(record)

    async def save(self, record: RunRecord) -> None:
        await db_call(_save)(record)

    async def get(self, run_id: str) -> RunRecord | None:
        return await db_call(_get)(run_id)

    async def heartbeat(self, run_ids: Sequence[str], *, at: datetime) -> None:
        if run_ids:
            await db_call(_heartbeat)(list(run_ids), at)

    async def running(self) -> list[RunRecord]:
        return await db_call(_running)()

    async def interrupt(self, run_id: str, *, at: datetime, reason: str) -> RunRecord | None:
        return await db_call(_interrupt)(run_id, at, reason)
