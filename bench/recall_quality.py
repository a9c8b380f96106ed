"""Quality of `bench/recall.py`: session_search on the in-memory index against rank-bm25 baselines,
scored per question category, and the tables that report it."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from bench.recall_cases import APP, CATEGORIES, KS, T0, Case, Turn, recall

_WORDS = re.compile(r"\w+")


# -- quality: ours (in-memory index) and the baselines -------------------------------------------


async def hidden_session(service: Any, turns: Sequence[Turn]) -> tuple[Any, dict[str, str]]:
    """A session of `turns`, 30 s apart, all behind a summary boundary (what
    `session_search` scope current_hidden searches), loaded without events; and event id ->
    the turn's key in the dataset."""
    from sessions_app.core.events import Event, Message
    from sessions_app.core.session import Summary, SummaryBoundary

    session = await service.create_session(app=APP, user_id="bench")
    keys: dict[str, str] = {}
    clock = T0
    for turn in turns:
        clock += timedelta(seconds=30)
        event = Event(author=turn.speaker, message=Message(role=turn.role, content=turn.text), created_at=clock)  # type: ignore[arg-type]  # roles are user/assistant
        saved = await service.append_event(session, event)
        keys[saved.id] = turn.key
    last = session.events[-1]
    boundary = SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=last.seq or 0)
    await service.put_summary(session.key, Summary(text="(summary)", boundary=boundary))
    loaded = await service.get_session(session.key, event_limit=0)
    assert loaded is not None
    return loaded, keys


async def ours_in_memory(cases: list[Case]) -> dict[tuple[str, int], list[float]]:
    """recall@k per question category, from session_search on the in-memory index."""
    from sessions_app.core.inmemory import InMemorySessionService
    from sessions_app.core.recall import InMemoryRecallIndex, session_search

    service = InMemorySessionService()
    index = InMemoryRecallIndex(service)
    scores: dict[tuple[str, int], list[float]] = defaultdict(list)
    for case in cases:
        loaded, keys = await hidden_session(service, case.turns)
        for question in case.questions:
            for k in KS:
                answer = await session_search(
                    index, session=loaded, query=question.text, scope="current_hidden", top_k=k
                )
                found = [keys[r["event_id"]] for r in answer["results"]]
                scores[(question.category, k)].append(recall(question.evidence, found))
    return scores


def baseline(cases: list[Case], tokenize: Callable[[str], list[str]]) -> dict[tuple[str, int], list[float]]:
    from rank_bm25 import BM25Okapi

    scores: dict[tuple[str, int], list[float]] = defaultdict(list)
    for case in cases:
        bm25 = BM25Okapi([tokenize(t.text) or ["\u2205"] for t in case.turns])
        for question in case.questions:
            ranked = bm25.get_scores(tokenize(question.text))
            order = sorted(range(len(case.turns)), key=lambda i: -ranked[i])
            for k in KS:
                scores[(question.category, k)].append(recall(question.evidence, [case.turns[i].key for i in order[:k]]))
    return scores


def plain_tokens(text: str) -> list[str]:
    return _WORDS.findall(text.lower())


def our_tokens(text: str) -> list[str]:
    from sessions_app.core.recall import analyze

    return analyze(text)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def overall(scores: dict[tuple[str, int], list[float]], k: int) -> float:
    return mean([v for (cat, kk), vs in scores.items() if kk == k for v in vs])


def count(scores: dict[tuple[str, int], list[float]]) -> int:
    return sum(len(vs) for (cat, kk), vs in scores.items() if kk == KS[0])


def quality_table(rows: list[tuple[str, dict[tuple[str, int], list[float]]]]) -> str:
    cats = list(CATEGORIES.values())
    lines = [
        "| ranking | questions | "
        + " | ".join(f"R@{k}" for k in KS)
        + " | "
        + " | ".join(f"{c} R@5 / R@10" for c in cats)
        + " |",
        "|---|---:|" + "---:|" * len(KS) + "---:|" * len(cats),
    ]
    for name, scores in rows:
        per_cat = []
        for c in cats:
            per_cat.append(f"{mean(scores.get((c, 5), [])):.3f} / {mean(scores.get((c, 10), [])):.3f}")
        lines.append(
            f"| {name} | {count(scores)} | "
            + " | ".join(f"{overall(scores, k):.3f}" for k in KS)
            + " | "
            + " | ".join(per_cat)
            + " |"
        )
    return "\n".join(lines)


def simple_table(rows: list[tuple[str, dict[tuple[str, int], list[float]]]]) -> str:
    lines = ["| ranking | queries | " + " | ".join(f"span R@{k}" for k in KS) + " |", "|---|---:|" + "---:|" * len(KS)]
    for name, scores in rows:
        lines.append(f"| {name} | {count(scores)} | " + " | ".join(f"{overall(scores, k):.3f}" for k in KS) + " |")
    return "\n".join(lines)
