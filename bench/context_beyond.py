"""Context governance beyond the anchors (issue 12): one measure per capability, offline.

No model and no database: the real request builder (`runs.core.context.request.build_context`:
projection, compaction, pinned block, manifest) over ledgers built from the shared data
sets, a deterministic surrogate summariser (`runs.core.llm.offline.extractive_summary`)
made lossy by dropping a seeded share of its sentences, the in-memory recall index for
`session_load`, and cl100k_base token counts. Data is read where it lies
(`../shared/data/`), never copied.

C3, projection manifest. Three 200-turn sessions built from QMSum meetings: each turn a
meeting line as the user message, half of them with a tool round of 1-3 parallel calls
(outputs log-normal between 0.5k and 20k tokens, 10% failing, 5% of rounds cut before
their results), then an answer. The summary rolls forward to the previous turn whenever
the request passes 0.5 of an 8,192 window; compaction runs with DESIGN 6's defaults plus
Pass 2 at 8,192 tokens; the runner's history window is 150 events (so some requests
miss events nobody summarised yet). Every call's manifest is checked (`check_manifest`
raises on a silent drop). At the end every hidden item is loaded back with
`session_load` and compared byte for byte.

C2, pinned intent. Every LoCoMo dev conversation (7) and QMSum test meeting (35; `--sessions N`
takes the first N of each):
20 directives and 5 later corrections are planted (as their own line) in user messages
at seeded positions in the first 85% of the session; 10 forced compactions, evenly
spaced up to 90% of the session, each summarising the previous summary plus the new
events with the extractive surrogate (600 tokens) and then dropping 50% of its sentences.
The final request of four policies is scored: directive survival (each rule in force, the
correction where there is one, verbatim in the request), stale directives (a superseded
rule in the request while its correction is not), and the tokens spent on intent as a
share of the window. Policies: ours (summary + pinned block), summary-only (Claude Code,
LangChain), Codex's local compaction (the newest user messages up to 20k tokens + the
summary), and the same Codex rule scaled to our window (20k of 272k = 7.4%).

C6, compaction that cannot overflow. The 35 QMSum test meetings (a turn per event), all
but the last 10 turns hidden, windows of 4k and 8k tokens; a surrogate model (extractive)
that refuses a request over its window and fails 10% of calls. Failures and summarizer
coverage (share of hidden events input whole to some accepted request) for
`ChunkedSummarizer` and, computed by their rules, the seed's prefix fallback (SPEC 3.4),
one unbounded request, Codex (drop the oldest until it fits) and LangChain (last 4,000).

C7, evidence-grade recall. LoCoMo dev (`bench.recall.load_locomo`): one session per
conversation, every LoCoMo session but the last behind a summary boundary, the questions
(categories 1-4) whose evidence is in the hidden part. recall@5 and MRR@10 of the
evidence turns for rank-bm25 over the hidden turns (word tokens), the seed's lexical
`session_search` and the hybrid one; then the top 5 hybrid hits loaded as whole units
and as the seed's fixed windows (1 before, 1 after): evidence tokens / loaded tokens.
LongMemEval (first 25, oracle): hit rate of the answer sessions among all 25 cases'
sessions, and false hits on an abstention proxy (see `recall_longmemeval`).

C6 also runs the demo's own path: `chunked_summarizer` (what `agentsite.composition`
builds for a model) over the surrogate behind the run layer's `Model` contract.

C4, cache-stable projection. Three 200-turn sessions from QMSum meetings with tool rounds
as in C3 (no failures cut), a model call after each user message and after each tool
round, window 131,072. Per call, the longest common token prefix with the previous
request (cl100k_base over each message serialised with its role, ids and calls), breaks
(the previous request is not a prefix of this one) by cause (a summary roll, a new
elision, other), and the modelled input cost with the common prefix at 0.1x. Policies,
all with a synchronous summary roll through the previous turn at 0.7 of the window
(Codex at 0.9, its own rule): ours (Pass 1 in batches of `clear_at_least` tokens; 16,384,
with a sweep), the seed's Pass 1, Codex (results truncated to 10k tokens at ingestion,
replacement history = newest user messages + summary), LangChain `ClearToolUsesEdit`
(over 0.5 of the window every result but the newest 3 becomes "[cleared]",
clear_at_least = 0). Every policy but Codex truncates results over 8,192 tokens (Pass 2).

Prints the tables and writes `bench/results/context_beyond.json` and `.md`; `--only`
runs chosen sections and keeps the others' figures from the last results file.
C5 (non-blocking compaction) and C1 (provenance-anchored summaries) live in
`bench/context_nonblocking.py` and `bench/context_provenance.py`, whose docstrings say
what they measure; they run here too. C1s (issue 24, item 4: section-scoped
`session_search` against search and whole section ranges, with bootstrap intervals and
MET/MISSED) lives in `bench/context_scoped.py`; `--only c1s` runs it alone. The other issue-24
recall figures run here too: C7r, the ranking's margins per split with intervals
(`bench/recall_ranking.py`, weights fitted on the A halves by `bench/recall_fit.py`), and
C7a, abstention fitted on some conversations and reported on the others
(`bench/recall_abstention.py`); `--only c1s c7r c7a` prints every issue-24 recall figure
with its interval, split and MET/MISSED in about ten minutes. Pins: the pin extractor's
precision and recall on the labelled set written for it (`bench/pinned_extractor.py`,
issue 24 item 1; C2 gives survival, stale and false pins on every file). Seed: the seed's
own figures beside ours (`bench/seed_figures.py`, item 5). So `--only c2 pins c1s c7r c7a seed`
prints every figure of issue 24. About forty minutes in all.

The sections live beside this script, one module each: `context_beyond_ledgers` (the shared
constants and ledgers), `context_beyond_c3`, `_c2`, `_c7`, `_c6` and `_c4`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/context_beyond.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench.context_beyond_c2 import pinned_session, report_c2  # noqa: E402
from bench.context_beyond_c3 import manifest_session, report_c3  # noqa: E402
from bench.context_beyond_c4 import c4_script, report_c4, run_c4  # noqa: E402
from bench.context_beyond_c6 import C6_WINDOWS, bounded_compaction, report_c6  # noqa: E402
from bench.context_beyond_c7 import recall_locomo, recall_longmemeval, report_c7  # noqa: E402
from bench.context_beyond_ledgers import RESULTS, SEED, WINDOW, locomo_sessions, qmsum_sessions  # noqa: E402
from bench.context_nonblocking import report_c5, run_c5  # noqa: E402
from bench.context_provenance import report_c1, run_c1  # noqa: E402

# Other benchmarks import these from here (bench.context_nonblocking, bench.context_provenance).
__all__ = ["SEED", "c4_script", "main", "qmsum_sessions", "recall_locomo"]


SECTIONS = ("c3", "c2", "pins", "c6", "c4", "c7", "c5", "c1", "c1s", "c7r", "c7a", "seed")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sessions",
        type=int,
        default=None,
        help="LoCoMo conversations and QMSum meetings for C2, the first N of each (default: every file, 7 and 35)",
    )
    parser.add_argument("--c4-sessions", type=int, default=3, help="200-turn QMSum sessions for C4")
    parser.add_argument(
        "--c5-sessions", type=int, default=1, help="200-turn QMSum sessions for C5 (each about 5 minutes)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="run only these sections; the others keep their figures from the last results file",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    path = RESULTS / "context_beyond.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.exists() and set(args.only) != set(SECTIONS) else {}
    results.update({"seed": SEED, "window": WINDOW})

    if "c3" in args.only:
        results["c3"] = [
            asyncio.run(manifest_session(name, turns, random.Random(SEED + i)))
            for i, (name, turns) in enumerate(qmsum_sessions(3))
        ]
    if "c2" in args.only:
        c2 = []
        every = args.sessions if args.sessions is not None else 10_000
        for data, sessions in (("locomo", locomo_sessions(every)), ("qmsum", qmsum_sessions(every))):
            for i, (name, turns) in enumerate(sessions):
                c2.append({"data": data, **pinned_session(name, turns, random.Random(SEED * 100 + i))})
        results["c2"] = c2
    if "pins" in args.only:
        # Issue 24, item 1: the conservative extractor on the labelled set written for it.
        from bench import pinned_extractor

        results["pins"] = pinned_extractor.report(pinned_extractor.load())
    if "c6" in args.only:
        c6 = []
        meetings = qmsum_sessions(100)
        for window in C6_WINDOWS:
            for i, (name, turns) in enumerate(meetings):
                flat = [t for pair in turns for t in pair]
                c6.append(asyncio.run(bounded_compaction(name, flat, window, random.Random(SEED * 1000 + i))))
        results["c6"] = c6
    if "c4" in args.only:
        results["c4"] = run_c4(args.c4_sessions)
    if "c7" in args.only:
        results["c7"] = {"locomo": asyncio.run(recall_locomo()), "longmemeval": asyncio.run(recall_longmemeval())}
    if "c5" in args.only:
        results["c5"] = run_c5(sessions=args.c5_sessions)
    if "c1" in args.only:
        results["c1"] = asyncio.run(run_c1(search=results.get("c7", {}).get("locomo")))
    if "c1s" in args.only:
        # Issue 24, item 4: section-scoped session_search, the demo's summary setting.
        from bench import context_scoped

        setting = context_scoped.SETTINGS[0]
        results["c1s"] = [context_scoped.summarize(asyncio.run(context_scoped.run(setting)), setting)]
    if "c7r" in args.only:
        # Issue 24, item 3: the ranking's margins per split (weights fitted on the A halves).
        from bench import recall_ranking

        results["c7r"] = {
            dataset: {name: recall_ranking.measure(cases) for name, cases in parts.items()}
            for dataset, parts in recall_ranking.splits().items()
        }
    if "c7a" in args.only:
        # Issue 24, item 2: abstention, fitted on some conversations and meetings, reported on the rest.
        from bench.recall_abstention import run as abstention

        results["c7a"] = abstention()
    if "seed" in args.only:
        # Issue 24, item 5: the seed's own figures beside ours (bench/seed_figures.py).
        from bench import seed_figures

        results["seed_figures"] = {
            "mtbench": seed_figures.mtbench(None),
            "longmemeval": asyncio.run(seed_figures.longmemeval(None)),
            "locomo": asyncio.run(seed_figures.locomo(None)),
        }
    elapsed = time.perf_counter() - started
    header = (
        f"# Context governance beyond the anchors (issue 12)\n\n{datetime.now(UTC):%Y-%m-%d}, "
        f"Python {platform.python_version()}, {elapsed:.0f} s for {', '.join(args.only)}, seed {SEED}. Offline: surrogate "
        "summariser, in-memory recall, cl100k_base counts."
    )
    parts = [header]
    for key, report in (("c3", report_c3), ("c2", report_c2), ("c6", report_c6), ("c4", report_c4)):
        if key in results:
            parts.append(report(results[key]))
        if key == "c2" and "pins" in results:
            parts.append(results["pins"])  # its report opens with its own heading
    if "c7" in results:
        parts.append(report_c7(results["c7"]["locomo"], results["c7"]["longmemeval"]))
    if "c5" in results:
        parts.append(report_c5(results["c5"]))
    if "c1" in results:
        parts.append("## C1, provenance-anchored summaries\n\n" + report_c1(results["c1"]))
    if "c1s" in results:
        from bench.context_scoped import report as report_c1s

        parts.append("## C1, section-scoped recall (issue 24, item 4)\n\n" + report_c1s(results["c1s"]))
    if "c7r" in results:
        from bench.recall_ranking import report as report_c7r

        parts.append("## C7, ranking against its parts, per split (issue 24, item 3)\n\n" + report_c7r(results["c7r"]))
    if "c7a" in results:
        parts.append(results["c7a"])  # its report opens with its own "## Abstention" heading
    if "seed_figures" in results:
        from bench.seed_figures import report as report_seed

        parts.append("## The seed's figures side by side (issue 24, item 5)\n\n" + report_seed(results["seed_figures"]))
    text = "\n\n".join(parts) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "context_beyond.md").write_text(text)
    path.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
