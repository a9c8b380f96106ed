"""Issue 24, item 3: fit the hybrid ranking's weights on ONE split, for
`bench/recall_ranking.py` to report on the other. Offline.

Fit split: LoCoMo dev conversations A (the first 4 by name) and QMSum test meetings A (the
first 18 by file name), as `bench/recall_ranking.py` splits them; the B parts are not read.
Each question's lexical pool (what `session_search` hands `hybrid_rank`) is captured once;
every point of a small grid of (RRF_K, NEIGHBOUR_WEIGHT, TRIGRAM_WEIGHT) re-ranks the pools
and is scored by recall@5 with abstention as the tool applies it (no results when the best
of the 5 is under `NO_MATCH_BELOW`). The objective is the mean of the two data sets'
recall@5 (each counts the same, whatever its number of questions). Prints the grid's best
points and the code's current point; writes `bench/results/recall_fit.json`.
Run: `python bench/recall_fit.py` (a few minutes); `--held-out` then scores the fitted and the
code's points on the B parts the same way (read only after the fit).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/recall_fit.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench import recall_probe  # noqa: E402
from bench.recall import Case, recall  # noqa: E402
from bench.recall_ranking import RESULTS, splits  # noqa: E402
from sessions_app.core.recall import ranking as ranking_module  # noqa: E402
from sessions_app.core.recall import search as search_module  # noqa: E402

K = recall_probe.K
GRID = {
    "RRF_K": (2, 5, 10, 20),
    "NEIGHBOUR_WEIGHT": (0.0, 0.15, 0.3, 0.5),
    "TRIGRAM_WEIGHT": (0.0, 0.05, 0.1, 0.2),
}
Pool = tuple[str, list[Any], set[str], list[set[str]], dict[str, str]]


async def capture(cases: list[Case]) -> list[Pool]:
    """(query, pool, the session's authors, evidence, event id -> turn key) per question."""
    return [(p.question.text, p.pool, p.authors, p.question.evidence, p.keys) async for p in recall_probe.pools(cases)]


def score(pools: list[Pool]) -> float:
    """Mean recall@5 of the pools re-ranked with the module's current constants."""
    total = 0.0
    for query, pool, authors, evidence, keys in pools:
        hits = search_module.hybrid_rank(query, pool)[:K]
        participants = {h.event.author for h in pool} | authors
        quiet = recall_probe.abstained(query, [(h.text, h.event.author) for h in hits], participants=participants)
        found = [] if quiet else [keys[h.event.id] for h in hits]
        total += recall(evidence, found)
    return total / max(1, len(pools))


def held_out(chosen: Sequence[str] = ()) -> int:
    """The fitted point, the code's, and a `chosen` one (RRF_K NEIGHBOUR_WEIGHT
    TRIGRAM_WEIGHT: the best fit point that keeps the behaviour tests passing) on the B
    parts (read only after the fit), scored the same way."""
    fitted = json.loads((RESULTS / "recall_fit.json").read_text())
    if chosen:
        fitted["chosen"] = dict(zip(GRID, (int(chosen[0]), float(chosen[1]), float(chosen[2])), strict=True))
    held = {dataset: list(parts.values())[1] for dataset, parts in splits().items()}
    pools = {dataset: asyncio.run(capture(cases)) for dataset, cases in held.items()}
    current = {name: getattr(ranking_module, name) for name in GRID}
    out = {}
    try:
        for label in ("current", "best", *(["chosen"] if chosen else [])):
            for name in GRID:
                setattr(ranking_module, name, fitted[label][name])
            out[label] = {dataset: score(p) for dataset, p in pools.items()}
            print(label, {n: fitted[label][n] for n in GRID}, out[label])
    finally:
        for name, value in current.items():
            setattr(ranking_module, name, value)
    fitted["held_out_B"] = out
    (RESULTS / "recall_fit.json").write_text(json.dumps(fitted, indent=2) + "\n")
    return 0


def main() -> int:
    if "--held-out" in sys.argv[1:]:
        return held_out(sys.argv[sys.argv.index("--held-out") + 1 :])
    fit = {dataset: parts[next(iter(parts))] for dataset, parts in splits().items()}  # the A parts only
    pools = {dataset: asyncio.run(capture(cases)) for dataset, cases in fit.items()}
    current = {name: getattr(ranking_module, name) for name in GRID}
    rows = []
    try:
        for values in itertools.product(*GRID.values()):
            for name, value in zip(GRID, values, strict=True):
                setattr(ranking_module, name, value)
            per = {dataset: score(p) for dataset, p in pools.items()}
            rows.append({**dict(zip(GRID, values, strict=True)), **per, "objective": sum(per.values()) / len(per)})
    finally:
        for name, value in current.items():
            setattr(ranking_module, name, value)
    rows.sort(key=lambda r: -r["objective"])
    now = next(r for r in rows if all(r[n] == current[n] for n in GRID))
    for r in [*rows[:8], now]:
        print(" ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "fit_split": "LoCoMo dev A (first 4 conversations) + QMSum test A (first 18 meetings)",
        "current": now,
        "best": rows[0],
        "grid": rows,
    }
    (RESULTS / "recall_fit.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
