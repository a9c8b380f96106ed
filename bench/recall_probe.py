"""What the recall fits share (issue 24): each question's lexical pool as `session_search`
hands it to `hybrid_rank`, the abstention bench's questions (answerable, adversarial, and
asked again without their evidence), and abstention applied to a ranked list as the tool
applies it. Used by bench/recall_fit.py, recall_abstention.py and recall_dense.py.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from bench.recall import Case, Question, Turn, hidden_session

K = 5
SESSION_OF_TURN = re.compile(r"D(\d+):")
"""A LoCoMo turn key's session (`D3:12` is in session 3)."""


@dataclass
class Pooled:
    """One question's search: the pool `hybrid_rank` was handed (lexical order) and what it
    answered (hybrid order), as hits; the searched session's authors and event id -> turn key."""

    case: Case
    question: Question
    pool: list[Any]
    ranked: list[Any]
    authors: set[str]
    keys: dict[str, str]


async def pools(cases: Sequence[Case], *, min_confidence: float | None = None) -> AsyncIterator[Pooled]:
    """Each question of `cases` searched by `session_search` (scope current_hidden, top_k K,
    the in-memory index, every turn behind the summary boundary), with its pool recorded by
    a probe on `hybrid_rank` (restored when the walk ends)."""
    from sessions_app.core.inmemory import InMemorySessionService
    from sessions_app.core.recall import InMemoryRecallIndex, session_search
    from sessions_app.core.recall import search as search_module

    service = InMemorySessionService()
    index = InMemoryRecallIndex(service)
    seen: list[tuple[list[Any], list[Any]]] = []
    original = search_module.hybrid_rank

    def record(query: str, pool: Sequence[Any]) -> list[Any]:
        ranked = original(query, pool)
        seen.append((list(pool), list(ranked)))
        return ranked

    search_module.hybrid_rank = record  # a bench probe, restored below
    try:
        for case in cases:
            loaded, keys = await hidden_session(service, case.turns)
            authors = {e.author for e in loaded.events}
            for question in case.questions:
                seen.clear()
                await session_search(
                    index,
                    session=loaded,
                    query=question.text,
                    scope="current_hidden",
                    top_k=K,
                    min_confidence=min_confidence,
                )
                pool, ranked = seen[0] if seen else ([], [])
                yield Pooled(case=case, question=question, pool=pool, ranked=ranked, authors=authors, keys=keys)
    finally:
        search_module.hybrid_rank = original


@dataclass
class Asking:
    """One search of the abstention bench: a question (`kind`: answerable, adversarial or
    removed) of `case`, and the session to ask it of (`turns`, built as `session`/`index`,
    event id -> turn key in `keys`). `evidence` only for answerable questions."""

    case: Case
    kind: str
    query: str
    evidence: list[set[str]] | None
    turns: list[Turn]
    session: Any
    index: Any
    keys: dict[str, str]


async def _built(turns: list[Turn]) -> tuple[Any, Any, dict[str, str]]:
    from sessions_app.core.inmemory import InMemorySessionService
    from sessions_app.core.recall import InMemoryRecallIndex

    service = InMemorySessionService()
    session, keys = await hidden_session(service, turns)
    return session, InMemoryRecallIndex(service), keys


async def askings(cases: Sequence[Case], *, dataset: str, adversarial: dict[str, list[str]]) -> AsyncIterator[Asking]:
    """The abstention bench's searches, in order, per case: its answerable questions and its
    adversarial ones against the whole conversation; then each answerable question against
    the conversation without what holds its evidence (LoCoMo: the sessions D<k> of its
    evidence, one partial conversation per set of sessions; QMSum: the turns of its spans)."""
    for case in cases:
        whole = list(case.turns)
        session, index, keys = await _built(whole)
        for question in case.questions:
            yield Asking(
                case=case,
                kind="answerable",
                query=question.text,
                evidence=question.evidence,
                turns=whole,
                session=session,
                index=index,
                keys=keys,
            )
        for text in adversarial.get(case.name, []):
            yield Asking(
                case=case,
                kind="adversarial",
                query=text,
                evidence=None,
                turns=whole,
                session=session,
                index=index,
                keys=keys,
            )
        if dataset == "locomo":
            groups: dict[frozenset[str], list[str]] = {}
            for question in case.questions:
                held = frozenset(
                    m.group(1) for group in question.evidence for k in group if (m := SESSION_OF_TURN.match(k))
                )
                groups.setdefault(held, []).append(question.text)
            for removed, texts in groups.items():
                kept = [t for t in case.turns if not ((m := SESSION_OF_TURN.match(t.key)) and m.group(1) in removed)]
                session, index, keys = await _built(kept)
                for text in texts:
                    yield Asking(
                        case=case,
                        kind="removed",
                        query=text,
                        evidence=None,
                        turns=kept,
                        session=session,
                        index=index,
                        keys=keys,
                    )
        else:
            for question in case.questions:
                spans = set().union(*question.evidence)
                kept = [t for t in case.turns if t.key not in spans]
                session, index, keys = await _built(kept)
                yield Asking(
                    case=case,
                    kind="removed",
                    query=question.text,
                    evidence=None,
                    turns=kept,
                    session=session,
                    index=index,
                    keys=keys,
                )


def abstained(query: str, hits: Sequence[tuple[str, str]], *, participants: set[str]) -> bool:
    """Whether the tool answers no_match for these top hits ((text, author) each): the best
    `answer_confidence` is under NO_MATCH_BELOW (read when called, so a fit can move it)."""
    from sessions_app.core.recall import defaults
    from sessions_app.core.recall.scoring import answer_confidence

    best = max(
        (answer_confidence(query, text, author=author, participants=participants) for text, author in hits),
        default=0.0,
    )
    return best < defaults.NO_MATCH_BELOW
