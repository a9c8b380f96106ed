"""Session recall: lexical scoring, abstention and hybrid ranking."""

from __future__ import annotations

import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sessions_app.core.recall.analysis import (
    _WORD,
    _phrase,
    analyze,
    keyword_tokens,
    named_speakers,
    normalize_space,
    query_terms,
)
from sessions_app.core.recall.defaults import FULL_QUERY_BONUS, KEYWORD_BONUS, MIN_SCORE, SCAN_CAP
from sessions_app.core.text import bm25_term, idf

# -- lexical scoring -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Document:
    """An event's text as the scorer sees it: its terms (with counts) and its length."""

    key: Hashable
    text: str
    terms: Mapping[str, int]
    length: int  # UTF-8 bytes of the text


def make_document(key: Hashable, text: str) -> Document:
    return Document(key=key, text=text, terms=Counter(analyze(text)), length=len(text.encode("utf-8")))


@dataclass(frozen=True, kw_only=True)
class CorpusStats:
    """What IDF and BM25 need to know about the searched events."""

    doc_count: int
    avg_length: float
    doc_freq: Mapping[str, int]

    def idf(self, term: str) -> float:
        # A term found nowhere weighs as one found once: otherwise a single absent word (a
        # typo, a name never written) would outweigh everything else the query asks for.
        n = min(max(self.doc_freq.get(term, 0), 1), max(self.doc_count, 1))
        return idf(max(self.doc_count, 1), n)

    @classmethod
    def of(cls, documents: Sequence[Document], terms: Iterable[str]) -> CorpusStats:
        wanted = set(terms)
        freq: Counter[str] = Counter()
        for doc in documents:
            freq.update(wanted.intersection(doc.terms))
        avg = sum(d.length for d in documents) / len(documents) if documents else 1.0
        return cls(doc_count=len(documents), avg_length=max(avg, 1.0), doc_freq=dict(freq))


@dataclass(frozen=True, kw_only=True)
class Scored:
    document: Document
    score: float  # coverage + bonuses: what the floor compares
    relevance: float  # BM25: orders equal scores
    matched: int


def score_document(terms: Sequence[str], phrase: str, document: Document, stats: CorpusStats) -> Scored | None:
    """The lexical score of one document for a query's terms, or None when none matched."""
    total = 0.0
    covered = 0.0
    bm25 = 0.0
    matched = 0
    for term in terms:
        weight = stats.idf(term)
        total += weight
        tf = document.terms.get(term, 0)
        if tf:
            matched += 1
            covered += weight
            bm25 += bm25_term(weight, tf, document.length, stats.avg_length)
    if not matched:
        return None
    score = covered / total if total > 0 else 0.0
    if phrase and len(phrase) <= len(document.text) and phrase in normalize_space(document.text).lower():
        score += FULL_QUERY_BONUS
    if matched >= min(2, len(terms)):
        score += KEYWORD_BONUS
    return Scored(document=document, score=score, relevance=bm25, matched=matched)


def answer_confidence(query: str, text: str, *, author: str = "", participants: Iterable[str] = ()) -> float:
    """How much of what `query` asks about `text` holds: the share of the query's distinct
    content terms found among the text's, in [0, 1] (a term of four or more characters
    inside a word counts too, as the lexical scan finds it).

    A query that names some of `participants` (authors of the searched events) asks about
    them: a text neither written by one of them nor naming one counts half ("what did Ann
    say about the race?" is less answered by Bob's race). Half, not nothing: a participant
    may be named by a role that is also a topic ("the user interface"). The named
    participants' own names are not counted as content terms.
    """
    named = named_speakers(query, participants)
    names = {w for n in named for w in analyze(n)}
    terms = [t for t in dict.fromkeys(query_terms(query)) if t not in names]
    if not terms:
        return 1.0 if named else 0.0
    held = set(analyze(text))
    flat = normalize_space(text).lower()
    share = sum(1 for t in terms if t in held or (len(t) >= 4 and t in flat)) / len(terms)
    if (
        named
        and author not in named
        and not any(re.search(rf"(?<!\w){re.escape(n.lower())}(?!\w)", flat) for n in named)
    ):
        return share / 2
    return share


def rank_documents(
    query: str,
    documents: Sequence[Document],
    *,
    limit: int,
    min_score: float = MIN_SCORE,
    stats: CorpusStats | None = None,
    recency: Callable[[Document], Any] | None = None,
) -> list[Scored]:
    """The best `limit` documents for `query` at or above `min_score`: by score, then BM25,
    then `recency` (larger first). `stats` default to the documents themselves."""
    terms = query_terms(query)
    if not terms or not documents or limit <= 0:
        return []
    stats = stats or CorpusStats.of(documents, terms)
    phrase = _phrase(query)
    scored = [s for d in documents if (s := score_document(terms, phrase, d, stats)) is not None]
    kept = [s for s in scored if s.score >= min_score]
    kept.sort(
        key=lambda s: (s.score, s.relevance, recency(s.document) if recency else 0),
        reverse=True,
    )
    return kept[:limit]


def rank_many(
    queries: Sequence[str],
    documents: Sequence[Document],
    *,
    limit: int,
    min_score: float = MIN_SCORE,
    recency: Callable[[Document], Any] | None = None,
) -> list[list[Scored]]:
    """`rank_documents` for several queries over the same documents, in one pass: the
    documents are read once to list, per term of any query, those that hold it (which
    gives the corpus statistics too); each query then scores only its terms' documents."""
    per_query = [query_terms(q) for q in queries]
    wanted = {t for terms in per_query for t in terms}
    postings: dict[str, list[Document]] = {t: [] for t in wanted}
    for doc in documents:
        for term in wanted.intersection(doc.terms):
            postings[term].append(doc)
    avg = sum(d.length for d in documents) / len(documents) if documents else 1.0
    stats = CorpusStats(
        doc_count=len(documents), avg_length=max(avg, 1.0), doc_freq={t: len(p) for t, p in postings.items()}
    )
    ranked = []
    for query, terms in zip(queries, per_query, strict=True):
        candidates = list({id(d): d for t in terms for d in postings[t]}.values())
        ranked.append(rank_documents(query, candidates, limit=limit, min_score=min_score, stats=stats, recency=recency))
    return ranked


def scan_score(query: str, text: str) -> float:
    """SPEC 5.2's lexical-scan score (substring matching, no index): the share of keywords
    found in the text, +0.75 for the whole query, +0.15 for at least min(2, n) keywords."""
    haystack = normalize_space(text).lower()
    if not haystack:
        return 0.0
    keywords = keyword_tokens(query) or _WORD.findall(query.lower())
    if not keywords:
        return 0.0
    matched = sum(1 for k in keywords if k in haystack)
    if not matched:
        return 0.0
    score = matched / len(keywords)
    phrase = _phrase(query)
    if phrase and phrase in haystack:
        score += FULL_QUERY_BONUS
    if matched >= min(2, len(keywords)):
        score += KEYWORD_BONUS
    return score


class DocumentCache:
    """Analysed documents by key (events never change, so an entry never goes stale).

    Bounded LRU; safe to share between threads."""

    def __init__(self, capacity: int = 2 * SCAN_CAP) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Hashable, Document] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, text: str) -> Document:
        with self._lock:
            doc = self._items.get(key)
            if doc is not None and doc.text == text:  # a reused key (a recreated database) misses
                self._items.move_to_end(key)
                return doc
        doc = make_document(key, text)
        with self._lock:
            self._items[key] = doc
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return doc
