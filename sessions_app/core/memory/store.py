"""Long-term memory: the synchronous storage contract."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

from sessions_app.core.memory.defaults import MemoryKind
from sessions_app.core.memory.ranking import Candidate, CandidateQuery, CorpusStats
from sessions_app.core.memory.values import ExtractionCursor, MemoryDraft, MemoryEntry, UserKey
from sessions_app.core.session import SessionKey

# -- storage contract --------------------------------------------------------------------------


@runtime_checkable
class MemoryStore(Protocol):
    """Synchronous storage of memories and extraction cursors. Every method is scoped to a
    user; none may return or touch another user's data."""

    def atomic(self) -> contextlib.AbstractContextManager[Any]:
        """A block whose writes happen together or not at all (and see each other)."""
        ...

    def insert(
        self, key: UserKey, draft: MemoryDraft, *, tokens: Sequence[str], embedding: Sequence[float] | None, limit: int
    ) -> MemoryEntry:
        """Store a new memory; raises `MemoryLimitError` when the user holds `limit` already."""
        ...

    def replace(
        self,
        key: UserKey,
        memory_id: str,
        draft: MemoryDraft,
        *,
        tokens: Sequence[str],
        embedding: Sequence[float] | None,
    ) -> MemoryEntry | None:
        """Overwrite a memory's content; None when the user has no such memory."""
        ...

    def delete(self, key: UserKey, memory_id: str) -> bool: ...

    def clear(self, key: UserKey) -> int: ...

    def get(self, key: UserKey, memory_id: str) -> MemoryEntry | None: ...

    def recent(self, key: UserKey, *, limit: int, kind: MemoryKind | None = None, offset: int = 0) -> list[MemoryEntry]:
        """Most recently updated first."""
        ...

    def count(self, key: UserKey) -> int: ...

    def candidates(self, key: UserKey, query: CandidateQuery) -> tuple[list[Candidate], CorpusStats]:
        """Memories that share a token with the query (or contain its phrase), and the
        statistics of all the user's memories for the query's tokens."""
        ...

    def vectors(self, key: UserKey, query: CandidateQuery) -> list[tuple[MemoryEntry, list[float]]]:
        """Memories with an embedding, within the query's kind and time bounds."""
        ...

    def get_cursor(self, session: SessionKey) -> ExtractionCursor: ...

    def move_cursor(self, session: SessionKey, *, expected: int, new: int, at: datetime) -> bool:
        """Advance the cursor from `expected` to `new`; False (and nothing written) when it
        is no longer at `expected` (another worker got there first)."""
        ...


T = TypeVar("T")
