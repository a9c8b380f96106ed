"""DjangoRunStore and DjangoCheckpointStore: the run and graph-checkpoint contracts on the ORM."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from django.db import IntegrityError, connection, transaction

from runs import models as orm
from runs.core.agents.graph.checkpoint import Checkpoint, PendingInterrupt
from runs.core.errors import DuplicateRequestError, TooManyRunsError
from runs.core.records import RunRecord, abandoned_error
from sessions_app.backends import db_call
from sessions_app.core.events import new_id

_FIELDS = [
    "status",
    "started_at",
    "ended_at",
    "last_event_at",
    "heartbeat_at",
    "error",
    "answer",
    "event_count",
    "model_calls",
    "tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "output",
    "trace",
]


_LIVE = ("queued", "running")


def record_from_row(row: orm.Run) -> RunRecord:
    return RunRecord(
        id=row.id,
        app=row.app,
        user_id=str(row.user_id),
        session_id=row.session_id,
        agent=row.agent,
        request_id=row.request_id,
        owner=row.owner,
        status=row.status,
        created_at=row.created_at,  # type: ignore[arg-type]  # choices are the Literal
        **{name: getattr(row, name) for name in _FIELDS if name != "status"},
    )


def _row_values(record: RunRecord) -> dict[str, Any]:
    """The record's fields as the row's (the values as they are: `asdict` copied every one
    deeply, the trace and output included, and was half of a record write's CPU, issue 23)."""
    data = {f.name: getattr(record, f.name) for f in fields(record)}
    data["user_id"] = int(data["user_id"])
    return data


def _create(record: RunRecord) -> RunRecord:
    data = _row_values(record)
    try:
        # One INSERT is atomic on its own; inside a caller's transaction a savepoint keeps
        # that transaction usable after a refused duplicate.
        with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
            orm.Run.objects.create(**data)
    except IntegrityError:
        if orm.Run.objects.filter(user_id=data["user_id"], request_id=record.request_id).exists():
            raise DuplicateRequestError(record.request_id) from None
        raise
    return record


@functools.lru_cache(maxsize=16)
def _create_sql(vendor: str, guard: str | None) -> str:
    """`_create_statement`'s SQL, written once per vendor and guard: every column a `%s`."""
    del vendor  # part of the cache key: quoting is the same on both backends
    meta = orm.Run._meta
    columns = ", ".join(f'"{f.column}"' for f in meta.concrete_fields)
    values = ", ".join(["%s"] * len(meta.concrete_fields))
    if guard is None:
        return f'INSERT INTO "{meta.db_table}" ({columns}) VALUES ({values})'
    return f'INSERT INTO "{meta.db_table}" ({columns}) SELECT {values} WHERE {guard}'


def _create_statement(record: RunRecord, guard: str | None) -> tuple[str, list[Any]]:
    """`_create`'s INSERT as SQL and parameters, for a ledger append to run in its own
    transaction (issue 18: the run's row commits with its user message). With the append's
    `guard`, the row is inserted from a SELECT that holds to it (an INSERT has no WHERE).
    The values are converted as the ORM converts them; the statement is written once
    (issue 23: compiling it through the ORM was most of its CPU)."""
    data = _row_values(record)
    params = [f.get_db_prep_save(data[f.attname], connection) for f in orm.Run._meta.concrete_fields]
    return _create_sql(connection.vendor, guard), params


def _save(record: RunRecord) -> None:
    orm.Run.objects.filter(pk=record.id).update(**{name: getattr(record, name) for name in _FIELDS})


@functools.lru_cache(maxsize=16)
def _save_sql(vendor: str, guard: str | None) -> str:
    """`_save_statement`'s SQL, written once per vendor and guard: every field a `%s` (a
    None parameter writes NULL, as the ORM's `= NULL` does), then the run's id."""
    del vendor  # part of the cache key: quoting is the same on both backends
    meta = orm.Run._meta
    assignments = ", ".join(f'"{meta.get_field(name).column}" = %s' for name in _FIELDS)
    where = f'"{meta.db_table}"."{meta.pk.column}" = %s'
    if guard is not None:
        where = f"({where} AND ({guard}))"
    return f'UPDATE "{meta.db_table}" SET {assignments} WHERE {where}'


_SAVED_FIELDS = [orm.Run._meta.get_field(name) for name in _FIELDS]


def _save_statement(record: RunRecord, guard: str | None) -> tuple[str, list[Any]]:
    """`_save`'s UPDATE as SQL and parameters, for a ledger append to run in its own
    transaction (issue 18: the run's end record commits with its last step), holding to
    the append's `guard` condition when it gives one. The values are converted as the ORM
    converts them; the statement is written once (issue 23: building it through the ORM
    was most of its CPU)."""
    params = [field.get_db_prep_save(getattr(record, field.name), connection) for field in _SAVED_FIELDS]
    params.append(record.id)
    return _save_sql(connection.vendor, guard), params


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


def _resume(run_id: str, user_id: str, request_id: str, owner: str, at: datetime) -> RunRecord | None:
    # Issue 20: a conditional update claims the paused run: of two requests bringing its
    # client's tool results at once, one continues it.
    try:
        with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
            won = orm.Run.objects.filter(pk=run_id, user_id=int(user_id), status="requires_action").update(
                status="running",
                request_id=request_id,
                owner=owner,
                heartbeat_at=at,
                ended_at=None,
                error=None,
            )
    except IntegrityError:
        raise DuplicateRequestError(request_id) from None
    return _get(run_id) if won else None


def _abandon(run_id: str, user_id: str, at: datetime, reason: str) -> RunRecord | None:
    won = orm.Run.objects.filter(pk=run_id, user_id=int(user_id), status="requires_action").update(
        status="cancelled",
        ended_at=at,
        error=abandoned_error(reason),
    )
    return _get(run_id) if won else None


@functools.lru_cache(maxsize=4)
def _active_runs_sql(vendor: str) -> str:
    """`_active_runs_of`'s count, written once (issue 23: the ORM built it for every run)."""
    del vendor  # part of the cache key: quoting is the same on both backends
    meta = orm.Run._meta
    user, status = meta.get_field("user").column, meta.get_field("status").column
    live = ", ".join(["%s"] * len(_LIVE))
    return f'SELECT COUNT(*) FROM "{meta.db_table}" WHERE "{user}" = %s AND "{status}" IN ({live})'


def _active_runs_of(user_id: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_active_runs_sql(connection.vendor), [int(user_id), *_LIVE])
        (count,) = cursor.fetchone()
    return int(count)


def active_runs_admission(limit: int) -> Any:
    """The Runner's admission hook: refuse a user's run while `limit` of theirs are live, in
    any process (0: no limit). It counts the user's queued/running rows of runs.Run, so
    every web process and worker sees the same count (issue 23, item 4). The count and
    the run's INSERT are not one transaction: starts of one user that all count before
    any of them inserts can all pass, so at most limit + (that user's concurrent starts
    - 1) runs are live. The limit is a guard against runaway clients, not an exact quota."""

    async def admit(user_id: str) -> None:
        if not limit:
            return
        active = await db_call(_active_runs_of)(user_id)
        if active >= limit:
            raise TooManyRunsError(active=active, limit=limit)

    return admit


class DjangoRunStore:
    async def create(self, record: RunRecord) -> RunRecord:
        return await db_call(_create)(record)

    async def save(self, record: RunRecord) -> None:
        await db_call(_save)(record)

    def joined_create(self, record: RunRecord) -> Callable[[str | None], tuple[str, list[Any]]]:
        """`create(record)` as a write that commits with a ledger append of the Django
        session service (same database); a duplicate request id fails that append whole."""
        return functools.partial(_create_statement, record)

    def joined_save(self, record: RunRecord) -> Callable[[str | None], tuple[str, list[Any]]]:
        """`save(record)` as a write that commits with a ledger append of the Django session
        service (`DjangoSessionService.append_events(joined=...)`; same database)."""
        return functools.partial(_save_statement, record)

    async def get(self, run_id: str) -> RunRecord | None:
        return await db_call(_get)(run_id)

    async def heartbeat(self, run_ids: Sequence[str], *, at: datetime) -> None:
        if run_ids:
            await db_call(_heartbeat)(list(run_ids), at)

    async def running(self) -> list[RunRecord]:
        return await db_call(_running)()

    async def interrupt(self, run_id: str, *, at: datetime, reason: str) -> RunRecord | None:
        return await db_call(_interrupt)(run_id, at, reason)

    async def resume(self, run_id: str, *, user_id: str, request_id: str, owner: str, at: datetime) -> RunRecord | None:
        return await db_call(_resume)(run_id, user_id, request_id, owner, at)

    async def abandon(self, run_id: str, *, user_id: str, at: datetime, reason: str) -> RunRecord | None:
        return await db_call(_abandon)(run_id, user_id, at, reason)


# -- graph checkpoints ----------------------------------------------------------------------


def checkpoint_from_row(row: orm.GraphCheckpoint) -> Checkpoint:
    return Checkpoint(
        id=row.checkpoint_id,
        run_id=row.run_id,
        graph=row.graph,
        step=row.step,
        state=row.state,
        next_nodes=tuple(row.next_nodes),
        barriers={k: tuple(v) for k, v in row.barriers.items()},
        writes=row.writes,
        resume_values={k: tuple(v) for k, v in row.resume_values.items()},
        interrupt=PendingInterrupt.from_dict(row.interrupt) if row.interrupt else None,
        parent_id=row.parent_checkpoint_id or None,
        resumed_by=row.resumed_by,
        created_at=row.created_at,
    )


def _put_checkpoint(checkpoint: Checkpoint) -> Checkpoint:
    stored = checkpoint.replace(id=checkpoint.id or new_id())
    data = stored.to_dict()
    orm.GraphCheckpoint.objects.create(
        run_id=stored.run_id,
        checkpoint_id=stored.id,
        graph=stored.graph,
        step=stored.step,
        state=data["state"],
        next_nodes=data["next_nodes"],
        barriers=data["barriers"],
        writes=data["writes"],
        resume_values=data["resume_values"],
        interrupt=data["interrupt"],
        parent_checkpoint_id=stored.parent_id or "",
        resumed_by=stored.resumed_by,
        created_at=stored.created_at,
    )
    return stored


def _get_checkpoint(checkpoint_id: str) -> Checkpoint | None:
    row = orm.GraphCheckpoint.objects.filter(checkpoint_id=checkpoint_id).first()
    return checkpoint_from_row(row) if row is not None else None


def _latest_checkpoint(run_id: str) -> Checkpoint | None:
    row = orm.GraphCheckpoint.objects.filter(run_id=run_id).order_by("-id").first()
    return checkpoint_from_row(row) if row is not None else None


def _list_checkpoints(run_id: str) -> list[Checkpoint]:
    return [checkpoint_from_row(r) for r in orm.GraphCheckpoint.objects.filter(run_id=run_id).order_by("id")]


def _claim_checkpoint(checkpoint_id: str, by: str) -> bool:
    # A conditional update: of two resumes racing for one pause, exactly one changes the row.
    return bool(orm.GraphCheckpoint.objects.filter(checkpoint_id=checkpoint_id, resumed_by="").update(resumed_by=by))


def _release_checkpoint(checkpoint_id: str, by: str) -> None:
    orm.GraphCheckpoint.objects.filter(checkpoint_id=checkpoint_id, resumed_by=by).update(resumed_by="")


def pending_interrupts(run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """run id -> the interrupt its newest checkpoint waits on, for the runs that wait."""
    found: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    rows = orm.GraphCheckpoint.objects.filter(run_id__in=list(run_ids)).order_by("run_id", "-id")
    for run_id, interrupt, resumed_by in rows.values_list("run_id", "interrupt", "resumed_by"):
        if run_id in seen:
            continue  # only the newest checkpoint of each run says whether it waits
        seen.add(run_id)
        if interrupt and not resumed_by:
            found[run_id] = interrupt
    return found


class DjangoCheckpointStore:
    """The CheckpointStore contract on the ORM: graph runs resume in any process."""

    async def put(self, checkpoint: Checkpoint) -> Checkpoint:
        return await db_call(_put_checkpoint)(checkpoint)

    async def get(self, checkpoint_id: str) -> Checkpoint | None:
        return await db_call(_get_checkpoint)(checkpoint_id)

    async def latest(self, run_id: str) -> Checkpoint | None:
        return await db_call(_latest_checkpoint)(run_id)

    async def list(self, run_id: str) -> list[Checkpoint]:
        return await db_call(_list_checkpoints)(run_id)

    async def claim(self, checkpoint_id: str, *, by: str) -> bool:
        return await db_call(_claim_checkpoint)(checkpoint_id, by)

    async def release(self, checkpoint_id: str, *, by: str) -> None:
        await db_call(_release_checkpoint)(checkpoint_id, by)
