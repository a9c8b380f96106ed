"""Long-term memory: the algorithms over a store (ranking, dedupe tiers, extraction)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from sessions_app.core.events import utcnow
from sessions_app.core.memory.defaults import (
    DEFAULT_MAX_PER_USER,
    DEFAULT_MAX_RESULTS,
    KIND_FALLBACK_MIN,
    MAX_QUERY_TOKENS,
    MAX_TOPICS,
    RECONCILE_TOP_K,
    RESULT_DEDUPE_JACCARD,
    SKIP_JACCARD,
    SKIP_SIMILARITY,
    UPDATE_JACCARD,
    UPDATE_SIMILARITY,
    MemoryKind,
)
from sessions_app.core.memory.ranking import (
    CandidateQuery,
    Embedder,
    analyze,
    bm25_rank,
    jaccard,
    normalize_text,
    phrase_of,
    query_tokens,
    rrf_fuse,
    token_cosine,
    vector_cosine,
)
from sessions_app.core.memory.store import MemoryStore
from sessions_app.core.memory.values import (
    ApplyResult,
    ExtractionCursor,
    InvalidMemoryError,
    MemoryDraft,
    MemoryEntry,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryOperation,
    MemoryWrite,
    Reconcile,
    SearchOptions,
    UserKey,
)
from sessions_app.core.session import SessionKey

# -- the algorithms ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Decision:
    action: Literal["add", "update", "skip"]
    target: MemoryEntry | None = None
    similarity: float = 0.0


class MemoryManager:
    """The memory algorithms over a `MemoryStore`, synchronously (see the module docstring)."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        embedder: Embedder | None = None,
        max_per_user: int = DEFAULT_MAX_PER_USER,
    ) -> None:
        if max_per_user < 1:
            raise ValueError(f"max_per_user must be at least 1, got {max_per_user!r}")
        self.store = store
        self.embedder = embedder
        self.max_per_user = max_per_user

    # -- writes

    def _embed(self, text: str) -> list[float] | None:
        return list(self.embedder.embed([text])[0]) if self.embedder is not None else None

    def add(self, key: UserKey, draft: MemoryDraft, *, dedupe: bool = True) -> MemoryWrite:
        return self._add(key, draft, reconcile="similar" if dedupe else "none")

    def _add(self, key: UserKey, draft: MemoryDraft, *, reconcile: Reconcile) -> MemoryWrite:
        draft = draft.normalized()
        tokens = analyze(draft.text)
        embedding = self._embed(draft.text)
        with self.store.atomic():
            if reconcile == "none":
                decision = _Decision(action="add")
            else:
                decision = self._reconcile(key, draft, tokens, embedding, exact_only=reconcile == "exact")
            if decision.action == "add":
                entry = self.store.insert(key, draft, tokens=tokens, embedding=embedding, limit=self.max_per_user)
                return MemoryWrite(action="added", entry=entry)
            target = decision.target
            assert target is not None
            if decision.action == "skip":
                new_topics = [t for t in draft.topics if t not in target.topics]
                if not new_topics or reconcile == "exact":
                    return MemoryWrite(action="skipped", entry=target, similarity=decision.similarity)
                merged = replace(target.draft, topics=(*target.topics, *new_topics)[:MAX_TOPICS])
                entry = self._replace(key, target.id, merged)
                return MemoryWrite(action="updated", entry=entry, similarity=decision.similarity)
            merged = replace(
                draft,
                topics=tuple(dict.fromkeys((*target.topics, *draft.topics)))[:MAX_TOPICS],
                participants=draft.participants or target.participants,
                location=draft.location or target.location,
            )
            replaced = self.store.replace(key, target.id, merged, tokens=tokens, embedding=embedding)
            if replaced is None:  # deleted in between: store it as new instead
                entry = self.store.insert(key, draft, tokens=tokens, embedding=embedding, limit=self.max_per_user)
                return MemoryWrite(action="added", entry=entry)
            return MemoryWrite(action="updated", entry=replaced, similarity=decision.similarity)

    def _replace(self, key: UserKey, memory_id: str, draft: MemoryDraft) -> MemoryEntry:
        draft = draft.normalized()
        entry = self.store.replace(key, memory_id, draft, tokens=analyze(draft.text), embedding=self._embed(draft.text))
        if entry is None:
            raise MemoryNotFoundError(f"memory {memory_id!r} not found")
        return entry

    def update(
        self,
        key: UserKey,
        memory_id: str,
        *,
        text: str | None = None,
        kind: MemoryKind | None = None,
        topics: Sequence[str] | None = None,
        event_time: datetime | None = None,
        participants: Sequence[str] | None = None,
        location: str | None = None,
    ) -> MemoryEntry:
        """Change the given fields of a memory; raises `MemoryNotFoundError`. A memory that
        becomes a fact loses its event time."""
        with self.store.atomic():
            current = self.store.get(key, memory_id)
            if current is None:
                raise MemoryNotFoundError(f"memory {memory_id!r} not found")
            draft = current.draft
            new_kind = kind or draft.kind
            draft = replace(
                draft,
                text=draft.text if text is None else text,
                kind=new_kind,
                topics=draft.topics if topics is None else tuple(topics),
                event_time=None if new_kind == "fact" else (event_time or draft.event_time),
                participants=draft.participants if participants is None else tuple(participants),
                location=draft.location if location is None else location,
            )
            return self._replace(key, memory_id, draft)

    def delete(self, key: UserKey, memory_id: str) -> bool:
        return self.store.delete(key, memory_id)

    def clear(self, key: UserKey) -> int:
        return self.store.clear(key)

    # -- reads

    def get(self, key: UserKey, memory_id: str) -> MemoryEntry | None:
        return self.store.get(key, memory_id)

    def load(
        self, key: UserKey, *, limit: int = DEFAULT_MAX_RESULTS, kind: MemoryKind | None = None, offset: int = 0
    ) -> list[MemoryEntry]:
        if limit < 1:
            return []
        return self.store.recent(key, limit=limit, kind=kind, offset=max(0, offset))

    def count(self, key: UserKey) -> int:
        return self.store.count(key)

    def search(self, key: UserKey, options: SearchOptions) -> list[MemoryEntry]:
        """Lexical first; dense hits fused by reciprocal rank when an embedder is set."""
        if not options.query.strip() or options.max_results < 1:
            return []
        results = self._search_kind(key, options, options.kind)
        if options.kind is not None and options.kind_fallback and len(results) < KIND_FALLBACK_MIN:
            seen = {r.id for r in results}
            results.extend(r for r in self._search_kind(key, options, None) if r.id not in seen)
        if options.deduplicate:
            results = _dedupe_results(results)
        results = results[: options.max_results]
        if options.order_by_event_time:
            results.sort(key=lambda r: (r.event_time is None, r.event_time or r.created_at))
        return results

    def _search_kind(self, key: UserKey, options: SearchOptions, kind: MemoryKind | None) -> list[MemoryEntry]:
        tokens = tuple(query_tokens(options.query))
        phrase = phrase_of(options.query)
        if not tokens and not phrase:
            return []
        query = CandidateQuery(
            tokens=tokens,
            phrase=phrase,
            kind=kind,
            time_after=options.time_after,
            time_before=options.time_before,
        )
        candidates, stats = self.store.candidates(key, query)
        lexical = [
            (entry, score)
            for entry, _raw, score in bm25_rank(tokens, phrase, candidates, stats)
            if score >= options.min_score
        ]
        pool = max(options.max_results * 3, 20)
        lexical = lexical[:pool]
        if self.embedder is None or not options.hybrid:
            return [replace(entry, score=score) for entry, score in lexical]
        query_vector = self.embedder.embed([options.query])[0]
        dense = sorted(
            ((entry, vector_cosine(query_vector, vector)) for entry, vector in self.store.vectors(key, query)),
            key=lambda item: (-item[1], item[0].id),
        )
        dense = [(entry, score) for entry, score in dense if score >= options.min_score][:pool]
        by_id: dict[str, MemoryEntry] = {}
        best: dict[str, float] = {}
        for entry, score in (*lexical, *dense):
            by_id.setdefault(entry.id, entry)
            best[entry.id] = max(best.get(entry.id, 0.0), score)
        fused = rrf_fuse([[e.id for e, _ in lexical], [e.id for e, _ in dense]], k=options.rrf_k)
        return [replace(by_id[i], score=best[i]) for i in fused]

    # -- dedupe tiers

    def _reconcile(
        self,
        key: UserKey,
        draft: MemoryDraft,
        tokens: Sequence[str],
        embedding: Sequence[float] | None,
        *,
        exact_only: bool = False,
    ) -> _Decision:
        distinct = tuple(dict.fromkeys(tokens))[:MAX_QUERY_TOKENS]
        query = CandidateQuery(tokens=distinct, phrase=phrase_of(draft.text), kind=draft.kind, limit=50)
        candidates, _stats = self.store.candidates(key, query)
        vectors: dict[str, list[float]] = {}
        if embedding is not None:
            vectors = {entry.id: vector for entry, vector in self.store.vectors(key, query)}
        scored: list[tuple[float, float, MemoryEntry]] = []
        for candidate in candidates:
            if draft.kind == "episode" and candidate.entry.event_time != draft.event_time:
                continue  # the same kind of thing on another day is another episode
            vector = vectors.get(candidate.entry.id)
            if embedding is not None and vector is not None:
                similarity = vector_cosine(embedding, vector)
            else:
                similarity = token_cosine(tokens, candidate.tokens)
            if " ".join(normalize_text(candidate.entry.text).split()) == " ".join(normalize_text(draft.text).split()):
                if exact_only:
                    return _Decision(action="skip", target=candidate.entry, similarity=1.0)
                similarity = 1.0
            elif exact_only:
                continue
            scored.append((similarity, jaccard(tokens, candidate.tokens), candidate.entry))
        scored.sort(key=lambda item: (-item[0], -item[1], item[2].id))
        for similarity, overlap, entry in scored[:RECONCILE_TOP_K]:
            if similarity >= SKIP_SIMILARITY or overlap >= SKIP_JACCARD:
                return _Decision(action="skip", target=entry, similarity=similarity)
        for similarity, overlap, entry in scored[:RECONCILE_TOP_K]:
            if similarity >= UPDATE_SIMILARITY or overlap >= UPDATE_JACCARD:
                return _Decision(action="update", target=entry, similarity=similarity)
        return _Decision(action="add")

    # -- auto memory

    def get_cursor(self, session: SessionKey) -> ExtractionCursor:
        return self.store.get_cursor(session)

    def apply(
        self,
        key: UserKey,
        operations: Sequence[MemoryOperation],
        *,
        session: SessionKey | None = None,
        expected_seq: int = 0,
        new_seq: int = 0,
        at: datetime | None = None,
        reconcile: Reconcile = "similar",
    ) -> ApplyResult:
        """Apply extracted operations and, with `session`, move its extraction cursor from
        `expected_seq` to `new_seq`, all in one atomic block. When the cursor is no longer
        at `expected_seq` nothing is applied (`stale`): the same delta has one effect.

        Adds go through `reconcile` (the dedupe tiers by default; "exact" drops only exact
        duplicates, of stored memories or of earlier adds of the same batch); an update of a
        missing memory becomes an add; a delete of a missing memory is a success; adds past
        the per-user limit are skipped.
        """
        added: list[str] = []
        updated: list[str] = []
        deleted: list[str] = []
        skipped = 0
        with self.store.atomic():
            if session is not None and not self.store.move_cursor(
                session, expected=expected_seq, new=new_seq, at=at or utcnow()
            ):
                return ApplyResult(stale=True)
            for operation in operations:
                try:
                    if operation.op == "clear":
                        self.store.clear(key)
                    elif operation.op == "delete":
                        if self.store.delete(key, operation.memory_id):
                            deleted.append(operation.memory_id)
                    elif operation.op == "update" and operation.draft is not None and operation.memory_id:
                        draft = operation.draft.normalized()
                        entry = self.store.replace(
                            key,
                            operation.memory_id,
                            draft,
                            tokens=analyze(draft.text),
                            embedding=self._embed(draft.text),
                        )
                        if entry is not None:
                            updated.append(entry.id)
                        else:
                            write = self._add(key, draft, reconcile=reconcile)
                            if write.action == "skipped":
                                skipped += 1
                            else:
                                (added if write.action == "added" else updated).append(write.entry.id)
                    elif operation.draft is not None:
                        write = self._add(key, operation.draft, reconcile=reconcile)
                        if write.action == "added":
                            added.append(write.entry.id)
                        elif write.action == "updated":
                            updated.append(write.entry.id)
                        else:
                            skipped += 1
                except (MemoryLimitError, InvalidMemoryError):
                    skipped += 1
        return ApplyResult(added=tuple(added), updated=tuple(updated), deleted=tuple(deleted), skipped=skipped)


def _dedupe_results(results: Sequence[MemoryEntry]) -> list[MemoryEntry]:
    kept: list[tuple[MemoryEntry, set[str]]] = []
    for entry in results:
        tokens = set(analyze(entry.text))
        if any(jaccard(tokens, other) >= RESULT_DEDUPE_JACCARD for _, other in kept):
            continue
        kept.append((entry, tokens))
    return [entry for entry, _ in kept]
