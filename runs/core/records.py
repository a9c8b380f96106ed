"""Run records: the durable status and timings of each run, and their store contract."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from runs.core.errors import DuplicateRequestError
from sessions_app.core.events import utcnow

RunStatusName = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"]
TERMINAL_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled", "interrupted"})


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    id: str
    app: str
    user_id: str
    session_id: str
    agent: str
    request_id: str
    status: RunStatusName = "queued"
    created_at: datetime = field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_event_at: datetime | None = None
    error: dict[str, Any] | None = None
    answer: str = ""
    event_count: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def replace(self, **changes: Any) -> RunRecord:
        return replace(self, **changes)


@runtime_checkable
class RunStore(Protocol):
    async def create(self, record: RunRecord) -> RunRecord:
        """Store a new run; raises `DuplicateRequestError` when its request id was used."""
        ...

    async def save(self, record: RunRecord) -> None:
        """Write the record's status, timings, error and counters."""
        ...

    async def get(self, run_id: str) -> RunRecord | None:
        ...


class InMemoryRunStore:
    def __init__(self) -> None:
        self._runs: dict[str, RunRecord] = {}

    async def create(self, record: RunRecord) -> RunRecord:
        if any(r.request_id == record.request_id for r in self._runs.values()):
            raise DuplicateRequestError(record.request_id)
        self._runs[record.id] = record
        return record

    async def save(self, record: RunRecord) -> None:
        self._runs[record.id] = record

    async def get(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)
