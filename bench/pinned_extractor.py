"""Precision and recall of the conservative pin extractor (issue 24, item 1) on a labelled
set written for the purpose: bench/data/pinned_labels.jsonl, one sentence a line with its
language and whether it is a standing instruction to the assistant. English, Chinese,
French, German and Spanish; everyday chat as negatives (formulas, statements with "always"
or "never", questions, one-off advice). None of it comes from the benchmark data.

Prints precision and recall overall and per language, with 95% bootstrap intervals over
sentences, and the sentences it gets wrong. `.venv/bin/python bench/pinned_extractor.py`.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runs.core.context.pinned import extract_pins  # noqa: E402

LABELS = ROOT / "bench" / "data" / "pinned_labels.jsonl"
RESAMPLES = 1000


def load(path: Path = LABELS) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def precision_recall(rows: Sequence[tuple[bool, bool]]) -> tuple[float, float]:
    """(precision, recall) of (predicted, labelled) pairs; precision 1.0 when nothing is predicted."""
    tp = sum(1 for p, y in rows if p and y)
    predicted = sum(1 for p, _ in rows if p)
    positive = sum(1 for _, y in rows if y)
    return (tp / predicted if predicted else 1.0), (tp / positive if positive else 1.0)


def interval(rows: Sequence[tuple[bool, bool]], which: int, *, seed: int = 24) -> tuple[float, float]:
    rng = random.Random(seed)
    values = sorted(precision_recall([rows[rng.randrange(len(rows))] for _ in rows])[which] for _ in range(RESAMPLES))
    return values[int(0.025 * RESAMPLES)], values[int(0.975 * RESAMPLES) - 1]


def report(items: list[dict[str, object]]) -> str:
    scored = [(bool(extract_pins(str(i["text"]))), bool(i["pin"]), str(i["lang"]), str(i["text"])) for i in items]
    lines = [
        "## Pin extractor on bench/data/pinned_labels.jsonl (issue 24, item 1)",
        "",
        "| languages | n | instructions | precision (95% CI) | recall (95% CI) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for lang in ["all", *sorted({s[2] for s in scored})]:
        rows = [(p, y) for p, y, lg, _ in scored if lang in ("all", lg)]
        precision, recall = precision_recall(rows)
        (plo, phi), (rlo, rhi) = interval(rows, 0), interval(rows, 1)
        lines.append(
            f"| {lang} | {len(rows)} | {sum(y for _, y in rows)} | {precision:.2f} ({plo:.2f}-{phi:.2f}) "
            f"| {recall:.2f} ({rlo:.2f}-{rhi:.2f}) |"
        )
    wrong = [(p, t) for p, y, _, t in scored if p != y]
    lines += [
        "",
        "Wrong:" if wrong else "Nothing wrong.",
        *(f"- {'false pin' if p else 'missed'}: {t}" for p, t in wrong),
    ]
    return "\n".join(lines)


def main() -> int:
    print(report(load()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
