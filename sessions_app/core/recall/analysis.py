"""Session recall: text analysis: terms, keywords and the query list."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sessions_app.core.text import stem

# -- text analysis ----------------------------------------------------------------------------

# Scripts written without spaces between words: indexed as overlapping character bigrams.
# The PostgreSQL index expression (sessions_app/search.py) splits the same ranges into
# single characters, so a bigram there is "both characters" and is verified here.
UNSEGMENTED_RANGES = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
)
_WORD = re.compile(r"[^\W_]+")
_SEGMENTS = re.compile(f"([{UNSEGMENTED_RANGES}]+)")
_UNSEGMENTED = re.compile(f"[{UNSEGMENTED_RANGES}]")
_MAX_TERM_CHARS = 64  # longer "words" are hashes or base64: never worth indexing

STOP_WORDS = frozenset(
    # SPEC 5.2's list, plus pronouns and auxiliaries that carry no topic.
    "a about an and are as at be by did discuss discussed do does for from had has have how in into "
    "is it its me of on or say said session summary tell that the their them they this to was were "
    "what when where which who why with would "
    "am been being can could i if my mine myself our ours so than then there these those us we "
    "you your yours he him his she her hers not no yes will shall should may might must just also "
    "any some all very too out up".split()
)




_SUFFIXES = ("s", "e", "es", "ed", "ing", "ings", "d", "er", "ers", "eds", "eed", "eeds", "eing", "eings")


def surface_forms(term: str) -> list[str]:
    """Every word that `stem` may map to `term` (and a few more): what an index holding whole
    words must look up to find a stem. Checked against the vocabulary of the benchmark data
    by a test: `stem(w)` in `surface_forms(...)` for each word w."""
    if not (term.isascii() and term.isalpha()):
        return [term]
    forms = [term, *(term + suffix for suffix in _SUFFIXES)]
    if term.endswith("y"):
        forms.append(term[:-1] + "ies")
    forms.extend(term + term[-1] + suffix for suffix in ("ing", "ed", "ings"))
    return list(dict.fromkeys(forms))


def is_unsegmented(char: str) -> bool:
    """Whether a character belongs to a script written without spaces between words."""
    return bool(_UNSEGMENTED.match(char))


def _raw_terms(text: str) -> Iterable[tuple[str, bool]]:
    """(term, is_word) for every term of `text`: stemmed words and unsegmented bigrams."""
    for token in _WORD.findall(text.lower()):
        if not _UNSEGMENTED.search(token):
            # A lone Latin letter ("s" of "Caroline's") says nothing; a lone digit may.
            if len(token) <= _MAX_TERM_CHARS and not (len(token) == 1 and token.isascii() and token.isalpha()):
                yield token, True
            continue
        for part in _SEGMENTS.split(token):
            if not part:
                continue
            if _UNSEGMENTED.match(part):
                if len(part) == 1:
                    yield part, False
                else:
                    for i in range(len(part) - 1):
                        yield part[i : i + 2], False
            elif len(part) <= _MAX_TERM_CHARS:
                yield part, True


def analyze(text: str) -> list[str]:
    """The index terms of a text, in order: stemmed words without stop words, and
    character bigrams for unsegmented scripts."""
    return [
        stem(term) if is_word else term for term, is_word in _raw_terms(text) if not (is_word and term in STOP_WORDS)
    ]


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in order. A query made only of stop words keeps them."""
    terms = list(dict.fromkeys(analyze(query)))
    if not terms:
        terms = list(dict.fromkeys(stem(t) if w else t for t, w in _raw_terms(query)))
    return terms


def normalize_space(text: str) -> str:
    return " ".join(text.split())


def _phrase(text: str) -> str:
    return normalize_space(text).lower().strip(" .?!:;,")


def keyword_tokens(query: str) -> list[str]:
    """SPEC 5.2 keywords: lower-cased words without stop words, dropping words of fewer than
    three characters unless they hold a digit or are in an unsegmented script."""
    keywords = []
    for token in _WORD.findall(query.lower()):
        if token in STOP_WORDS:
            continue
        if len(token) < 3 and not any(c.isdigit() for c in token) and not _UNSEGMENTED.search(token):
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


