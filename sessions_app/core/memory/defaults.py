"""Long-term memory: kinds, limits and thresholds (SPEC 6.1, 6.3, 14)."""

from __future__ import annotations

from typing import Literal

from sessions_app.core import text

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
# extraction of its session, retried) fail for good. The shared analyzer's bound.
MAX_TOKEN_CHARS = text.MAX_TERM_CHARS
MAX_CANDIDATES = 500

# SPEC 6.3 / 14: reconcile thresholds.
SKIP_SIMILARITY = 0.90
UPDATE_SIMILARITY = 0.60
SKIP_JACCARD = 0.70
UPDATE_JACCARD = 0.40
RECONCILE_TOP_K = 3
# Search results this close to a better-ranked one are dropped when deduplicating.
RESULT_DEDUPE_JACCARD = 0.90

# BM25 parameters: the shared ones (sessions_app.core.text).
BM25_K1 = text.BM25_K1
BM25_B = text.BM25_B
# A query found verbatim in a memory adds this share of the ideal score.
PHRASE_BONUS = 0.5
