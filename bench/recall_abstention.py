"""Abstention benchmark (issue 24, item 2): does `session_search` say "no match" when the
history does not hold the answer, without losing the answers it does hold?

Data and splits (fit / held out):
- LoCoMo (`locomo_dev7.json`) by conversation: fit on FIT_CONVERSATIONS, held out the rest;
- QMSum (`qmsum/test`) by meeting: in name order, even positions fit, odd ones held out.

The threshold (`NO_MATCH_BELOW`) is the largest value on a 0.05 grid that costs the
answerable questions of each data set's fit part at most 2 points of recall@5; every figure
is reported per data set and split with a 95% bootstrap interval over questions (1,000
resamples).

- answerable: LoCoMo categories 1-4 and QMSum specific queries, the whole conversation
  behind a summary boundary; recall@5 of the evidence turns (QMSum: a span counts when any
  of its turns is found) with abstention off and on (a no_match finds nothing).
- adversarial (LoCoMo category 5: the answer is in no turn; LoCoMo asks about the other
  speaker): a false hit is any answer with results.
- removed: each answerable question asked of its conversation without what holds its
  evidence (LoCoMo: the sessions D<k> of its evidence; QMSum: the turns of its spans); a
  false hit is any answer with results.

Bars: false hits at most 20% on adversarial and on removed, recall@5 drop at most 2 points.
Run: `.venv/bin/python bench/recall_abstention.py` (about 5 minutes on one core), or as
part of `bench/recall.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import recall_probe  # noqa: E402
from bench.recall import DEFAULT_DATA, Case, load_locomo, load_qmsum, recall  # noqa: E402

FIT_CONVERSATIONS = frozenset({"conv-26", "conv-30", "conv-41"})
MAX_FALSE_HITS = 0.20
MAX_RECALL_DROP = 0.02
GRID = [round(0.05 * i, 2) for i in range(0, 21)]
RESAMPLES = 1000
_SESSION = recall_probe.SESSION_OF_TURN


@dataclass
class Observation:
    """One question's search, abstention off: the best confidence and, for answerable
    questions, recall@5 of what came back."""

    dataset: str  # locomo | qmsum
    fit: bool  # in the split the threshold is fitted on
    conversation: str
    kind: str  # answerable | adversarial | removed
    confidence: float
    any_hit: bool
    recall: float = 0.0


async def observe(
    cases: list[Case], *, dataset: str, fit_names: frozenset[str], adversarial: dict[str, list[str]]
) -> list[Observation]:
    from sessions_app.core.recall import session_search

    out: list[Observation] = []
    async for asked in recall_probe.askings(cases, dataset=dataset, adversarial=adversarial):
        answer = await session_search(
            asked.index, session=asked.session, query=asked.query, top_k=5, min_confidence=0.0
        )
        found = [asked.keys[r["event_id"]] for r in answer["results"]] if asked.evidence is not None else []
        out.append(
            Observation(
                dataset=dataset,
                fit=asked.case.name in fit_names,
                conversation=asked.case.name,
                kind=asked.kind,
                confidence=answer.get("best_confidence", 0.0),
                any_hit=bool(answer["results"]),
                recall=recall(asked.evidence, found) if asked.evidence is not None else 0.0,
            )
        )
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
    """The largest grid value that costs each data set's fit questions at most 2 points."""
    datasets = {r.dataset for r in rows}

    def ok(t: float) -> bool:
        for dataset in datasets:
            answerable = [r for r in rows if r.fit and r.dataset == dataset and r.kind == "answerable"]
            if sum(recall_drop(answerable, t)) / len(answerable) > MAX_RECALL_DROP:
                return False
        return True

    return max(t for t in GRID if ok(t))


def bootstrap(values: Sequence[float], *, seed: int = 24) -> tuple[float, float, float]:
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(RESAMPLES))
    return sum(values) / n, means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def _verdict(met: bool) -> str:
    return "MET" if met else "MISSED"


def report(rows: list[Observation], names: dict[str, tuple[list[str], list[str]]]) -> tuple[str, list[bool]]:
    """The table; and the held-out verdicts, one per bar and data set."""
    from sessions_app.core.recall import NO_MATCH_BELOW

    threshold = fit(rows)
    lines = ["## Abstention: session_search no_match (issue 24, item 2)", ""]
    for dataset, (fitted, held) in names.items():
        lines.append(f"- {dataset}: fit on {', '.join(fitted)}; held out {', '.join(held)}.")
    lines += [
        "",
        f"Fitted threshold {threshold:.2f}; the code's NO_MATCH_BELOW is {NO_MATCH_BELOW:.2f} (figures below use it). "
        "95% bootstrap intervals over questions.",
        "",
        "| data | split | measure | n | value | 95% CI | bar | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts: list[bool] = []
    for dataset in names:
        for split, in_fit in (("fit", True), ("held-out", False)):
            part = [r for r in rows if r.dataset == dataset and r.fit == in_fit]
            answerable = [r for r in part if r.kind == "answerable"]
            base = sum(r.recall for r in answerable) / len(answerable)
            drop, lo, hi = bootstrap(recall_drop(answerable, NO_MATCH_BELOW))
            met = drop <= MAX_RECALL_DROP
            lines.append(
                f"| {dataset} | {split} | recall@5 drop (base {base:.3f}) | {len(answerable)} | {100 * drop:.1f} pts | "
                f"{100 * lo:.1f}-{100 * hi:.1f} | <= 2 pts | {_verdict(met)} |"
            )
            if not in_fit:
                verdicts.append(met)
            for kind in ("adversarial", "removed"):
                sub = [r for r in part if r.kind == kind]
                if not sub:
                    continue
                value, lo, hi = bootstrap(false_hits(sub, NO_MATCH_BELOW))
                met = value <= MAX_FALSE_HITS
                lines.append(
                    f"| {dataset} | {split} | false hits, {kind} | {len(sub)} | {100 * value:.1f}% | "
                    f"{100 * lo:.1f}-{100 * hi:.1f}% | <= 20% | {_verdict(met)} |"
                )
                if not in_fit:
                    verdicts.append(met)
    lines += ["", "Trade-off, held out (threshold: recall@5 drop; false hits adversarial / removed):", ""]
    for dataset in names:
        held = [r for r in rows if r.dataset == dataset and not r.fit]
        answerable = [r for r in held if r.kind == "answerable"]
        points = []
        for t in GRID[1:15:1]:
            drop = sum(recall_drop(answerable, t)) / len(answerable)
            rates = []
            for kind in ("adversarial", "removed"):
                sub = [r for r in held if r.kind == kind]
                rates.append(f"{100 * sum(false_hits(sub, t)) / len(sub):.0f}%" if sub else "-")
            points.append(f"{t:.2f}: {100 * drop:.1f} pts, {' / '.join(rates)}")
        lines.append(f"- {dataset}: " + "; ".join(points))
    return "\n".join(lines), verdicts


def run(data: Path = DEFAULT_DATA) -> str:
    locomo_path = data / "locomo" / "locomo_dev7.json"
    qmsum_path = data / "qmsum" / "test"
    locomo, _ = load_locomo(locomo_path)
    qmsum = load_qmsum(qmsum_path)
    qmsum_fit = frozenset(c.name for i, c in enumerate(sorted(qmsum, key=lambda c: c.name)) if i % 2 == 0)
    rows = asyncio.run(
        observe(locomo, dataset="locomo", fit_names=FIT_CONVERSATIONS, adversarial=load_adversarial(locomo_path))
    )
    rows += asyncio.run(observe(qmsum, dataset="qmsum", fit_names=qmsum_fit, adversarial={}))
    names = {
        "locomo": (sorted(FIT_CONVERSATIONS), sorted(c.name for c in locomo if c.name not in FIT_CONVERSATIONS)),
        "qmsum": (sorted(qmsum_fit), sorted(c.name for c in qmsum if c.name not in qmsum_fit)),
    }
    text, _ = report(rows, names)
    return f"{text}\n\nData: {locomo_path.name}, {qmsum_path.name}/ ({len(qmsum)} meetings)."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    print(run(args.data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
