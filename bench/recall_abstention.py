"""Abstention benchmark (issue 24, item 2): does `session_search` say "no match" when the
history does not hold the answer, without losing the answers it does hold?

Data: LoCoMo (`locomo_dev7.json`), split by conversation. The threshold
(`NO_MATCH_BELOW`) is fitted on FIT_CONVERSATIONS (the largest value on a 0.05 grid that
costs answerable questions at most 2 points of recall@5) and every figure is reported on
the other conversations, with a 95% bootstrap interval over questions (1,000 resamples).

- answerable: categories 1-4, the whole conversation behind a summary boundary; recall@5
  of the evidence turns with abstention off and on (a no_match counts as nothing found).
- adversarial: category 5 (the answer is in no turn: LoCoMo asks about the other speaker);
  a false hit is any answer with results.
- removed: each answerable question asked of its conversation without the sessions
  (D<k>) that hold its evidence; a false hit is any answer with results.

Bars: false hits at most 20% on adversarial and on removed, recall@5 drop at most 2 points.
Run: `.venv/bin/python bench/recall_abstention.py` (about 3 minutes on one core), or as
part of `bench/recall.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.recall import APP, DEFAULT_DATA, T0, Case, Turn, load_locomo, recall  # noqa: E402

FIT_CONVERSATIONS = frozenset({"conv-26", "conv-30", "conv-41"})
MAX_FALSE_HITS = 0.20
MAX_RECALL_DROP = 0.02
GRID = [round(0.05 * i, 2) for i in range(0, 21)]
RESAMPLES = 1000
_SESSION = re.compile(r"D(\d+):")


@dataclass
class Observation:
    """One question's search, abstention off: the best confidence and, for answerable
    questions, recall@5 of what came back."""

    conversation: str
    kind: str  # answerable | adversarial | removed
    confidence: float
    any_hit: bool
    recall: float = 0.0


async def _session(service: Any, turns: Sequence[Turn]) -> tuple[Any, dict[str, str]]:
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


async def observe(cases: list[Case], adversarial: dict[str, list[str]]) -> list[Observation]:
    from sessions_app.core.inmemory import InMemorySessionService
    from sessions_app.core.recall import InMemoryRecallIndex, session_search

    out: list[Observation] = []

    async def ask(session: Any, query: str) -> dict[str, Any]:
        return await session_search(index, session=session, query=query, top_k=5, min_confidence=0.0)

    for case in cases:
        service = InMemorySessionService()
        index = InMemoryRecallIndex(service)
        session, keys = await _session(service, case.turns)
        for question in case.questions:
            answer = await ask(session, question.text)
            found = [keys[r["event_id"]] for r in answer["results"]]
            out.append(Observation(
                conversation=case.name, kind="answerable", confidence=answer.get("best_confidence", 0.0),
                any_hit=bool(found), recall=recall(question.evidence, found),
            ))
        for text in adversarial.get(case.name, []):
            answer = await ask(session, text)
            out.append(Observation(
                conversation=case.name, kind="adversarial", confidence=answer.get("best_confidence", 0.0),
                any_hit=bool(answer["results"]),
            ))
        groups: dict[frozenset[str], list[str]] = {}
        for question in case.questions:
            sessions = frozenset(m.group(1) for group in question.evidence for k in group if (m := _SESSION.match(k)))
            groups.setdefault(sessions, []).append(question.text)
        for removed, texts in groups.items():
            kept = [t for t in case.turns if (m := _SESSION.match(t.key)) is None or m.group(1) not in removed]
            service = InMemorySessionService()
            index = InMemoryRecallIndex(service)
            partial, _ = await _session(service, kept)
            for text in texts:
                answer = await ask(partial, text)
                out.append(Observation(
                    conversation=case.name, kind="removed", confidence=answer.get("best_confidence", 0.0),
                    any_hit=bool(answer["results"]),
                ))
    return out


def load_adversarial(path: Path) -> dict[str, list[str]]:
    return {
        conv["sample_id"]: [qa["question"] for qa in conv["qa"] if qa.get("category") == 5]
        for conv in json.loads(path.read_text())
    }


def false_hits(rows: Sequence[Observation], threshold: float) -> list[float]:
    return [1.0 if r.any_hit and r.confidence >= threshold else 0.0 for r in rows]


def recall_drop(rows: Sequence[Observation], threshold: float) -> list[float]:
    """Per answerable question: recall@5 lost to abstention (0 unless it abstained)."""
    return [r.recall if r.confidence < threshold else 0.0 for r in rows]


def fit(rows: Sequence[Observation]) -> float:
    answerable = [r for r in rows if r.kind == "answerable"]
    ok = [t for t in GRID if sum(recall_drop(answerable, t)) / len(answerable) <= MAX_RECALL_DROP]
    return max(ok)


def bootstrap(values: Sequence[float], *, seed: int = 24) -> tuple[float, float, float]:
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(RESAMPLES))
    return sum(values) / n, means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def report(rows: list[Observation]) -> tuple[str, list[bool]]:
    fit_rows = [r for r in rows if r.conversation in FIT_CONVERSATIONS]
    held = [r for r in rows if r.conversation not in FIT_CONVERSATIONS]
    threshold = fit(fit_rows)
    from sessions_app.core.recall import NO_MATCH_BELOW

    names = sorted({r.conversation for r in held})
    lines = [
        "## Abstention: session_search no_match (issue 24, item 2)",
        "",
        f"Fitted on {', '.join(sorted(FIT_CONVERSATIONS))}: threshold {threshold:.2f} "
        f"(the code's NO_MATCH_BELOW is {NO_MATCH_BELOW:.2f}). Held out: {', '.join(names)}. "
        "95% bootstrap intervals over questions.",
        "",
        "| split | measure | n | value | 95% CI | bar | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts: list[bool] = []
    for split, part in (("fit", fit_rows), ("held-out", held)):
        answerable = [r for r in part if r.kind == "answerable"]
        base = sum(r.recall for r in answerable) / len(answerable)
        drop, lo, hi = bootstrap(recall_drop(answerable, NO_MATCH_BELOW))
        met = drop <= MAX_RECALL_DROP
        lines.append(
            f"| {split} | recall@5 drop (base {base:.3f}) | {len(answerable)} | {100 * drop:.1f} pts | "
            f"{100 * lo:.1f}-{100 * hi:.1f} | <= 2 pts | {'MET' if met else 'MISSED'} |"
        )
        if split == "held-out":
            verdicts.append(met)
        for kind in ("adversarial", "removed"):
            sub = [r for r in part if r.kind == kind]
            value, lo, hi = bootstrap(false_hits(sub, NO_MATCH_BELOW))
            met = value <= MAX_FALSE_HITS
            lines.append(
                f"| {split} | false hits, {kind} | {len(sub)} | {100 * value:.1f}% | {100 * lo:.1f}-{100 * hi:.1f}% "
                f"| <= 20% | {'MET' if met else 'MISSED'} |"
            )
            if split == "held-out":
                verdicts.append(met)
    lines += ["", "Trade-off on the held-out split (threshold: recall@5 drop, false hits adversarial / removed):", ""]
    answerable = [r for r in held if r.kind == "answerable"]
    for t in GRID[2:19:2]:
        drop = sum(recall_drop(answerable, t)) / len(answerable)
        adv = false_hits([r for r in held if r.kind == "adversarial"], t)
        rem = false_hits([r for r in held if r.kind == "removed"], t)
        lines.append(
            f"- {t:.2f}: {100 * drop:.1f} pts, {100 * sum(adv) / len(adv):.0f}% / {100 * sum(rem) / len(rem):.0f}%"
        )
    return "\n".join(lines), verdicts


def run(data: Path = DEFAULT_DATA) -> str:
    path = data / "locomo" / "locomo_dev7.json"
    cases, _ = load_locomo(path)
    rows = asyncio.run(observe(cases, load_adversarial(path)))
    text, _ = report(rows)
    return f"{text}\n\nData: {path.name}."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    print(run(args.data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
