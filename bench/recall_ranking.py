"""Issue 24, item 3 (measurement only): `session_search` ranking against its parts, per
split, with bootstrap intervals. Offline.

Setup: `bench/recall.py`'s quality setup (each conversation or meeting one session, every
turn behind the summary boundary, scope current_hidden; LoCoMo categories 1-4 and QMSum's
specific queries with their evidence turns). recall@5 per question of hybrid
`session_search`, `rank-bm25` over word tokens, and BM25 (rank-bm25) over the project's own
tokenizer (`sessions_app.core.recall.analyze`).

Splits, made here by sorted file or sample name: LoCoMo dev's 7 conversations, A = the first
4, B = the last 3; QMSum test's 35 meetings, A = the first 18, B = the last 17. No weight is
fitted by this script. Issue 24 refitted the hybrid ranking's weights on the A parts only
(`bench/recall_fit.py`; TRIGRAM_WEIGHT moved), so B is held out from that fit; the weights
set in issue 12 by hand on LoCoMo dev as a whole (all of LoCoMo A and B) stay as they were.

Bars (issue 24, item 3): on QMSum, `session_search` at least matches BM25 with its own
tokenizer on every split and is at least 10 points of recall@5 above `rank-bm25`; on LoCoMo
the margin over `rank-bm25` stays above 10 points. Intervals: 95% bootstrap over questions
of the paired differences (2,000 resamples). Run: `python bench/recall_ranking.py` (a few
minutes); writes `bench/results/recall_ranking.json` and `.md`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/recall_ranking.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench.context_scoped import bootstrap  # noqa: E402
from bench.recall import (  # noqa: E402
    Case,
    baseline,
    load_locomo,
    load_qmsum,
    our_tokens,
    ours_in_memory,
    plain_tokens,
)

DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results"
K = 5


def _flat(scores: dict[tuple[str, int], list[float]]) -> list[float]:
    # Every method walks cases and questions in the same order: the lists pair by position.
    return [v for (cat, k) in sorted(scores) if k == K for v in scores[(cat, k)]]


def measure(cases: list[Case]) -> dict[str, Any]:
    ours = _flat(asyncio.run(ours_in_memory(cases)))
    plain = _flat(baseline(cases, plain_tokens))
    own = _flat(baseline(cases, our_tokens))
    return {
        "questions": len(ours),
        "session_search": bootstrap(ours),
        "rank_bm25": bootstrap(plain),
        "bm25_own_tokenizer": bootstrap(own),
        "minus_rank_bm25": bootstrap([a - b for a, b in zip(ours, plain, strict=True)]),
        "minus_bm25_own": bootstrap([a - b for a, b in zip(ours, own, strict=True)]),
    }


def splits() -> dict[str, dict[str, list[Case]]]:
    locomo, _ = load_locomo(DATA / "locomo" / "locomo_dev7.json")
    locomo.sort(key=lambda c: c.name)
    qmsum = load_qmsum(DATA / "qmsum" / "test")  # sorted by file name
    return {
        "LoCoMo": {"A (first 4 conversations; fit)": locomo[:4], "B (last 3; held out)": locomo[4:]},
        "QMSum": {"A (first 18 meetings; fit)": qmsum[:18], "B (last 17; held out)": qmsum[18:]},
    }


def _ci(t: Sequence[float]) -> str:
    return f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"


def report(result: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| data set | split | questions | session_search | rank-bm25 | BM25, own tokenizer | minus rank-bm25 | minus BM25 own | bars |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, by_split in result.items():
        for split, r in by_split.items():
            margin = r["minus_rank_bm25"][0]
            if dataset == "QMSum":
                tie = " (a tie: the interval crosses 0)" if r["minus_bm25_own"][1] < 0 <= r["minus_bm25_own"][0] else ""
                bars = (
                    f"≥ BM25 own: {'MET' if r['minus_bm25_own'][0] >= 0 else 'MISSED'}{tie}; "
                    f"+10 over rank-bm25: {'MET' if margin >= 0.10 else 'MISSED'}"
                )
            else:
                bars = f"margin > 10 points: {'MET' if margin > 0.10 else 'MISSED'}"
            lines.append(
                f"| {dataset} | {split} | {r['questions']} | {_ci(r['session_search'])} | {_ci(r['rank_bm25'])} | "
                f"{_ci(r['bm25_own_tokenizer'])} | {_ci(r['minus_rank_bm25'])} | {_ci(r['minus_bm25_own'])} | {bars} |"
            )
    return "\n".join(lines) + "\n\nrecall@5; 95% bootstrap intervals over questions; differences are paired."


def main() -> int:
    result = {dataset: {name: measure(cases) for name, cases in parts.items()} for dataset, parts in splits().items()}
    table = report(result)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "recall_ranking.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "recall_ranking.md").write_text(
        "# Ranking against its parts, per split (issue 24, item 3)\n\n" + table + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
