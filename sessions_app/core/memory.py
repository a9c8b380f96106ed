"""Long-term memory (SPEC 6.1, 6.3): facts and episodes about a user, across sessions.

A memory belongs to one (app, user). It is a `fact` (a stable attribute, preference,
relationship, skill or opinion) or an `episode` (something that happened, anchored at an
`event_time`, with optional participants and location). A user holds at most
`max_per_user` memories (1,000 by default); adding past that raises `MemoryLimitError`.

Layers, from the bottom:

- `analyze` turns text into search tokens: lowercased, lightly stemmed words without stop
  words, plus overlapping bigrams of CJK runs (so Chinese text matches without a
  segmenter). Every backend indexes and queries these same tokens.
- `MemoryStore` is the synchronous storage contract (insert, update, delete, lexical
  candidates with their corpus statistics, vectors, the extraction cursor). The in-memory
  store is here; the Django store is `sessions_app/memory_backends.py`.
- `MemoryManager` holds the algorithms over a store, synchronously: BM25 ranking of the
  candidates a store returns (the same scorer on every backend, so they rank alike),
  optional dense retrieval fused by reciprocal rank (k = 60), kind fallback, result
  dedupe, the add-time dedupe tiers of SPEC 6.3, and the atomic application of extracted
  operations together with the extraction cursor.
- `MemoryService` is the async contract the runtime and tools use; `ManagedMemoryService`
  implements it over a manager, running each call the way its store needs (directly, or
  in a database worker thread).

Dedupe tiers (SPEC 6.3, merge-similar policy): an add whose text is at least 0.90 similar
(or 0.70 word-Jaccard) to an existing memory of the same kind is skipped (or, when it
brings new topics, turned into a topic-merging update); at least 0.60 similar (or 0.40
Jaccard) turns it into an update of that memory. Similarity is the cosine of the dense
embeddings when an embedder is configured, else the cosine of the token-count vectors.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from sessions_app.core.events import new_id, utcnow
from sessions_app.core.session import SessionKey
from sessions_app.core.text import stem

MemoryKind = Literal["fact", "episode"]
MEMORY_KINDS: tuple[MemoryKind, ...] = ("fact", "episode")

DEFAULT_MAX_PER_USER = 1000
DEFAULT_MAX_RESULTS = 10
DEFAULT_MIN_SCORE = 0.3
DEFAULT_RRF_K = 60
KIND_FALLBACK_MIN = 3
MAX_TEXT_CHARS = 4000
MAX_TOPICS = 16
MAX_QUERY_TOKENS = 32
# Longer "words" are hashes or base64, never worth indexing; and PostgreSQL refuses a
# tsvector lexeme over 2,047 bytes, which made the memory's insert (and so every memory
# extraction of its session, retried) fail for good.
MAX_TOKEN_CHARS = 64
MAX_CANDIDATES = 500

# SPEC 6.3 / 14: reconcile thresholds.
SKIP_SIMILARITY = 0.90
UPDATE_SIMILARITY = 0.60
SKIP_JACCARD = 0.70
UPDATE_JACCARD = 0.40
RECONCILE_TOP_K = 3
# Search results this close to a better-ranked one are dropped when deduplicating.
RESULT_DEDUPE_JACCARD = 0.90

# BM25 parameters (the usual defaults).
BM25_K1 = 1.2
BM25_B = 0.75
# A query found verbatim in a memory adds this share of the ideal score.
PHRASE_BONUS = 0.5


# -- errors -----------------------------------------------------------------------------------


class InvalidMemoryError(ValueError):
    """A memory that cannot be stored: empty text, unknown kind, an episode without time."""


class MemoryLimitError(ValueError):
    """The user already holds the most memories allowed."""

    def __init__(self, user_id: str, limit: int) -> None:
        super().__init__(
            f"user {user_id!r} already has {limit} memories, the most allowed; delete some before adding more"
        )
        self.user_id = user_id
        self.limit = limit


class MemoryNotFoundError(LookupError):
    """No memory with this id for this user."""


# -- values -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UserKey:
    """Whose memories: the app and the user (both required)."""

    app: str
    user_id: str

    def __post_init__(self) -> None:
        if not self.app or not self.user_id:
            raise ValueError(f"UserKey needs an app and a user id, got {self.app!r}, {self.user_id!r}")


@dataclass(frozen=True, kw_only=True)
class MemoryDraft:
    """What a write stores: the text and its metadata."""

    text: str
    kind: MemoryKind = "fact"
    topics: tuple[str, ...] = ()
    event_time: datetime | None = None
    participants: tuple[str, ...] = ()
    location: str = ""

    def normalized(self) -> MemoryDraft:
        """Trimmed and checked; raises `InvalidMemoryError`."""
        text = " ".join(self.text.split())
        if not text:
            raise InvalidMemoryError("a memory needs text")
        if len(text) > MAX_TEXT_CHARS:
            raise InvalidMemoryError(f"a memory is at most {MAX_TEXT_CHARS} characters, got {len(text)}")
        if self.kind not in MEMORY_KINDS:
            raise InvalidMemoryError(f"kind must be one of {list(MEMORY_KINDS)!r}, got {self.kind!r}")
        if self.kind == "episode" and self.event_time is None:
            raise InvalidMemoryError("an episode needs an event_time")
        if self.event_time is not None and self.event_time.tzinfo is None:
            raise InvalidMemoryError(f"event_time must carry a time zone, got {self.event_time.isoformat()!r}")
        topics = _clean_list(self.topics, MAX_TOPICS)
        participants = _clean_list(self.participants, MAX_TOPICS)
        return replace(self, text=text, topics=topics, participants=participants, location=self.location.strip())


@dataclass(frozen=True, kw_only=True)
class MemoryEntry:
    """A stored memory. `score` is set on search results (0..1, higher is closer)."""

    id: str
    app: str
    user_id: str
    text: str
    kind: MemoryKind = "fact"
    topics: tuple[str, ...] = ()
    event_time: datetime | None = None
    participants: tuple[str, ...] = ()
    location: str = ""
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    score: float | None = None

    @property
    def draft(self) -> MemoryDraft:
        return MemoryDraft(
            text=self.text, kind=self.kind, topics=self.topics, event_time=self.event_time,
            participants=self.participants, location=self.location,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape tools and the API return (SPEC 6.2 result fields)."""
        data: dict[str, Any] = {
            "id": self.id,
            "memory": self.text,
            "kind": self.kind,
            "topics": list(self.topics),
            "created": self.created_at.isoformat(),
            "updated": self.updated_at.isoformat(),
        }
        if self.event_time is not None:
            data["event_time"] = self.event_time.date().isoformat()
        if self.participants:
            data["participants"] = list(self.participants)
        if self.location:
            data["location"] = self.location
        if self.score is not None:
            data["score"] = round(self.score, 3)
        return data

    def describe(self) -> str:
        """One line: `text (kind=…, event_time=…, …)`, as the preload block and prompts show it."""
        details = [f"kind={self.kind}"]
        if self.event_time is not None:
            details.append(f"event_time={self.event_time.date().isoformat()}")
        if self.topics:
            details.append("topics=" + ", ".join(self.topics))
        if self.participants:
            details.append("participants=" + ", ".join(self.participants))
        if self.location:
            details.append(f"location={self.location}")
        return f"{self.text} ({'; '.join(details)})"


WriteAction = Literal["added", "updated", "skipped"]
# How an add is compared with the memories already stored: "similar" is the SPEC 6.3 tiers
# (merge_similar policy), "exact" drops only an exact duplicate (preserve_history and
# append_only: a near duplicate there is history worth keeping), "none" stores it as is.
Reconcile = Literal["similar", "exact", "none"]


@dataclass(frozen=True, kw_only=True)
class MemoryWrite:
    """The outcome of an add: what happened and the memory it concerns."""

    action: WriteAction
    entry: MemoryEntry
    similarity: float | None = None


@dataclass(frozen=True, kw_only=True)
class SearchOptions:
    """SPEC 6.1 search options.

    `kind` prefers one kind; with `kind_fallback`, fewer than 3 hits of that kind are
    topped up with hits of any kind. `time_after` / `time_before` bound the event time
    (memories without one are left out). `min_score` drops weak lexical hits.
    """

    query: str
    kind: MemoryKind | None = None
    kind_fallback: bool = True
    time_after: datetime | None = None
    time_before: datetime | None = None
    max_results: int = DEFAULT_MAX_RESULTS
    min_score: float = DEFAULT_MIN_SCORE
    order_by_event_time: bool = False
    deduplicate: bool = True
    hybrid: bool = True
    rrf_k: int = DEFAULT_RRF_K


@dataclass(frozen=True, kw_only=True)
class MemoryOperation:
    """One write an extractor asked for (SPEC 6.4: from its tool calls)."""

    op: Literal["add", "update", "delete", "clear"]
    memory_id: str = ""
    draft: MemoryDraft | None = None


@dataclass(frozen=True, kw_only=True)
class ExtractionCursor:
    """How far auto memory has read a session's ledger: events up to `last_seq` are done."""

    last_seq: int = 0
    extracted_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class ApplyResult:
    """What `apply` did. `stale` means another worker had moved the cursor: nothing applied."""

    stale: bool = False
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    skipped: int = 0


def _clean_list(values: Iterable[str], limit: int) -> tuple[str, ...]:
    cleaned = [" ".join(str(v).split()) for v in values]
    return tuple(dict.fromkeys(v for v in cleaned if v))[:limit]


# -- text analysis ------------------------------------------------------------------------------

_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren as at be because been before being
    below between both but by can cannot could couldn did didn do does doesn doing don down during
    each few for from further had hadn has hasn have haven having he her here hers herself him
    himself his how i if in into is isn it its itself just let ll me more most my myself no nor not
    now of off on once only or other ought our ours ourselves out over own re same shan she should
    shouldn so some such than that the their theirs them themselves then there these they this those
    through to too under until up us ve very was wasn we were weren what when where which while who
    whom why will with won would wouldn you your yours yourself yourselves
    also ever really still yet s t d m o y
    """.split()
)
_LATIN = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_SPLIT = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+)")



def normalize_text(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def analyze(text: str) -> list[str]:
    """Search tokens of a text, in order, with repeats (term counts matter to BM25)."""
    tokens: list[str] = []
    for piece in _SPLIT.split(normalize_text(text)):
        if not piece:
            continue
        if _CJK.fullmatch(piece):
            if len(piece) == 1:
                tokens.append(piece)
            else:
                tokens.extend(piece[i:i + 2] for i in range(len(piece) - 1))
            continue
        # Apostrophes inside words (it's, caroline's) split off their short tail.
        for word in _LATIN.findall(piece.replace("'", " ").replace("\u2019", " ")):
            if word in _STOPWORDS or len(word) > MAX_TOKEN_CHARS:
                continue
            tokens.append(stem(word))
    return tokens


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, in order, at most `MAX_QUERY_TOKENS`."""
    return list(dict.fromkeys(analyze(text)))[:MAX_QUERY_TOKENS]


def phrase_of(text: str) -> str:
    """The query as a phrase for substring matching ("" when too short to mean anything)."""
    phrase = " ".join(normalize_text(text).split())
    if len(phrase) < 3 and not _CJK.search(phrase):
        return ""
    return phrase


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return 0.0
    return len(sa & sb) / len(sa | sb)


def token_cosine(a: Sequence[str], b: Sequence[str]) -> float:
    """Cosine of the token-count vectors of two token lists."""
    ca, cb = Counter(a), Counter(b)
    if not ca or not cb:
        return 0.0
    dot = sum(ca[t] * cb[t] for t in ca.keys() & cb.keys())
    return dot / math.sqrt(sum(v * v for v in ca.values()) * sum(v * v for v in cb.values()))


def vector_cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b) or not a:
        return 0.0
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    return dot / norm if norm else 0.0


# -- lexical ranking ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CorpusStats:
    """What BM25 needs to know about the user's memories: how many, their mean length in
    tokens, and how many contain each query token."""

    documents: int
    average_length: float
    document_frequency: Mapping[str, int]


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A memory a store offers for ranking, with its tokens."""

    entry: MemoryEntry
    tokens: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class CandidateQuery:
    """Which of a user's memories a store should offer: those sharing a token with the
    query or containing the phrase, within the kind and time bounds."""

    tokens: tuple[str, ...]
    phrase: str = ""
    kind: MemoryKind | None = None
    time_after: datetime | None = None
    time_before: datetime | None = None
    limit: int = MAX_CANDIDATES


def idf(documents: int, frequency: int) -> float:
    """BM25's idf, always positive."""
    return math.log(1.0 + (documents - frequency + 0.5) / (frequency + 0.5))


def bm25_rank(
    tokens: Sequence[str], phrase: str, candidates: Sequence[Candidate], stats: CorpusStats
) -> list[tuple[MemoryEntry, float, float]]:
    """(entry, raw BM25, score in 0..1) for each candidate that matches, best first.

    The 0..1 score divides BM25 by that of an ideal memory holding, once and at the average
    length, every query token that occurs in the user's memories at all: 1.0 means
    "everything the query asks for that memory could answer is there". (Words no memory
    contains, such as a question's phrasing, would otherwise dominate the ideal with the
    largest idf and sink every score.)
    """
    if not candidates:
        return []
    n = max(stats.documents, len(candidates))
    average = stats.average_length or 1.0
    frequency = stats.document_frequency
    weights = {t: idf(n, frequency.get(t, 0)) for t in tokens}
    ideal = sum(w for t, w in weights.items() if frequency.get(t, 0) > 0) or sum(weights.values()) or 1.0
    ranked: list[tuple[MemoryEntry, float, float]] = []
    for candidate in candidates:
        counts = Counter(candidate.tokens)
        length = len(candidate.tokens) or 1
        raw = 0.0
        for token, weight in weights.items():
            tf = counts.get(token, 0)
            if tf:
                raw += weight * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average))
        if phrase and phrase in " ".join(normalize_text(candidate.entry.text).split()):
            raw += PHRASE_BONUS * ideal
        if raw > 0:
            ranked.append((candidate.entry, raw, min(1.0, raw / ideal)))
    ranked.sort(key=lambda item: (-item[1], item[0].id))
    return ranked


def rrf_fuse(rankings: Sequence[Sequence[str]], *, k: int = DEFAULT_RRF_K) -> list[str]:
    """Reciprocal-rank fusion: ids ordered by the sum of 1 / (k + rank) over the rankings."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda item: (-scores[item], item))


@runtime_checkable
class Embedder(Protocol):
    """Dense embeddings for hybrid search (optional; DESIGN 7). Synchronous: runs on the CPU."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, all of the same dimension."""
        ...


# -- storage contract --------------------------------------------------------------------------


@runtime_checkable
class MemoryStore(Protocol):
    """Synchronous storage of memories and extraction cursors. Every method is scoped to a
    user; none may return or touch another user's data."""

    def atomic(self) -> contextlib.AbstractContextManager[Any]:
        """A block whose writes happen together or not at all (and see each other)."""
        ...

    def insert(self, key: UserKey, draft: MemoryDraft, *, tokens: Sequence[str],
               embedding: Sequence[float] | None, limit: int) -> MemoryEntry:
        """Store a new memory; raises `MemoryLimitError` when the user holds `limit` already."""
        ...

    def replace(self, key: UserKey, memory_id: str, draft: MemoryDraft, *, tokens: Sequence[str],
                embedding: Sequence[float] | None) -> MemoryEntry | None:
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
        entry = self.store.replace(
            key, memory_id, draft, tokens=analyze(draft.text), embedding=self._embed(draft.text)
        )
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

    def load(self, key: UserKey, *, limit: int = DEFAULT_MAX_RESULTS, kind: MemoryKind | None = None,
             offset: int = 0) -> list[MemoryEntry]:
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
            tokens=tokens, phrase=phrase, kind=kind,
            time_after=options.time_after, time_before=options.time_before,
        )
        candidates, stats = self.store.candidates(key, query)
        lexical = [
            (entry, score) for entry, _raw, score in bm25_rank(tokens, phrase, candidates, stats)
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
        self, key: UserKey, draft: MemoryDraft, tokens: Sequence[str], embedding: Sequence[float] | None,
        *, exact_only: bool = False,
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
                            key, operation.memory_id, draft, tokens=analyze(draft.text), embedding=self._embed(draft.text)
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

    async def get(self, key: UserKey, memory_id: str) -> MemoryEntry | None:
        ...

    async def load(self, key: UserKey, *, limit: int = DEFAULT_MAX_RESULTS, kind: MemoryKind | None = None) -> list[MemoryEntry]:
        """The most recently updated memories."""
        ...

    async def search(self, key: UserKey, options: SearchOptions) -> list[MemoryEntry]:
        """Ranked memories for a query, best first, each with its score."""
        ...

    async def count(self, key: UserKey) -> int:
        ...

    async def get_cursor(self, session: SessionKey) -> ExtractionCursor:
        """Auto memory's position in a session's ledger."""
        ...

    async def apply(self, key: UserKey, operations: Sequence[MemoryOperation], *, session: SessionKey | None = None,
                    expected_seq: int = 0, new_seq: int = 0, reconcile: Reconcile = "similar") -> ApplyResult:
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

    async def load(self, key: UserKey, *, limit: int = DEFAULT_MAX_RESULTS, kind: MemoryKind | None = None) -> list[MemoryEntry]:
        return await self._run(lambda: self.manager.load(key, limit=limit, kind=kind))

    async def search(self, key: UserKey, options: SearchOptions) -> list[MemoryEntry]:
        return await self._run(lambda: self.manager.search(key, options))

    async def count(self, key: UserKey) -> int:
        return await self._run(lambda: self.manager.count(key))

    async def get_cursor(self, session: SessionKey) -> ExtractionCursor:
        return await self._run(lambda: self.manager.get_cursor(session))

    async def apply(self, key: UserKey, operations: Sequence[MemoryOperation], *, session: SessionKey | None = None,
                    expected_seq: int = 0, new_seq: int = 0, reconcile: Reconcile = "similar") -> ApplyResult:
        return await self._run(lambda: self.manager.apply(
            key, operations, session=session, expected_seq=expected_seq, new_seq=new_seq, reconcile=reconcile
        ))


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


def rank_in_python(rows: Iterable[tuple[MemoryEntry, Sequence[str]]], query: CandidateQuery) -> tuple[list[Candidate], CorpusStats]:
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
    stats = CorpusStats(documents=total, average_length=(length / total) if total else 0.0, document_frequency=dict(frequency))
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

    def insert(self, key: UserKey, draft: MemoryDraft, *, tokens: Sequence[str],
               embedding: Sequence[float] | None, limit: int) -> MemoryEntry:
        with self._lock:
            rows = self._user(key)
            if len(rows) >= limit:
                raise MemoryLimitError(key.user_id, limit)
            now = utcnow()
            entry = MemoryEntry(
                id=new_id(), app=key.app, user_id=key.user_id, text=draft.text, kind=draft.kind, topics=draft.topics,
                event_time=draft.event_time, participants=draft.participants, location=draft.location,
                created_at=now, updated_at=now,
            )
            rows[entry.id] = _Row(entry=entry, tokens=tuple(tokens), embedding=list(embedding) if embedding else None)
            return entry

    def replace(self, key: UserKey, memory_id: str, draft: MemoryDraft, *, tokens: Sequence[str],
                embedding: Sequence[float] | None) -> MemoryEntry | None:
        with self._lock:
            rows = self._user(key)
            row = rows.get(memory_id)
            if row is None:
                return None
            entry = replace(
                row.entry, text=draft.text, kind=draft.kind, topics=draft.topics, event_time=draft.event_time,
                participants=draft.participants, location=draft.location, updated_at=utcnow(),
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
        return entries[offset:offset + limit]

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
                (r.entry, list(r.embedding)) for r in self._user(key).values()
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
