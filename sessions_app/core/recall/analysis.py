"""Session recall: text analysis: terms, keywords and the query list."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sessions_app.core.text import STOP_WORDS as STOP_WORDS
from sessions_app.core.text import UNSEGMENTED_RANGES as UNSEGMENTED_RANGES
from sessions_app.core.text import WORD, has_unsegmented, words
from sessions_app.core.text import analyze as analyze
from sessions_app.core.text import is_unsegmented as is_unsegmented
from sessions_app.core.text import query_terms as query_terms
from sessions_app.core.text import surface_forms as surface_forms

# The tokenizer, stop words, stemmer and analyzer are sessions_app.core.text's, shared with
# long-term memory, skill evolution and the offline planner; what follows is recall's own:
# SPEC 5.2's keywords and query list.
_WORD = WORD


def normalize_space(text: str) -> str:
    return " ".join(text.split())


def _phrase(text: str) -> str:
    return normalize_space(text).lower().strip(" .?!:;,")


def keyword_tokens(query: str) -> list[str]:
    """SPEC 5.2 keywords: lower-cased words without stop words, dropping words of fewer than
    three characters unless they hold a digit or are in an unsegmented script."""
    keywords = []
    for token in words(query):
        if token in STOP_WORDS:
            continue
        if len(token) < 3 and not any(c.isdigit() for c in token) and not has_unsegmented(token):
            continue
        keywords.append(token)
    return list(dict.fromkeys(keywords))


def _trimmed_keywords(query: str) -> list[str]:
    """SPEC 5.2: more than eight keywords keep the first four and the last four."""
    keywords = keyword_tokens(normalize_space(query))
    if len(keywords) > 8:
        keywords = list(dict.fromkeys(keywords[:4] + keywords[-4:]))
    return keywords


_CLAUSE_SPLIT = re.compile(r",|;|\band\b|\bor\b", re.IGNORECASE)
_LEAD_INS = (
    "summarize the discussion about ",
    "summarize the discussion on ",
    "summarize the discussion around ",
    "summarize discussion about ",
    "what did ",
    "what were ",
    "what was ",
    "what are ",
    "what is ",
    "who said ",
    "how did ",
)


def _trim_lead_in(clause: str) -> str:
    lower = clause.lower()
    for prefix in _LEAD_INS:
        if lower.startswith(prefix):
            return clause[len(prefix) :].strip()
    return clause.strip()


def search_queries(query: str) -> list[str]:
    """SPEC 5.2's query list: the whole query, then each clause (and its keywords), then
    keyword fallbacks (all keywords, at most 8 kept as the first and last four, and up to
    three sliding windows of 3 or 4 keywords). Deduplicated, in order."""
    primary = normalize_space(query)
    if not primary:
        return []
    queries = [primary]
    clauses = [c for c in _CLAUSE_SPLIT.split(primary) if c.strip()]
    if len(clauses) > 1:
        for clause in clauses:
            clause = normalize_space(_trim_lead_in(clause.strip()).strip(" .?!:"))
            if not keyword_tokens(clause):
                continue  # "... and why?": a clause of stop words finds only noise
            queries.append(clause)
            keywords = " ".join(keyword_tokens(clause))
            if keywords and keywords != clause:
                queries.append(keywords)
    trimmed = _trimmed_keywords(primary)
    joined = " ".join(trimmed)
    if trimmed and joined != primary:
        fallbacks = [joined]
        if len(trimmed) >= 3:
            size = 4 if len(trimmed) >= 5 else 3
            for start in range(len(trimmed) - size + 1):
                fallbacks.append(" ".join(trimmed[start : start + size]))
                if len(fallbacks) >= 4:
                    break
        queries.extend(fallbacks)
    return list(dict.fromkeys(q for q in queries if q))


def named_speakers(query: str, authors: Iterable[str]) -> frozenset[str]:
    """The authors among `authors` whose name the query mentions as a whole word."""
    lowered = normalize_space(query).lower()
    return frozenset(
        a for a in set(authors) if len(a) > 1 and re.search(rf"(?<!\w){re.escape(a.lower())}(?!\w)", lowered)
    )
