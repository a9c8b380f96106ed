"""Long-term memory on the Django ORM: `DjangoMemoryStore`, `DjangoMemoryService`, and the
memory tools as `FunctionTool`s.

Search is lexical first. Every backend ranks with the same BM25 scorer over the same
analyzer tokens (`sessions_app.core.memory`); what differs is how candidates are found:
- PostgreSQL: the full-text GIN index over the stored tokens (`array_to_tsvector`) and
  the `pg_trgm` GIN index over `lower(text)` for phrases, then one aggregate query for the
  user's corpus statistics (document count, mean length, document frequencies);
- SQLite: the user's memories (at most 1,000) are read and ranked in Python.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, Literal

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import BooleanField, FloatField, QuerySet
from django.db.models.expressions import RawSQL

from runs.core.tools.base import ToolContext
from runs.core.tools.function import FunctionTool
from sessions_app import models as orm
from sessions_app.backends import db_call
from sessions_app.core.events import new_id, utcnow
from sessions_app.core.memory import (
    DEFAULT_MAX_PER_USER,
    Candidate,
    CandidateQuery,
    CorpusStats,
    Embedder,
    ExtractionCursor,
    ManagedMemoryService,
    MemoryDraft,
    MemoryEntry,
    MemoryKind,
    MemoryLimitError,
    MemoryManager,
    rank_in_python,
)
from sessions_app.core.memory_tools import memory_tool_functions
from sessions_app.core.session import SessionKey

_TSVECTOR = "array_to_tsvector(string_to_array(search_tokens, ' '))"
_COLUMNS = (
    "id",
    "app",
    "user_id",
    "kind",
    "text",
    "topics",
    "event_time",
    "participants",
    "location",
    "created_at",
    "updated_at",
)


def entry_from_row(row: orm.Memory) -> MemoryEntry:
    return MemoryEntry(
        id=row.id,
        app=row.app,
        user_id=str(row.user_id),
        text=row.text,
        kind=typing.cast(MemoryKind, row.kind),
        topics=tuple(row.topics or ()),
        event_time=row.event_time,
        participants=tuple(row.participants or ()),
        location=row.location,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def memory_row(
    key: Any,
    draft: MemoryDraft,
    *,
    tokens: Sequence[str],
    embedding: Sequence[float] | None,
    memory_id: str | None = None,
    at: datetime | None = None,
) -> orm.Memory:
    """An unsaved row for a draft (also what bulk imports insert)."""
    now = at or utcnow()
    return orm.Memory(
        id=memory_id or new_id(),
        app=key.app,
        user_id=int(key.user_id),
        kind=draft.kind,
        text=draft.text,
        topics=list(draft.topics),
        event_time=draft.event_time,
        participants=list(draft.participants),
        location=draft.location,
        search_tokens=" ".join(tokens),
        token_count=len(tokens),
        embedding=list(embedding) if embedding is not None else None,
        created_at=now,
        updated_at=now,
    )


def _tsquery(tokens: Iterable[str]) -> str:
    """An OR tsquery of exact lexemes (quoted, so nothing is parsed or normalised again)."""
    quoted = ("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in tokens)
    return " | ".join(quoted)


def _like_pattern(phrase: str) -> str:
    return "%" + phrase.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class DjangoMemoryStore:
    """`MemoryStore` on the ORM. Methods are synchronous; call them from worker threads."""

    def _mine(self, key: Any) -> QuerySet[orm.Memory]:
        return orm.Memory.objects.filter(app=key.app, user_id=int(key.user_id))

    def atomic(self) -> contextlib.AbstractContextManager[Any]:
        return transaction.atomic()

    def insert(
        self, key: Any, draft: MemoryDraft, *, tokens: Sequence[str], embedding: Sequence[float] | None, limit: int
    ) -> MemoryEntry:
        with transaction.atomic():
            # Locking the user's row serialises this user's adds, so two cannot both pass
            # the limit (SQLite serialises every write transaction anyway).
            get_user_model().objects.select_for_update().filter(pk=int(key.user_id)).first()
            if self._mine(key).count() >= limit:
                raise MemoryLimitError(key.user_id, limit)
            row = memory_row(key, draft, tokens=tokens, embedding=embedding)
            row.save(force_insert=True)
        return entry_from_row(row)

    def bulk_insert(self, key: Any, drafts: Sequence[tuple[MemoryDraft, Sequence[str]]], *, limit: int) -> int:
        """Insert many analysed drafts at once (imports, benchmarks); refuses past the limit."""
        with transaction.atomic():
            get_user_model().objects.select_for_update().filter(pk=int(key.user_id)).first()
            if self._mine(key).count() + len(drafts) > limit:
                raise MemoryLimitError(key.user_id, limit)
            orm.Memory.objects.bulk_create(
                [memory_row(key, draft, tokens=tokens, embedding=None) for draft, tokens in drafts], batch_size=500
            )
        return len(drafts)

    def replace(
        self, key: Any, memory_id: str, draft: MemoryDraft, *, tokens: Sequence[str], embedding: Sequence[float] | None
    ) -> MemoryEntry | None:
        updated = (
            self._mine(key)
            .filter(id=memory_id)
            .update(
                kind=draft.kind,
                text=draft.text,
                topics=list(draft.topics),
                event_time=draft.event_time,
                participants=list(draft.participants),
                location=draft.location,
                search_tokens=" ".join(tokens),
                token_count=len(tokens),
                embedding=list(embedding) if embedding is not None else None,
                updated_at=utcnow(),
            )
        )
        return self.get(key, memory_id) if updated else None

    def delete(self, key: Any, memory_id: str) -> bool:
        deleted, _ = self._mine(key).filter(id=memory_id).delete()
        return deleted > 0

    def clear(self, key: Any) -> int:
        deleted, _ = self._mine(key).delete()
        return deleted

    def get(self, key: Any, memory_id: str) -> MemoryEntry | None:
        row = self._mine(key).filter(id=memory_id).only(*_COLUMNS).first()
        return entry_from_row(row) if row is not None else None

    def recent(self, key: Any, *, limit: int, kind: MemoryKind | None = None, offset: int = 0) -> list[MemoryEntry]:
        rows = self._mine(key).only(*_COLUMNS).order_by("-updated_at", "-id")
        if kind is not None:
            rows = rows.filter(kind=kind)
        return [entry_from_row(r) for r in rows[offset : offset + limit]]

    def count(self, key: Any) -> int:
        return self._mine(key).count()

    def _bounded(self, rows: QuerySet[orm.Memory], query: CandidateQuery) -> QuerySet[orm.Memory]:
        if query.kind is not None:
            rows = rows.filter(kind=query.kind)
        if query.time_after is not None:
            rows = rows.filter(event_time__gte=query.time_after)
        if query.time_before is not None:
            rows = rows.filter(event_time__lte=query.time_before)
        return rows

    def candidates(self, key: Any, query: CandidateQuery) -> tuple[list[Candidate], CorpusStats]:
        if connection.vendor != "postgresql":
            rows = self._mine(key).only(*_COLUMNS, "search_tokens")
            return rank_in_python(((entry_from_row(r), r.search_tokens.split()) for r in rows), query)
        return self._postgres_candidates(key, query)

    def _postgres_candidates(self, key: Any, query: CandidateQuery) -> tuple[list[Candidate], CorpusStats]:
        tsquery = _tsquery(query.tokens)
        clauses: list[str] = []
        params: list[Any] = []
        if tsquery:
            clauses.append(f"{_TSVECTOR} @@ %s::tsquery")
            params.append(tsquery)
        if query.phrase:
            clauses.append("lower(text) LIKE %s")
            params.append(_like_pattern(query.phrase))
        if not clauses:
            return [], CorpusStats(documents=0, average_length=0.0, document_frequency={})
        # One pass over the user's memories for BM25's statistics, first: a user without
        # memories (most runs' users) costs this one statement and no candidate query
        # (issue 23: the ORM-built query was most of a run's memory search).
        frequency_columns = "".join(f", count(*) FILTER (WHERE {_TSVECTOR} @@ %s::tsquery)" for _ in query.tokens)
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*), coalesce(avg(token_count), 0){frequency_columns} "
                "FROM sessions_app_memory WHERE app = %s AND user_id = %s",
                [*(_tsquery([t]) for t in query.tokens), key.app, int(key.user_id)],
            )
            total, average, *frequencies = cursor.fetchone()
        stats = CorpusStats(
            documents=int(total),
            average_length=float(average),
            document_frequency=dict(zip(query.tokens, (int(f) for f in frequencies), strict=True)),
        )
        if not total:
            return [], stats
        rows = (
            self._bounded(self._mine(key), query)
            .filter(RawSQL("(" + " OR ".join(clauses) + ")", params, output_field=BooleanField()))
            .only(*_COLUMNS, "search_tokens")
        )
        if tsquery:
            rows = rows.order_by(
                RawSQL(f"ts_rank({_TSVECTOR}, %s::tsquery)", [tsquery], output_field=FloatField()).desc()
            )
        candidates = [
            Candidate(entry=entry_from_row(r), tokens=tuple(r.search_tokens.split())) for r in rows[: query.limit]
        ]
        return candidates, stats

    def vectors(self, key: Any, query: CandidateQuery) -> list[tuple[MemoryEntry, list[float]]]:
        rows = self._bounded(self._mine(key), query).filter(embedding__isnull=False).only(*_COLUMNS, "embedding")
        return [(entry_from_row(r), list(r.embedding)) for r in rows]

    def _session(self, session: SessionKey) -> QuerySet[orm.Session]:
        return orm.Session.objects.filter(id=session.session_id, app=session.app, user_id=int(session.user_id))

    def get_cursor(self, session: SessionKey) -> ExtractionCursor:
        row = orm.MemoryCursor.objects.filter(
            session_id=session.session_id, session__app=session.app, session__user_id=int(session.user_id)
        ).first()
        if row is None:
            return ExtractionCursor()
        return ExtractionCursor(last_seq=row.last_seq, extracted_at=row.extracted_at)

    def move_cursor(self, session: SessionKey, *, expected: int, new: int, at: datetime) -> bool:
        if not self._session(session).exists():
            return False
        # A conditional update: zero rows means another worker moved it first.
        moved = orm.MemoryCursor.objects.filter(session_id=session.session_id, last_seq=expected).update(
            last_seq=new, extracted_at=at
        )
        if moved:
            return True
        if expected != 0 or orm.MemoryCursor.objects.filter(session_id=session.session_id).exists():
            return False
        try:
            with transaction.atomic():
                orm.MemoryCursor.objects.create(session_id=session.session_id, last_seq=new, extracted_at=at)
        except IntegrityError:
            return False
        return True


async def _in_db_thread(func: Callable[[], Any]) -> Any:
    return await db_call(func)()


class DjangoMemoryService(ManagedMemoryService):
    """MemoryService on the ORM; every call runs in a database worker thread."""

    def __init__(self, *, embedder: Embedder | None = None, max_per_user: int = DEFAULT_MAX_PER_USER) -> None:
        super().__init__(
            MemoryManager(DjangoMemoryStore(), embedder=embedder, max_per_user=max_per_user), call=_in_db_thread
        )


def memory_manager() -> MemoryManager:
    """The synchronous manager for request threads (the API, the admin), from settings."""
    from django.conf import settings

    return MemoryManager(DjangoMemoryStore(), max_per_user=settings.AGENTSITE_MEMORY_MAX_PER_USER)


# -- tools ---------------------------------------------------------------------------------------------


def bind_context_tool(func: Callable[..., Any]) -> FunctionTool:
    """A `FunctionTool` from a core tool function whose first parameter is a structural
    tool context: the wrapper declares that parameter as `ToolContext`, so the runtime
    passes the context in and leaves it out of the schema."""
    hints = typing.get_type_hints(func)
    first = next(iter(inspect.signature(func).parameters))

    @functools.wraps(func)
    async def tool(context: ToolContext, **kwargs: Any) -> Any:
        return await func(context, **kwargs)

    tool.__annotations__ = {**hints, first: ToolContext}
    return FunctionTool(tool)


def memory_function_tools(
    *, mode: Literal["agentic", "auto"] = "agentic", enable: Iterable[str] = (), disable: Iterable[str] = ()
) -> list[FunctionTool]:
    """The memory tools for an agent, as `FunctionTool`s (see `memory_tool_functions`)."""
    return [bind_context_tool(f) for f in memory_tool_functions(mode=mode, enable=enable, disable=disable)]
