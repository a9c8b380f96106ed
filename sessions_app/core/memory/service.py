"""Long-term memory: the async service contract and the in-memory store."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sessions_app.core.events import new_id, utcnow
from sessions_app.core.memory.defaults import DEFAULT_MAX_PER_USER, DEFAULT_MAX_RESULTS, MemoryKind
from sessions_app.core.memory.manager import MemoryManager
from sessions_app.core.memory.ranking import Candidate, CandidateQuery, CorpusStats, Embedder, normalize_text
from sessions_app.core.memory.store import T
from sessions_app.core.memory.values import (
    ApplyResult,
    ExtractionCursor,
    MemoryDraft,
    MemoryEntry,
    MemoryLimitError,
    MemoryOperation,
    MemoryWrite,
    Reconcile,
    SearchOptions,
    UserKey,
)
from sessions_app.core.session import SessionKey

# -- the async contract --------------------------------------------------------------------------


@runtime_checkable
class MemoryService(Protocol):
    """Long-term memory of a user (SPEC 6.1). Every method is scoped to one (app, user)."""

    async def add(self, key: UserKey, draft: MemoryDraft, *, dedupe: bool = True) -> MemoryWrite:
        """Store a memory; with `dedupe` the SPEC 6.3 tiers may skip it or update a similar
        one instead. Raises `InvalidMemoryError` and `MemoryLimitError`."""
        ...

    async def update(self, key: UserKey, memory_id: str, **changes: Any) -> MemoryEntry:
        """Change fields (text, kind, topics, event_time, participants, location);
        raises `MemoryNotFoundError`."""
        ...

    async def delete(self, key: UserKey, memory_id: str) -> bool:
        """Remove one memory; False when there was none."""
        ...

    async def clear(self, key: UserKey) -> int:
        """Remove all the user's memories; how many there were."""
        ...

    async def get(self, key: UserKey, memory_id: str) -> MemoryEntry | None: ...

    async def load(
        self, key: UserKey, *, limit: int = DEFAULT_MAX_RESULTS, kind: MemoryKind | None = None
    ) -> list[MemoryEntry]:
        """The most recently updated memories."""
        ...

    async def search(self, key: UserKey, options: SearchOptions) -> list[MemoryEntry]:
        """Ranked memories for a query, best first, each with its score."""
        ...

    async def count(self, key: UserKey) -> int: ...

    async def get_cursor(self, session: SessionKey) -> ExtractionCursor:
        """Auto memory's position in a session's ledger."""
        ...

    async def apply(
        self,
        key: UserKey,
        operations: Sequence[MemoryOperation],
        *,
        session: SessionKey | None = None,
        expected_seq: int = 0,
        new_seq: int = 0,
        reconcile: Reconcile = "similar",
    ) -> ApplyResult:
        """See `MemoryManager.apply`."""
        ...


async def _direct(func: Callable[[], T]) -> T:
    return func()


class ManagedMemoryService:
    """`MemoryService` over a `MemoryManager`; `call` runs each synchronous step (directly
    by default; the Django backend runs it in a database worker thread)."""

    def __init__(self, manager: MemoryManager, *, call: Callable[[Callable[[], Any]], Any] = _direct) -> None:
        self.manager = manager
        self._call = call

    async def _run(self, func: Callable[[], T]) -> T:
        result: T = await self._call(func)
        return result

    async def add(self, key: UserKey, draft: MemoryDraft, *, dedupe: bool = True) -> MemoryWrite:
        return await self._run(lambda: self.manager.add(key, draft, dedupe=dedupe))

    async def update(self, key: UserKey, memory_id: str, **changes: Any) -> MemoryEntry:
        return await self._run(lambda: self.manager.update(key, memory_id, **changes))

    async def delete(self, key: UserKey, memory_id: str) -> bool:
        return await self._run(lambda: self.manager.delete(key, memory_id))

    async def clear(self, key: UserKey) -> int:
        return await self._run(lambda: self.manager.clear(key))

    async def get(self, key: UserKey, memory_id: str) -> MemoryEntry | None:
        return await self._run(lambda: self.manager.get(key, memory_id))

    async def load(
        self, key: UserKey, *, limit: int = DEFAULT_MAX_RESULTS, kind: MemoryKind | None = None
    ) -> list[MemoryEntry]:
        return await self._run(lambda: self.manager.load(key, limit=limit, kind=kind))

    async def search(self, key: UserKey, options: SearchOptions) -> list[MemoryEntry]:
        return await self._run(lambda: self.manager.search(key, options))

    async def count(self, key: UserKey) -> int:
        return await self._run(lambda: self.manager.count(key))

    async def get_cursor(self, session: SessionKey) -> ExtractionCursor:
        return await self._run(lambda: self.manager.get_cursor(session))

    async def apply(
        self,
        key: UserKey,
        operations: Sequence[MemoryOperation],
        *,
        session: SessionKey | None = None,
        expected_seq: int = 0,
        new_seq: int = 0,
        reconcile: Reconcile = "similar",
    ) -> ApplyResult:
        return await self._run(
            lambda: self.manager.apply(
                key, operations, session=session, expected_seq=expected_seq, new_seq=new_seq, reconcile=reconcile
            )
        )


# -- in memory -----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Row:
    entry: MemoryEntry
    tokens: tuple[str, ...]
    embedding: list[float] | None


def _in_bounds(entry: MemoryEntry, query: CandidateQuery) -> bool:
    if query.kind is not None and entry.kind != query.kind:
        return False
    if query.time_after is not None or query.time_before is not None:
        if entry.event_time is None:
            return False
        if query.time_after is not None and entry.event_time < query.time_after:
            return False
        if query.time_before is not None and entry.event_time > query.time_before:
            return False
    return True


def rank_in_python(
    rows: Iterable[tuple[MemoryEntry, Sequence[str]]], query: CandidateQuery
) -> tuple[list[Candidate], CorpusStats]:
    """`MemoryStore.candidates` over rows already in memory (the in-memory and SQLite path)."""
    wanted = set(query.tokens)
    total = 0
    length = 0
    frequency: Counter[str] = Counter()
    matched: list[Candidate] = []
    for entry, tokens in rows:
        total += 1
        length += len(tokens)
        present = wanted.intersection(tokens)
        frequency.update(present)
        if not _in_bounds(entry, query):
            continue
        if present or (query.phrase and query.phrase in " ".join(normalize_text(entry.text).split())):
            matched.append(Candidate(entry=entry, tokens=tuple(tokens)))
    stats = CorpusStats(
        documents=total, average_length=(length / total) if total else 0.0, document_frequency=dict(frequency)
    )
    return matched[: query.limit] if len(matched) > query.limit else matched, stats


class InMemoryMemoryStore:
    """Keeps memories and cursors in dicts, under one re-entrant lock."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], dict[str, _Row]] = {}
        self._cursors: dict[tuple[str, str, str], ExtractionCursor] = {}
        self._lock = threading.RLock()
        self._depth = 0

    def _user(self, key: UserKey) -> dict[str, _Row]:
        return self._rows.setdefault((key.app, key.user_id), {})

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        # The outermost block snapshots and restores on failure: all or nothing here too.
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            rows = {k: dict(v) for k, v in self._rows.items()}
            cursors = dict(self._cursors)
            self._depth = 1
            try:
                yield
            except BaseException:
                self._rows, self._cursors = rows, cursors
                raise
            finally:
                self._depth = 0

    def insert(
        self, key: UserKey, draft: MemoryDraft, *, tokens: Sequence[str], embedding: Sequence[float] | None, limit: int
    ) -> MemoryEntry:
        with self._lock:
            rows = self._user(key)
            if len(rows) >= limit:
                raise MemoryLimitError(key.user_id, limit)
            now = utcnow()
            entry = MemoryEntry(
                id=new_id(),
                app=key.app,
                user_id=key.user_id,
                text=draft.text,
                kind=draft.kind,
                topics=draft.topics,
                event_time=draft.event_time,
                participants=draft.participants,
                location=draft.location,
                created_at=now,
                updated_at=now,
            )
            rows[entry.id] = _Row(entry=entry, tokens=tuple(tokens), embedding=list(embedding) if embedding else None)
            return entry

    def replace(
        self,
        key: UserKey,
        memory_id: str,
        draft: MemoryDraft,
        *,
        tokens: Sequence[str],
        embedding: Sequence[float] | None,
    ) -> MemoryEntry | None:
        with self._lock:
            rows = self._user(key)
            row = rows.get(memory_id)
            if row is None:
                return None
            entry = replace(
                row.entry,
                text=draft.text,
                kind=draft.kind,
                topics=draft.topics,
                event_time=draft.event_time,
                participants=draft.participants,
                location=draft.location,
                updated_at=utcnow(),
            )
            rows[memory_id] = _Row(entry=entry, tokens=tuple(tokens), embedding=list(embedding) if embedding else None)
            return entry

    def delete(self, key: UserKey, memory_id: str) -> bool:
        with self._lock:
            return self._user(key).pop(memory_id, None) is not None

    def clear(self, key: UserKey) -> int:
        with self._lock:
            rows = self._user(key)
            count = len(rows)
            rows.clear()
            return count

    def get(self, key: UserKey, memory_id: str) -> MemoryEntry | None:
        with self._lock:
            row = self._user(key).get(memory_id)
            return row.entry if row is not None else None

    def recent(self, key: UserKey, *, limit: int, kind: MemoryKind | None = None, offset: int = 0) -> list[MemoryEntry]:
        with self._lock:
            entries = [r.entry for r in self._user(key).values() if kind is None or r.entry.kind == kind]
        entries.sort(key=lambda e: (e.updated_at, e.id), reverse=True)
        return entries[offset : offset + limit]

    def count(self, key: UserKey) -> int:
        with self._lock:
            return len(self._user(key))

    def candidates(self, key: UserKey, query: CandidateQuery) -> tuple[list[Candidate], CorpusStats]:
        with self._lock:
            rows = [(r.entry, r.tokens) for r in self._user(key).values()]
        return rank_in_python(rows, query)

    def vectors(self, key: UserKey, query: CandidateQuery) -> list[tuple[MemoryEntry, list[float]]]:
        with self._lock:
            return [
                (r.entry, list(r.embedding))
                for r in self._user(key).values()
                if r.embedding is not None and _in_bounds(r.entry, query)
            ]

    def get_cursor(self, session: SessionKey) -> ExtractionCursor:
        with self._lock:
            return self._cursors.get((session.app, session.user_id, session.session_id), ExtractionCursor())

    def move_cursor(self, session: SessionKey, *, expected: int, new: int, at: datetime) -> bool:
        with self._lock:
            slot = (session.app, session.user_id, session.session_id)
            if self._cursors.get(slot, ExtractionCursor()).last_seq != expected:
                return False
            self._cursors[slot] = ExtractionCursor(last_seq=new, extracted_at=at)
            return True


class InMemoryMemoryService(ManagedMemoryService):
    """MemoryService in process memory. For tests and single-process use."""

    def __init__(self, *, embedder: Embedder | None = None, max_per_user: int = DEFAULT_MAX_PER_USER) -> None:
        super().__init__(MemoryManager(InMemoryMemoryStore(), embedder=embedder, max_per_user=max_per_user))
