"""Text analysis and lexical ranking: one home for every lexical search in Agentsite.

Session recall, long-term memory, skill evolution and the offline planner read words the
same way here:

- `words` are the lower-cased runs of letters and digits of a text (any script);
- `STOP_WORDS` is the one stop-word list: English function words (`FUNCTION_WORDS`) plus
  the words a search question is phrased with (`QUERY_WORDS`: "what did we discuss in the
  session"); a module that needs more drops its own few on top, by name;
- `stem` is a light English stemmer, and `surface_forms` its inverse for indexes that hold
  whole words (PostgreSQL's full-text index);
- `analyze` turns a text into index terms: stemmed words without stop words, and
  overlapping character pairs for scripts written without spaces (Chinese, Japanese,
  Korean, Thai, ...);
- `idf` and `bm25_term` are BM25 (k1 1.2, b 0.75, the usual defaults) for any collection;
  each caller picks its length unit (recall: UTF-8 bytes, memory: terms).

Changing `analyze` changes the terms stored in `sessions_app_memory.search_tokens`: ship a
data migration that re-analyzes them (as 0007 does).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

# -- words ------------------------------------------------------------------------------------

# Scripts written without spaces between words: indexed as overlapping character bigrams.
# The PostgreSQL index expression (sessions_app/search.py) splits the same ranges into
# single characters, so a bigram there is "both characters" and is verified in Python.
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
WORD = re.compile(r"[^\W_]+")
"""A word: a run of letters and digits, in any script (the underscore splits words)."""
_SEGMENTS = re.compile(f"([{UNSEGMENTED_RANGES}]+)")
_UNSEGMENTED = re.compile(f"[{UNSEGMENTED_RANGES}]")
MAX_TERM_CHARS = 64
"""Longer "words" are hashes or base64: never worth indexing."""

FUNCTION_WORDS = frozenset(
    # Articles, pronouns, auxiliaries, prepositions and conjunctions: they carry no topic.
    "a about all also am an and any are as at be been being by can could did do does for from "
    "had has have he her hers him his how i if in into is it its just me mine my myself no not "
    "of on or our ours out shall she should so some than that the their them then there these "
    "they this those to too up us very was we were what when where which who why will with "
    "would yes you your yours may might must".split()
)
QUERY_WORDS = frozenset(
    # How a question to a search tool is phrased ("what did we discuss in the session?").
    "discuss discussed say said session summary tell".split()
)
STOP_WORDS = FUNCTION_WORDS | QUERY_WORDS
"""The stop-word list of every lexical search (recall, memory)."""


def words(text: str) -> list[str]:
    """The lower-cased words of a text, in order, with repeats (no stop words removed)."""
    return WORD.findall(text.lower())


def is_unsegmented(char: str) -> bool:
    """Whether a character belongs to a script written without spaces between words."""
    return bool(_UNSEGMENTED.match(char))


def has_unsegmented(text: str) -> bool:
    """Whether any character of `text` belongs to a script written without spaces."""
    return bool(_UNSEGMENTED.search(text))


# -- stemming ---------------------------------------------------------------------------------

# Consonants doubled before -ing/-ed (running -> run, stopped -> stop).
_DOUBLES = frozenset("bdfgkmnprt")


def stem(word: str) -> str:
    """A light English stemmer: plural, -ing, -ed and a final -e go, so that "painted",
    "painting", "paints" and "paint" meet. Short words, numbers and non-ASCII words (CJK is
    matched by character pairs instead) are left alone."""
    word = word.lower()
    if len(word) <= 3 or not word.isalpha() or not word.isascii():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "ches", "shes", "zzes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] in _DOUBLES:
                word = word[:-1]
            break
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word


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


# -- index terms ------------------------------------------------------------------------------


def raw_terms(text: str) -> Iterable[tuple[str, bool]]:
    """(term, is_word) for every term of `text`, stop words included: lower-cased words (not
    yet stemmed) and the character bigrams of unsegmented scripts."""
    for token in words(text):
        if not _UNSEGMENTED.search(token):
            # A lone Latin letter ("s" of "Caroline's") says nothing; a lone digit may.
            if len(token) <= MAX_TERM_CHARS and not (len(token) == 1 and token.isascii() and token.isalpha()):
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
            elif len(part) <= MAX_TERM_CHARS:
                yield part, True


def analyze(text: str) -> list[str]:
    """The index terms of a text, in order, with repeats (BM25 counts them): stemmed words
    without stop words, and character bigrams for unsegmented scripts."""
    return [
        stem(term) if is_word else term for term, is_word in raw_terms(text) if not (is_word and term in STOP_WORDS)
    ]


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in order. A query made only of stop words keeps them."""
    terms = list(dict.fromkeys(analyze(query)))
    if not terms:
        terms = list(dict.fromkeys(stem(t) if w else t for t, w in raw_terms(query)))
    return terms


# -- BM25 -------------------------------------------------------------------------------------

BM25_K1 = 1.2
BM25_B = 0.75


def idf(documents: int, frequency: int) -> float:
    """BM25's idf of a term found in `frequency` of `documents`: always positive."""
    return math.log(1.0 + (documents - frequency + 0.5) / (frequency + 0.5))


def bm25_term(weight: float, tf: float, length: float, average_length: float) -> float:
    """One term's BM25 share in a document of `length` (its idf `weight`, `tf` occurrences),
    against the collection's `average_length` (in the same unit)."""
    if not tf:
        return 0.0
    return weight * tf * (BM25_K1 + 1) / (tf + BM25_K1 * (1 - BM25_B + BM25_B * length / average_length))
