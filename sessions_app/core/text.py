"""Text analysis shared by lexical recall, memory search and the offline planner."""

from __future__ import annotations

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
