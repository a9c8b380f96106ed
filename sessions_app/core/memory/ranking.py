"""Long-term memory: text analysis and lexical ranking, shared by every backend."""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from sessions_app.core.memory.defaults import (
    DEFAULT_RRF_K,
    MAX_CANDIDATES,
    MAX_QUERY_TOKENS,
    PHRASE_BONUS,
    MemoryKind,
)
from sessions_app.core.memory.values import MemoryEntry
from sessions_app.core.text import analyze as analyze_text
from sessions_app.core.text import bm25_term, has_unsegmented
from sessions_app.core.text import idf as idf

# -- text analysis ------------------------------------------------------------------------------
# The tokenizer, stop words, stemmer and BM25 are sessions_app.core.text's, shared with
# session recall: one analyzer, so a memory and an event are read the same way. Memory adds
# only NFKC (full-width letters and digits are their ASCII selves in a memory's tokens).


def normalize_text(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def analyze(text: str) -> list[str]:
    """Search tokens of a text, in order, with repeats (term counts matter to BM25): the
    shared analyzer's terms of its NFKC form. Stored with each memory (`search_tokens`):
    a change here needs a migration re-analyzing them (0007 is the last)."""
    return analyze_text(normalize_text(text))


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, in order, at most `MAX_QUERY_TOKENS`."""
    return list(dict.fromkeys(analyze(text)))[:MAX_QUERY_TOKENS]


def phrase_of(text: str) -> str:
    """The query as a phrase for substring matching ("" when too short to mean anything)."""
    phrase = " ".join(normalize_text(text).split())
    if len(phrase) < 3 and not has_unsegmented(phrase):
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
            raw += bm25_term(weight, counts.get(token, 0), length, average)
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
