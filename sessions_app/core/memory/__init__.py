"""Long-term memory (SPEC 6.1, 6.3): facts and episodes about a user, across sessions.

A memory belongs to one (app, user). It is a `fact` (a stable attribute, preference,
relationship, skill or opinion) or an `episode` (something that happened, anchored at an
`event_time`, with optional participants and location). A user holds at most
`max_per_user` memories (1,000 by default); adding past that raises `MemoryLimitError`.

Layers, from the bottom:

- `analyze` turns text into search tokens with the analyzer session recall uses too
  (`sessions_app.core.text`): the NFKC form's lowercased, lightly stemmed words in any
  script without stop words, plus overlapping bigrams of unsegmented scripts (so Chinese
  text matches without a segmenter). Every backend indexes and queries these same tokens;
  they are stored with each memory, so changing the analyzer needs a data migration
  (0007 re-analyzed them).
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

from sessions_app.core.memory.defaults import (
    BM25_B,
    BM25_K1,
    DEFAULT_MAX_PER_USER,
    DEFAULT_MAX_RESULTS,
    DEFAULT_MIN_SCORE,
    DEFAULT_RRF_K,
    KIND_FALLBACK_MIN,
    MAX_CANDIDATES,
    MAX_QUERY_TOKENS,
    MAX_TEXT_CHARS,
    MAX_TOKEN_CHARS,
    MAX_TOPICS,
    MEMORY_KINDS,
    PHRASE_BONUS,
    RECONCILE_TOP_K,
    RESULT_DEDUPE_JACCARD,
    SKIP_JACCARD,
    SKIP_SIMILARITY,
    UPDATE_JACCARD,
    UPDATE_SIMILARITY,
    MemoryKind,
)
from sessions_app.core.memory.manager import MemoryManager
from sessions_app.core.memory.ranking import (
    Candidate,
    CandidateQuery,
    CorpusStats,
    Embedder,
    analyze,
    bm25_rank,
    idf,
    jaccard,
    normalize_text,
    phrase_of,
    query_tokens,
    rrf_fuse,
    token_cosine,
    vector_cosine,
)
from sessions_app.core.memory.service import (
    InMemoryMemoryService,
    InMemoryMemoryStore,
    ManagedMemoryService,
    MemoryService,
    rank_in_python,
)
from sessions_app.core.memory.store import MemoryStore, T
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
    WriteAction,
)

__all__ = [
    "BM25_B",
    "BM25_K1",
    "DEFAULT_MAX_PER_USER",
    "DEFAULT_MAX_RESULTS",
    "DEFAULT_MIN_SCORE",
    "DEFAULT_RRF_K",
    "KIND_FALLBACK_MIN",
    "MAX_CANDIDATES",
    "MAX_QUERY_TOKENS",
    "MAX_TEXT_CHARS",
    "MAX_TOKEN_CHARS",
    "MAX_TOPICS",
    "MEMORY_KINDS",
    "PHRASE_BONUS",
    "RECONCILE_TOP_K",
    "RESULT_DEDUPE_JACCARD",
    "SKIP_JACCARD",
    "SKIP_SIMILARITY",
    "UPDATE_JACCARD",
    "UPDATE_SIMILARITY",
    "ApplyResult",
    "Candidate",
    "CandidateQuery",
    "CorpusStats",
    "Embedder",
    "ExtractionCursor",
    "InMemoryMemoryService",
    "InMemoryMemoryStore",
    "InvalidMemoryError",
    "ManagedMemoryService",
    "MemoryDraft",
    "MemoryEntry",
    "MemoryKind",
    "MemoryLimitError",
    "MemoryManager",
    "MemoryNotFoundError",
    "MemoryOperation",
    "MemoryService",
    "MemoryStore",
    "MemoryWrite",
    "Reconcile",
    "SearchOptions",
    "T",
    "UserKey",
    "WriteAction",
    "analyze",
    "bm25_rank",
    "idf",
    "jaccard",
    "normalize_text",
    "phrase_of",
    "query_tokens",
    "rank_in_python",
    "rrf_fuse",
    "token_cosine",
    "vector_cosine",
]
