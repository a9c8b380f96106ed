"""Issue 24, item 4: section-scoped recall (C1), measured on LoCoMo dev. Offline.

Setup: `bench.context_provenance`'s (the 7 LoCoMo dev conversations, one session each, a
turn per ledger event; every LoCoMo session but the last behind the summary boundary; the
summary built by the product path with the offline demo's `ExtractiveSummarizer`; the
questions of categories 1-4 with evidence in the hidden part). Split: LoCoMo dev
(`locomo_dev7.json`), the only LoCoMo split in `../shared/data`; nothing is fitted here
(the recall weights and thresholds are the code's, unchanged).

Per question, three ways to reach the evidence, each scored by reach (the share of its
evidence groups with a turn among the loaded ones, as recall@5 counts) and loaded tokens
(cl100k_base over each loaded turn's text, counted once per distinct turn):
- search (today's recall): hybrid `session_search` over the hidden part, the top 5 hits
  loaded as units (`session_load(unit=True)`);
- sections, whole ranges (today's C1 pointer): the summary's top 3 sections for the
  question (BM25 over their texts, as `context_provenance` ranks them), every turn in
  their ranges, what `session_load(section=...)` returns over all its pages;
- sections, scoped search (item 4): the same 3 sections, `session_search(section="F-L")`
  in each, the best 10 hits of the three (by confidence, then score; `--hits`, `--merge`)
  loaded as units: twice search's hits, the budget the token bar allows;
- sections picked by summary + probe (item 4's picking): `rank_sections` fuses the
  section texts' match with where one probe search (hybrid, its 10 best hits over the
  hidden part, abstention off) put its hits; the top 3 are searched and merged as above,
  and when no probe hit lies in them (weak evidence) search's top 5 are loaded instead.
  Nothing in the picking is fitted (the hybrid ranking's RRF constant); it was written
  before any run and looked at on the first conversation only before the full run.

Bars (issue 24, item 4), for each scoped policy: it loads at most 2x search's tokens per question, and
its reach is at least today's (search's recall@5, the reach recall has today without a
pointer). Its reach against the whole ranges is printed too (what the pointer alone
reaches, at many times the tokens). Intervals: bootstrap over questions (2,000 resamples,
95%), of the means and of the paired differences.

Run: `python bench/context_scoped.py` (a few minutes); writes
`bench/results/context_scoped.json` and `.md`. `--limit N` runs the first N conversations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/context_scoped.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench.context_provenance import (  # noqa: E402
    APP,
    DATA,
    RESULTS,
    SETTINGS,
    T0,
    TOP_SECTIONS,
    Setting,
    _summary_sections,
    count,
)
from sessions_app.core.events import Event, Message  # noqa: E402
from sessions_app.core.inmemory import InMemorySessionService  # noqa: E402
from sessions_app.core.recall import InMemoryRecallIndex, session_load, session_search  # noqa: E402
from sessions_app.core.recall.sections import SectionRef, rank_sections  # noqa: E402
from sessions_app.core.session import Summary, SummaryBoundary  # noqa: E402

K = 5
SCOPED_K = 10  # twice search's hits: the token bar's budget
RESAMPLES = 2000
SPLIT = "LoCoMo dev (locomo_dev7.json, categories 1-4, evidence in the hidden part)"
POLICIES = ("search", "whole_ranges", "scoped_search", "probed_scoped")
PROBE_K = 10  # the probe: one hybrid search's best hits over the hidden part (MAX_TOP_K)


def bootstrap(values: Sequence[float], *, seed: int = 24) -> tuple[float, float, float]:
    """The mean and its 95% bootstrap interval (resampling questions)."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(RESAMPLES))
    return sum(values) / n, means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


async def _units(index: InMemoryRecallIndex, session: Any, results: Sequence[dict[str, Any]], k: int = K) -> set[str]:
    loaded: set[str] = set()
    for r in results[:k]:
        window = await session_load(index, session=session, event_id=r["event_id"], unit=True)
        loaded.update(m["event_id"] for m in window["messages"])
    return loaded


def _merged(per_section: Sequence[Sequence[dict[str, Any]]], merge: str, k: int) -> list[dict[str, Any]]:
    """The sections' hits in one list: by confidence, then score, or round robin (the
    best section's best hit, then the next section's, ...: the sections' order is the pointer's)."""
    if merge == "round_robin":
        return [r for rank in range(k) for found in per_section for r in found[rank : rank + 1]]
    return sorted(
        (r for found in per_section for r in found), key=lambda r: (r["confidence"], r["score"]), reverse=True
    )


async def run(
    setting: Setting, limit: int | None = None, *, scoped_k: int = SCOPED_K, merge: str = "confidence"
) -> dict[str, list[float]]:
    """Per question: reach and loaded tokens of each policy (paired lists). The scoped
    policy loads `scoped_k` hits, merged across sections by confidence or round robin."""
    from rank_bm25 import BM25Okapi

    from bench.recall import load_locomo, plain_tokens

    cases, _ = load_locomo(DATA / "locomo" / "locomo_dev7.json")
    rows: dict[str, list[float]] = {f"{p}_{m}": [] for p in POLICIES for m in ("reach", "tokens")}
    for case in cases[:limit]:
        last_session = max(int(t.key[1:].split(":")[0]) for t in case.turns)
        hidden_keys = {t.key for t in case.turns if int(t.key[1:].split(":")[0]) < last_session}
        sections, _, seqs = await _summary_sections(setting, case.turns, hidden_keys)
        # The same turns in a searchable session (hidden ones first, so the same seqs),
        # the boundary where the summary's ends.
        service = InMemorySessionService()
        index = InMemoryRecallIndex(service)
        session = await service.create_session(app=APP, user_id="bench", session_id=case.name)
        keys: dict[str, str] = {}
        for n, turn in enumerate(case.turns):
            saved = await service.append_event(
                session,
                Event(
                    author=turn.speaker,
                    message=Message(role=turn.role, content=turn.text),  # type: ignore[arg-type]  # user/assistant
                    created_at=T0 + timedelta(seconds=30 * n),
                ),
            )
            keys[saved.id] = turn.key
            if turn.key in seqs:
                assert seqs[turn.key] == saved.seq, (turn.key, seqs[turn.key], saved.seq)
        last = max(seqs.values())
        last_event = next(e for e in session.events if e.seq == last)
        boundary = SummaryBoundary(cutoff_at=last_event.created_at, last_event_id=last_event.id, last_seq=last)
        await service.put_summary(
            session.key, Summary(text="\n\n".join(f"{s.header}\n{s.text}" for s in sections), boundary=boundary)
        )
        loaded = await service.get_session(session.key, event_limit=0)
        assert loaded is not None
        tokens = {t.key: count(t.text) for t in case.turns}
        by_seq = {seq: key for key, seq in seqs.items()}
        bm25 = BM25Okapi([plain_tokens(s.text) or ["\u2205"] for s in sections])
        for question in case.questions:
            groups = [g & hidden_keys for g in question.evidence if g & hidden_keys]
            if not groups:
                continue

            def score(
                policy: str, got: set[str], groups: list[set[str]] = groups, tokens: dict[str, int] = tokens
            ) -> None:
                rows[f"{policy}_reach"].append(sum(1 for g in groups if g & got) / len(groups))
                rows[f"{policy}_tokens"].append(sum(tokens[k] for k in got))

            answer = await session_search(index, session=loaded, query=question.text, top_k=K)
            score("search", {keys[e] for e in await _units(index, loaded, answer["results"])})
            scores = bm25.get_scores(plain_tokens(question.text))
            # Ties go to the newer section, as in context_provenance.
            chosen = [sections[i] for i in sorted(range(len(sections)), key=lambda i: (-scores[i], -i))[:TOP_SECTIONS]]
            score(
                "whole_ranges", {by_seq[q] for s in chosen for q in range(s.first_seq, s.last_seq + 1) if q in by_seq}
            )
            per_section = [
                (
                    await session_search(
                        index,
                        session=loaded,
                        query=question.text,
                        top_k=scoped_k,
                        section=f"{s.first_seq}-{s.last_seq}",
                    )
                )["results"]
                for s in chosen
            ]
            score(
                "scoped_search",
                {keys[e] for e in await _units(index, loaded, _merged(per_section, merge, scoped_k), scoped_k)},
            )
            # Item 4's picking: the summary's match fused with a probe of the hidden part
            # (one search, abstention off: a signal, not an answer); weak sections fall back.
            probe = await session_search(index, session=loaded, query=question.text, top_k=PROBE_K, min_confidence=0)
            refs = [SectionRef(first_seq=s.first_seq, last_seq=s.last_seq, text=s.text) for s in sections]
            choice = rank_sections(question.text, refs, [r["seq"] for r in probe["results"]], top=TOP_SECTIONS)
            if choice.weak:
                score("probed_scoped", {keys[e] for e in await _units(index, loaded, answer["results"])})
                continue
            probed = [
                (await session_search(index, session=loaded, query=question.text, top_k=scoped_k, section=s.range))[
                    "results"
                ]
                for s in choice.sections
            ]
            score(
                "probed_scoped",
                {keys[e] for e in await _units(index, loaded, _merged(probed, merge, scoped_k), scoped_k)},
            )
    return rows


def summarize(rows: dict[str, list[float]], setting: Setting) -> dict[str, Any]:
    """Means with intervals, the paired differences, and the two verdicts."""
    out: dict[str, Any] = {"setting": setting.name, "split": SPLIT, "questions": len(rows["search_reach"])}
    for key, values in rows.items():
        out[key] = bootstrap(values)
    ratio = [s / max(1.0, b) for s, b in zip(rows["scoped_search_tokens"], rows["search_tokens"], strict=True)]
    out["scoped_vs_search_reach_diff"] = bootstrap(
        [a - b for a, b in zip(rows["scoped_search_reach"], rows["search_reach"], strict=True)]
    )
    out["scoped_vs_ranges_reach_diff"] = bootstrap(
        [a - b for a, b in zip(rows["scoped_search_reach"], rows["whole_ranges_reach"], strict=True)]
    )
    out["tokens_ratio_of_means"] = out["scoped_search_tokens"][0] / out["search_tokens"][0]
    out["tokens_ratio_per_question_mean"] = bootstrap(ratio)
    out["met_tokens"] = out["tokens_ratio_of_means"] <= 2.0
    out["met_reach"] = out["scoped_search_reach"][0] >= out["search_reach"][0]
    # Item 4's picking (summary match fused with the probe, weak sections fall back).
    out["probed_vs_search_reach_diff"] = bootstrap(
        [a - b for a, b in zip(rows["probed_scoped_reach"], rows["search_reach"], strict=True)]
    )
    out["probed_tokens_ratio_of_means"] = out["probed_scoped_tokens"][0] / out["search_tokens"][0]
    out["probed_tokens_ratio_per_question_mean"] = bootstrap(
        [s / max(1.0, b) for s, b in zip(rows["probed_scoped_tokens"], rows["search_tokens"], strict=True)]
    )
    out["probed_met_tokens"] = out["probed_tokens_ratio_of_means"] <= 2.0
    out["probed_met_reach"] = out["probed_scoped_reach"][0] >= out["search_reach"][0]
    return out


def _ci(t: tuple[float, float, float], fmt: str = ".3f") -> str:
    return f"{t[0]:{fmt}} [{t[1]:{fmt}}, {t[2]:{fmt}}]"


def report(results: list[dict[str, Any]]) -> str:
    """The figures as markdown, MET or MISSED against each bar."""
    lines = [
        "| summary setting | policy | reach | loaded tokens per question |",
        "|---|---|---|---|",
    ]
    for r in results:
        for policy, label in (
            ("search", "search: hybrid, top 5 as units"),
            ("whole_ranges", "sections: top 3 whole ranges"),
            ("scoped_search", "sections: scoped search in the top 3, best hits as units"),
            ("probed_scoped", "sections picked by summary + probe (weak: search), scoped search, best hits as units"),
        ):
            lines.append(
                f"| {r['setting']} | {label} | {_ci(r[f'{policy}_reach'])} | {_ci(r[f'{policy}_tokens'], '.0f')} |"
            )
    lines.append("")
    for r in results:
        lines.append(
            f"**{r['setting']}** ({r['questions']} questions; split: {r['split']}; 95% bootstrap intervals over questions)"
        )
        lines.append(
            f"- tokens: scoped {r['scoped_search_tokens'][0]:.0f} / search {r['search_tokens'][0]:.0f} = "
            f"{r['tokens_ratio_of_means']:.2f}x (per-question ratio {_ci(r['tokens_ratio_per_question_mean'], '.2f')}); "
            f"bar at most 2x: {'MET' if r['met_tokens'] else 'MISSED'}"
        )
        lines.append(
            f"- reach: scoped minus search {_ci(r['scoped_vs_search_reach_diff'])}; bar at least search's: "
            f"{'MET' if r['met_reach'] else 'MISSED'}"
        )
        lines.append(
            f"- picked by summary + probe: tokens {r['probed_tokens_ratio_of_means']:.2f}x search's (per-question ratio "
            f"{_ci(r['probed_tokens_ratio_per_question_mean'], '.2f')}), bar at most 2x: "
            f"{'MET' if r['probed_met_tokens'] else 'MISSED'}; reach minus search {_ci(r['probed_vs_search_reach_diff'])}, "
            f"bar at least search's: {'MET' if r['probed_met_reach'] else 'MISSED'}"
        )
        lines.append(
            f"- reach: scoped minus whole ranges {_ci(r['scoped_vs_ranges_reach_diff'])} (not a bar: the ranges load "
            f"{r['whole_ranges_tokens'][0] / max(1.0, r['scoped_search_tokens'][0]):.1f}x the scoped tokens)"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations (a quick look)")
    parser.add_argument(
        "--all-settings", action="store_true", help="every summary setting of context_provenance, not only the demo's"
    )
    parser.add_argument("--hits", type=int, default=SCOPED_K, help="hits the scoped policy loads (default 10)")
    parser.add_argument(
        "--merge",
        choices=("confidence", "round_robin"),
        default="confidence",
        help="how the sections' hits are merged (default: by confidence, then score)",
    )
    args = parser.parse_args(argv)
    settings = SETTINGS if args.all_settings else SETTINGS[:1]
    results = [summarize(asyncio.run(run(s, args.limit, scoped_k=args.hits, merge=args.merge)), s) for s in settings]
    for r in results:
        r.update(scoped_hits=args.hits, merge=args.merge)
    table = report(results)
    print(table)
    if args.limit is None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "context_scoped.json").write_text(json.dumps(results, indent=2) + "\n")
        (RESULTS / "context_scoped.md").write_text("# C1: section-scoped recall (issue 24, item 4)\n\n" + table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
