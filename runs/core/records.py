"""Run records: the durable status and timings of each run, and their store contract."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from runs.core.errors import DuplicateRequestError
from sessions_app.core.events import replaced, utcnow

RunStatusName = Literal["queued", "running", "requires_action", "completed", "failed", "cancelled", "interrupted"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "interrupted"})
REQUIRES_ACTION: RunStatusName = "requires_action"
"""Issue 20: a run paused for the results of its client's tools (OpenAI's Assistants name
for it). Not executing and not ended: the client's next request with the results continues
the same run (`RunStore.resume`)."""


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    id: str
    app: str
    user_id: str
    session_id: str
    agent: str
    request_id: str
    owner: str = ""
    status: RunStatusName = "queued"
    created_at: datetime = field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_event_at: datetime | None = None
    heartbeat_at: datetime | None = None
    error: dict[str, Any] | None = None
    answer: str = ""
    event_count: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Issue 20: the validated structured answer (a JSON value) of a run with an output schema.
    output: Any = None
    # SPEC 1.9.3 / issue 21: the execution trace (runs.core.trace), set when the run ends.
    trace: Mapping[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """Not executing: ended, or paused for its client's tool results (its outcome so
        far is saved; nothing of it runs until a request resumes it)."""
        return self.status in TERMINAL_STATUSES or self.status == REQUIRES_ACTION

    def replace(self, **changes: Any) -> RunRecord:
        # Without `__init__` (sessions_app.core.events.replaced): the runner makes one per event.
        return replaced(self, _RECORD_FIELDS, changes)


_RECORD_FIELDS = frozenset(f.name for f in fields(RunRecord))


@runtime_checkable
class RunStore(Protocol):
    async def create(self, record: RunRecord) -> RunRecord:
        """Store a new run; raises `DuplicateRequestError` when its user already used its
        request id (request ids are the client's: unique per user, not across users)."""
        ...

    async def save(self, record: RunRecord) -> None:
        """Write the record's status, timings, error and counters."""
        ...

    async def get(self, run_id: str) -> RunRecord | None: ...

    async def heartbeat(self, run_ids: Sequence[str], *, at: datetime) -> None:
        """Record that these runs are alive in their owner process."""
        ...

    async def running(self) -> list[RunRecord]:
        """Every run whose status is still queued or running."""
        ...

    async def interrupt(self, run_id: str, *, at: datetime, reason: str) -> RunRecord | None:
        """Mark a run `interrupted` if it is still queued or running; the new record, or None
        when another process got there first (a conditional update: one winner)."""
        ...

    async def resume(self, run_id: str, *, user_id: str, request_id: str, owner: str, at: datetime) -> RunRecord | None:
        """Claim a run paused in `requires_action` for `user_id`: it is `running` again, owned
        by `owner`, its request id the resuming request's; the new record, or None when it is
        not (or no longer) paused (a conditional update: of two resumes, one wins). Raises
        `DuplicateRequestError` when the user already used `request_id`."""
        ...

    async def abandon(self, run_id: str, *, user_id: str, at: datetime, reason: str) -> RunRecord | None:
        """End a run paused in `requires_action` for `user_id` whose client moved on (a new
        message instead of the tool results): `cancelled`, error type `abandoned` with
        `reason`; the new record, or None when it is not (or no longer) paused."""
        ...


@runtime_checkable
class JoinableRunStore(Protocol):
    """A run store whose record write can commit inside a ledger append (issue 18: the
    run's end record with its last step, one transaction and one write less per run).

    `joined_save(record)` returns the write as the session service's `append_events`
    takes it in `joined` (`runs.backends.DjangoRunStore` with the Django session service,
    which says so with `joins_writes`); the runner joins them only when both can."""

    def joined_save(self, record: RunRecord) -> Callable[[str | None], Any]:
        """`save(record)`, as a write to run inside a ledger append's transaction."""
        ...


@runtime_checkable
class JoinableRunCreate(Protocol):
    """A run store whose new record can be inserted inside a ledger append (issue 18: the
    run's row commits with its user message, one transaction and one commit less per run).

    `joined_create(record)` returns the INSERT as the session service's `append_events`
    takes it in `joined`. A duplicate request id fails that append whole (nothing of the
    turn is written); the runner then learns why from `create`."""

    def joined_create(self, record: RunRecord) -> Callable[[str | None], Any]:
        """`create(record)`, as a write to run inside a ledger append's transaction."""
        ...


class InMemoryRunStore:
    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}

    async def create(self, record: RunRecord) -> RunRecord:
        if any(r.request_id == record.request_id and r.user_id == record.user_id for r in self._runs.values()):
            raise DuplicateRequestError(record.request_id)
        self._runs[record.id] = record
        return record

    async def save(self, record: RunRecord) -> None:
        self._runs[record.id] = record

    async def get(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    async def heartbeat(self, run_ids: Sequence[str], *, at: datetime) -> None:
        for run_id in run_ids:
            if run_id in self._runs:
                self._runs[run_id] = self._runs[run_id].replace(
                    heartbeat_at=max_dt(self._runs[run_id].heartbeat_at, at)
                )

    async def running(self) -> list[RunRecord]:
        return [r for r in self._runs.values() if not r.finished]

    async def interrupt(self, run_id: str, *, at: datetime, reason: str) -> RunRecord | None:
        record = self._runs.get(run_id)
        if record is None or record.finished:
            return None
        record = record.replace(
            status="interrupted", ended_at=at, error={"type": "interrupted", "message": reason, "code": None}
        )
        self._runs[run_id] = record
        return record

    async def resume(self, run_id: str, *, user_id: str, request_id: str, owner: str, at: datetime) -> RunRecord | None:
        record = self._runs.get(run_id)
        if record is None or record.status != REQUIRES_ACTION or record.user_id != user_id:
            return None
        if any(r.request_id == request_id and r.user_id == user_id and r.id != run_id for r in self._runs.values()):
            raise DuplicateRequestError(request_id)
        record = record.replace(
            status="running", request_id=request_id, owner=owner, heartbeat_at=at, ended_at=None, error=None
        )
        self._runs[run_id] = record
        return record

    async def abandon(self, run_id: str, *, user_id: str, at: datetime, reason: str) -> RunRecord | None:
        record = self._runs.get(run_id)
        if record is None or record.status != REQUIRES_ACTION or record.user_id != user_id:
            return None
        record = record.replace(status="cancelled", ended_at=at, error=abandoned_error(reason))
        self._runs[run_id] = record
        return record


def abandoned_error(reason: str) -> dict[str, Any]:
    """The error of a paused run its client abandoned (issue 20)."""
    return {"type": "abandoned", "message": reason, "code": None}


def max_dt(a: datetime | None, b: datetime) -> datetime:
    return b if a is None or b > a else a
