"""The offline model's extractive summaries: the sentences that carry the most entities,
numbers, decisions and errors, in their original order, within a token budget."""

from __future__ import annotations

import re
from collections.abc import Iterable

from runs.core.llm.offline.words import _analyse
from runs.core.tokens import count_text

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^\s.])|(?<=[\u3002\uff01\uff1f])")
_DECISION = re.compile(
    r"\b(decid\w*|decision|agreed?|conclu\w*|resolv\w*|resolution|fix\w*|plan\w*|chose|choose|"
    r"will|must|should|next step|action|todo|approv\w*|rollback|roll back|renew\w*|deploy\w*)\b|"
    r"决定|结论|计划|修复|需要|应该",
    re.I,
)
_ERROR = re.compile(
    r"\b(errors?|fail\w*|exceptions?|expir\w*|timeouts?|timed out|refused|denied|crash\w*|missing|"
    r"invalid|broken|outage|incident|unable|cannot|can't|rejected?|5\d\d)\b|错误|失败|过期|异常|超时",
    re.I,
)


def _split_sentences(text: str) -> list[str]:
    sentences: list[str] = []
    for line in text.splitlines():
        for piece in _SENTENCE_END.split(line):
            piece = piece.strip()
            if piece:
                sentences.append(piece)
    return sentences


def _join(sentences: Iterable[str]) -> str:
    """Sentences joined by a space, or by nothing after a CJK sentence end."""
    out = ""
    for sentence in sentences:
        if out and not out.endswith(("\u3002", "\uff01", "\uff1f")):
            out += " "
        out += sentence
    return out


def _sentence_score(sentence: str) -> float:
    analysis = _analyse(sentence)
    entities = len(analysis.hosts) + len(analysis.tickets) + len(analysis.quoted)
    numbers = len(re.findall(r"\d+(?:[.:]\d+)*", sentence))
    score = 2.0 * min(entities, 3) + 1.0 * min(numbers, 4)
    score += 2.0 * min(len(_DECISION.findall(sentence)), 2)
    score += 2.5 * min(len(_ERROR.findall(sentence)), 2)
    if len(sentence.split()) < 4 and not re.search(r"[\u3000-\u9fff]", sentence):
        score -= 1.0
    return score


def extractive_summary(text: str, budget_tokens: int) -> str:
    """The most informative sentences of `text`, in their original order, within the budget.

    A sentence scores by the entities (hosts, ids, quoted names), numbers, decision words
    and error words it carries. When even the best sentence is too long, its head is kept.
    """
    if budget_tokens <= 0 or not text.strip():
        return ""
    if count_text(text.strip()) <= budget_tokens:
        return text.strip()
    sentences = _split_sentences(text)
    sizes = [count_text(s) for s in sentences]
    scores = [_sentence_score(s) for s in sentences]
    ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    chosen: list[int] = []
    used = 0
    for index in ranked:
        if scores[index] < 0 and chosen:
            break  # fragments ("Ok.") only stand in when nothing better fits
        # Joining costs at most about one token per sentence.
        if used + sizes[index] + 1 <= budget_tokens:
            chosen.append(index)
            used += sizes[index] + 1
    # Verify against the real count of the joined text; drop the weakest picks if needed.
    while chosen and count_text(_join(sentences[i] for i in sorted(chosen))) > budget_tokens:
        chosen.pop()
    if chosen:
        return _join(sentences[i] for i in sorted(chosen))
    words = sentences[ranked[0]].split() if ranked else []
    while words and count_text(" ".join(words) + " …") > budget_tokens:
        words.pop()
    return " ".join(words) + " …" if words else ""
