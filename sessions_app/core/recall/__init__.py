"""Session recall (SPEC 5): find raw history that summaries and compaction hid, and load it.

Three layers, all plain Python:

- Text analysis and lexical scoring, shared by every backend so that a score means the
  same thing everywhere. Words are lower-cased, stop words dropped and English suffixes
  lightly stripped; runs of unsegmented scripts (Chinese, Japanese, Korean, Thai, ...)
  become character bigrams. The score of an event for a query is the IDF-weighted share of
  the query's terms it contains, in [0, 1], plus SPEC 14's bonuses: +0.75 when the whole
  normalised query occurs in the text, +0.15 when at least min(2, terms) terms matched.
  Events under the floor (0.45) are dropped. BM25 (k1 1.2, b 0.75, lengths in UTF-8
  bytes) only orders events of equal score. A share of the query, not raw BM25, is what
  the floor compares: BM25 falls with document length, so a long tool result that holds
  every word of the query would sink under any fixed floor.
- Abstention (issue 24): a search answers `no_match` when no hit is good enough, so that the
  agent says it does not know instead of reading an unrelated hit as evidence. "Good enough"
  is `answer_confidence`, the share of the query's content words that the hit holds (a query
  that names a participant counts half for hits that participant neither wrote nor names),
  in [0, 1] and independent of the session's size, so one threshold (`NO_MATCH_BELOW`, fitted
  by bench/recall_abstention.py on part of LoCoMo and QMSum, reported on the rest) holds for all.
- Which summary sections to follow for a question (issue 24, item 4): `rank_sections` fuses
  the section text's match with where one search's hits fall, and `search_sections`
  follows them (`sections.py`).
- `RecallIndex`, what a backend provides (search the user's events, load a window around
  an anchor, resolve a tool call id, read summaries, scan one session), with
  `InMemoryRecallIndex` over an `InMemorySessionService`'s public API.
- The tool algorithms, `session_search` and `session_load` (SPEC 5.2, 5.3), and the
  preload block (SPEC 5.4). They answer JSON-safe dicts that a model reads.

Only user and assistant text and tool results are recalled; tool calls (their
arguments) and partial events never are. Every request names its user, and every backend
scopes every read to that user.
"""

from __future__ import annotations

from sessions_app.core.recall.analysis import (
    STOP_WORDS,
    UNSEGMENTED_RANGES,
    analyze,
    is_unsegmented,
    keyword_tokens,
    named_speakers,
    normalize_space,
    query_terms,
    search_queries,
    surface_forms,
)
from sessions_app.core.recall.defaults import (
    BM25_B,
    BM25_K1,
    CONTENT_LIMIT,
    CONTEXT_AFTER,
    CONTEXT_BEFORE,
    CONTEXT_CONTENT_LIMIT,
    DEFAULT_SCOPE,
    DEFAULT_TOP_K,
    EXPANDED_HITS,
    FULL_QUERY_BONUS,
    HISTORY_NOTE,
    HYBRID_POOL,
    KEYWORD_BONUS,
    LOAD_AFTER,
    LOAD_BEFORE,
    LOAD_MAX_SPAN,
    MAX_CONTENT_LIMIT,
    MAX_TOP_K,
    MIN_SCORE,
    NEIGHBOUR_WEIGHT,
    NO_MATCH_BELOW,
    NO_MATCH_NOTE,
    PRELOAD_SESSION_RECALL,
    PRELOAD_TEXT_CHARS,
    RANGE_PAGE_EVENTS,
    RECALL_ROLES,
    RRF_K,
    SCAN_CAP,
    SCOPES,
    SNIPPET_CHARS,
    SNIPPET_LINE_CHARS,
    SPEAKER_BOOST,
    STATE_LAST_INCLUDED_TS,
    TRIGRAM_WEIGHT,
    AnchorNotFoundError,
    RangeError,
    Ranking,
    RecallError,
    Scope,
)
from sessions_app.core.recall.index import (
    EventRange,
    EventSearchRequest,
    EventWindow,
    InMemoryRecallIndex,
    RecallIndex,
    SearchHit,
    recall_text,
)
from sessions_app.core.recall.load import (
    load_range,
    normalize_content_window,
    normalize_window,
    parse_range,
    session_load,
)
from sessions_app.core.recall.preload import PRELOAD_HEADER, preload_session_recall
from sessions_app.core.recall.ranking import hybrid_rank, trigrams
from sessions_app.core.recall.scopes import fallback_queries, search_with_fallback
from sessions_app.core.recall.scoring import (
    CorpusStats,
    Document,
    DocumentCache,
    Scored,
    answer_confidence,
    make_document,
    rank_documents,
    rank_many,
    scan_score,
    score_document,
)
from sessions_app.core.recall.search import (
    HitFilter,
    last_manifest_dispositions,
    normalize_scope,
    normalize_top_k,
    session_search,
    why_hidden,
)
from sessions_app.core.recall.sections import (
    DEFAULT_SECTIONS,
    SectionChoice,
    SectionRef,
    rank_sections,
    search_sections,
)
from sessions_app.core.recall.slices import (
    HiddenBoundary,
    compact_text,
    excerpt,
    hidden_boundary,
    loaded_message,
    slice_utf8,
)
from sessions_app.core.text import stem  # the stemmer every recall backend shares

__all__ = [
    "BM25_B",
    "BM25_K1",
    "CONTENT_LIMIT",
    "CONTEXT_AFTER",
    "CONTEXT_BEFORE",
    "CONTEXT_CONTENT_LIMIT",
    "DEFAULT_SCOPE",
    "DEFAULT_SECTIONS",
    "DEFAULT_TOP_K",
    "EXPANDED_HITS",
    "FULL_QUERY_BONUS",
    "HISTORY_NOTE",
    "HYBRID_POOL",
    "KEYWORD_BONUS",
    "LOAD_AFTER",
    "LOAD_BEFORE",
    "LOAD_MAX_SPAN",
    "MAX_CONTENT_LIMIT",
    "MAX_TOP_K",
    "MIN_SCORE",
    "NEIGHBOUR_WEIGHT",
    "NO_MATCH_BELOW",
    "NO_MATCH_NOTE",
    "PRELOAD_HEADER",
    "PRELOAD_SESSION_RECALL",
    "PRELOAD_TEXT_CHARS",
    "RANGE_PAGE_EVENTS",
    "RECALL_ROLES",
    "RRF_K",
    "SCAN_CAP",
    "SCOPES",
    "SNIPPET_CHARS",
    "SNIPPET_LINE_CHARS",
    "SPEAKER_BOOST",
    "STATE_LAST_INCLUDED_TS",
    "STOP_WORDS",
    "TRIGRAM_WEIGHT",
    "UNSEGMENTED_RANGES",
    "AnchorNotFoundError",
    "CorpusStats",
    "Document",
    "DocumentCache",
    "EventRange",
    "EventSearchRequest",
    "EventWindow",
    "HiddenBoundary",
    "HitFilter",
    "InMemoryRecallIndex",
    "RangeError",
    "Ranking",
    "RecallError",
    "RecallIndex",
    "Scope",
    "Scored",
    "SearchHit",
    "SectionChoice",
    "SectionRef",
    "analyze",
    "answer_confidence",
    "compact_text",
    "excerpt",
    "fallback_queries",
    "hidden_boundary",
    "hybrid_rank",
    "is_unsegmented",
    "keyword_tokens",
    "last_manifest_dispositions",
    "load_range",
    "loaded_message",
    "make_document",
    "named_speakers",
    "normalize_content_window",
    "normalize_scope",
    "normalize_space",
    "normalize_top_k",
    "normalize_window",
    "parse_range",
    "preload_session_recall",
    "query_terms",
    "rank_documents",
    "rank_many",
    "rank_sections",
    "recall_text",
    "scan_score",
    "score_document",
    "search_queries",
    "search_sections",
    "search_with_fallback",
    "session_load",
    "session_search",
    "slice_utf8",
    "stem",
    "surface_forms",
    "trigrams",
    "why_hidden",
]
