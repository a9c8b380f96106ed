"""Issue 12, C1: provenance-anchored summaries, measured on LoCoMo dev. Offline.

Setup (the same questions as `bench.context_beyond.recall_locomo`): the 7 LoCoMo dev
conversations, one session each, a turn per ledger event (seq = turn number); every
LoCoMo session but the last is hidden behind the summary boundary; the questions
(categories 1-4) with evidence in the hidden part.

The summary is built by the product path: each LoCoMo session is a block of turns
appended to the ledger, after which `summarize_session` runs with the product's trigger
(`ContextThreshold`, window 8,192: it fires when the new conversation passes 4,096
tokens); after the last hidden block a forced roll brings the boundary to the last hidden
turn, as a 0.7 pre-call compaction would. Summarizers: the offline demo's
`ExtractiveSummarizer` at three granularities (summary budget, transcript tokens per
section), and `ChunkedSummarizer` over the extractive surrogate model that C6 uses (the
model path; sections per request chunk).

Reachability@3: the summary's sections are ranked against the question by BM25
(rank-bm25 over word tokens of each section's text, the header left out); a question's
evidence group is reached when one of its turns has a seq inside the range of one of
the top 3 sections; a question scores the share of its groups reached (as recall@5
does). Search recall@5 and its loaded tokens are `recall_locomo`'s own figures (hybrid
`session_search`, top 5 hits loaded with `session_load(unit=True)`).

Loaded tokens (cl100k_base over each turn's text, counted once per distinct turn, as
`recall_locomo` counts them):
- sections, ranges: every turn inside the 3 ranges, what `session_load(section=...)`
  returns over all its pages;
- sections, texts: the 3 sections as the summary prints them (header and text), what
  the model reads to choose; it is in the request anyway;
- search: the turns of the 5 hits loaded as units.
The bar (CONTEXT-ANCHORS 7, C1): reachability@3 >= recall@5 with at most half of
search's loaded tokens. Run: `python bench/context_provenance.py` (about two minutes);
writes `bench/results/context_provenance.json` and `.md`.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/context_provenance.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from runs.core.context.governance import TIKTOKEN  # noqa: E402
from runs.core.llm.offline import extractive_summary  # noqa: E402
from sessions_app.core.events import Event, Message  # noqa: E402
from sessions_app.core.inmemory import InMemorySessionService  # noqa: E402
from sessions_app.core.summary import (  # noqa: E402
    ChunkedSummarizer,
    ContextThreshold,
    ExtractiveSummarizer,
    Summarizer,
    SummarySection,
    parse_sections,
    summarize_session,
)

DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results"
APP = "bench"
WINDOW = 8192
TOP_SECTIONS = 3
T0 = datetime(2026, 1, 1, tzinfo=UTC)
count = TIKTOKEN.count_text


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One way to build the summary: which summarizer and its granularity."""

    name: str
    kind: str  # "extractive" or "chunked"
    budget_tokens: int = 512
    section_tokens: int = 1024


SETTINGS: tuple[Setting, ...] = (
    Setting(name="extractive, demo default (512-token summary, 1,024-token sections)", kind="extractive"),
    Setting(
        name="extractive, 2,048-token summary, 256-token sections",
        kind="extractive",
        budget_tokens=2048,
        section_tokens=256,
    ),
    Setting(
        name="extractive, 4,096-token summary, 128-token sections",
        kind="extractive",
        budget_tokens=4096,
        section_tokens=128,
    ),
    Setting(name="chunked (surrogate model, 8k window, default budget)", kind="chunked"),
)


@dataclass
class _Surrogate:
    """The extractive surrogate as a `SummaryModel` (C6's, without failures): the summary
    of the `<conversation>` part of the request within 300 tokens."""

    context_window: int = WINDOW
    calls: int = 0

    async def complete(self, messages: Sequence[Message], *, tools: Sequence[Any] = ()) -> str:
        self.calls += 1
        text = "\n".join(m.content for m in messages)
        return extractive_summary(text.split("<conversation>")[-1].split("</conversation>")[0], 300)


def _summarizer(setting: Setting) -> Summarizer:
    if setting.kind == "chunked":
        return ChunkedSummarizer(_Surrogate(), tokenizer=TIKTOKEN)
    return ExtractiveSummarizer(
        extractive_summary,
        budget_tokens=setting.budget_tokens,
        section_tokens=setting.section_tokens,
        tokenizer=TIKTOKEN,
        name="offline-extractive",
    )


@dataclass
class _Tally:
    reach: list[float] = field(default_factory=list)
    range_tokens: list[int] = field(default_factory=list)
    text_tokens: list[int] = field(default_factory=list)
    sections: list[int] = field(default_factory=list)
    summary_tokens: list[int] = field(default_factory=list)
    range_turns: list[float] = field(default_factory=list)
    rolls: list[int] = field(default_factory=list)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


async def _summary_sections(
    setting: Setting, turns: Sequence[Any], hidden_keys: set[str]
) -> tuple[list[SummarySection], int, dict[str, int]]:
    """The sections of the summary built through the product path, the number of rolls,
    and each turn's seq."""
    service = InMemorySessionService()
    session = await service.create_session(app=APP, user_id="bench", session_id="c1")
    summarizer = _summarizer(setting)
    checker = ContextThreshold(window=WINDOW)
    seqs: dict[str, int] = {}
    rolls = 0
    block = None
    for n, turn in enumerate(t for t in turns if t.key in hidden_keys):
        this_block = turn.key[1:].split(":")[0]
        if block is not None and this_block != block:
            outcome = await summarize_session(
                service, session.key, filter_key="", summarizer=summarizer, checker=checker, tokenizer=TIKTOKEN
            )
            rolls += outcome.primary.reason == "updated"
        block = this_block
        saved = await service.append_event(
            session,
            Event(
                author=turn.speaker,
                message=Message(role=turn.role, content=turn.text),  # type: ignore[arg-type]  # user/assistant
                created_at=T0 + timedelta(seconds=30 * n),
            ),
        )
        seqs[turn.key] = saved.seq or 0
    # The last hidden block: a forced roll moves the boundary to the last hidden turn.
    outcome = await summarize_session(
        service, session.key, filter_key="", summarizer=summarizer, force=True, tokenizer=TIKTOKEN
    )
    assert outcome.primary.reason == "updated", outcome.primary
    rolls += 1
    summary = await service.get_summary(session.key, filter_key="")
    assert summary is not None and summary.last_seq == max(seqs.values())
    return list(parse_sections(summary.text)), rolls, seqs


async def run_setting(setting: Setting) -> dict[str, Any]:
    """Reachability@3 and loaded tokens of one summary setting over LoCoMo dev."""
    from rank_bm25 import BM25Okapi

    from bench.recall import load_locomo, plain_tokens

    cases, _ = load_locomo(DATA / "locomo" / "locomo_dev7.json")
    tally = _Tally()
    for case in cases:
        last_session = max(int(t.key[1:].split(":")[0]) for t in case.turns)
        hidden_keys = {t.key for t in case.turns if int(t.key[1:].split(":")[0]) < last_session}
        tokens = {t.key: count(t.text) for t in case.turns}
        sections, rolls, seqs = await _summary_sections(setting, case.turns, hidden_keys)
        by_seq = {seq: key for key, seq in seqs.items()}
        tally.rolls.append(rolls)
        tally.sections.append(len(sections))
        tally.summary_tokens.append(sum(count(f"{s.header}\n{s.text}") for s in sections))
        bm25 = BM25Okapi([plain_tokens(s.text) or ["\u2205"] for s in sections])
        for question in case.questions:
            groups = [g & hidden_keys for g in question.evidence if g & hidden_keys]
            if not groups:
                continue
            scores = bm25.get_scores(plain_tokens(question.text))
            # Ties go to the newer section, as recency breaks ties in session_search.
            top = sorted(range(len(sections)), key=lambda i: (-scores[i], -i))[:TOP_SECTIONS]
            chosen = [sections[i] for i in top]
            reached = {by_seq[q] for s in chosen for q in range(s.first_seq, s.last_seq + 1) if q in by_seq}
            tally.reach.append(sum(1 for g in groups if g & reached) / len(groups))
            tally.range_tokens.append(sum(tokens[k] for k in reached))
            tally.text_tokens.append(sum(count(f"{s.header}\n{s.text}") for s in chosen))
            tally.range_turns.append(len(reached))
    return {
        "setting": setting.name,
        "questions": len(tally.reach),
        "reachability@3": _mean(tally.reach),
        "range_tokens_per_question": _mean(tally.range_tokens),
        "section_text_tokens_per_question": _mean(tally.text_tokens),
        "turns_loaded_per_question": _mean(tally.range_turns),
        "sections_per_summary": _mean(tally.sections),
        "summary_tokens": _mean(tally.summary_tokens),
        "rolls_per_conversation": _mean(tally.rolls),
    }


async def run_c1(settings: Sequence[Setting] = SETTINGS, *, search: dict[str, Any] | None = None) -> dict[str, Any]:
    """C1 on LoCoMo dev: each setting's reachability@3 and loaded tokens, against hybrid
    search recall@5 and its unit-loaded tokens (`recall_locomo`, run here unless given)."""
    random.seed(12)
    if search is None:
        from bench.context_beyond import recall_locomo

        search = await recall_locomo()
    hybrid = search["rankings"]["ours: hybrid session_search"]
    baseline = {
        "recall@5": hybrid["recall@5"],
        "questions": hybrid["questions"],
        "unit_tokens_per_question": search["loaded_tokens_per_question"]["unit"],
    }
    rows = [await run_setting(s) for s in settings]
    for row in rows:
        row["meets_reach"] = row["reachability@3"] >= baseline["recall@5"]
        row["range_tokens_vs_search"] = row["range_tokens_per_question"] / baseline["unit_tokens_per_question"]
        row["text_tokens_vs_search"] = row["section_text_tokens_per_question"] / baseline["unit_tokens_per_question"]
        row["meets_bar_ranges"] = row["meets_reach"] and row["range_tokens_vs_search"] <= 0.5
        row["meets_bar_texts"] = row["meets_reach"] and row["text_tokens_vs_search"] <= 0.5
    return {"search": baseline, "settings": rows, "top_sections": TOP_SECTIONS, "window": WINDOW}


def report_c1(result: dict[str, Any]) -> str:
    """The C1 results as a markdown table."""
    base = result["search"]
    lines = [
        "| policy | reach (evidence in top 3 ranges / recall@5) | loaded tokens per question: ranges | section texts | sections per summary | summary tokens | bar met (ranges / texts) |",
        "|---|---|---|---|---|---|---|",
        f"| search: hybrid `session_search`, top 5 loaded as units | {base['recall@5']:.3f} | {base['unit_tokens_per_question']:.0f} (units) | - | - | - | - |",
    ]
    for row in result["settings"]:
        lines.append(
            f"| sections: {row['setting']} | {row['reachability@3']:.3f} | {row['range_tokens_per_question']:.0f} "
            f"({row['range_tokens_vs_search']:.1f}x) | {row['section_text_tokens_per_question']:.0f} "
            f"({row['text_tokens_vs_search']:.2f}x) | {row['sections_per_summary']:.1f} | {row['summary_tokens']:.0f} | "
            f"{'yes' if row['meets_bar_ranges'] else 'no'} / {'yes' if row['meets_bar_texts'] else 'no'} |"
        )
    lines.append("")
    lines.append(
        f"{base['questions']} questions. Bar: reach >= recall@5 ({base['recall@5']:.3f}) with at most half of "
        f"search's loaded tokens ({base['unit_tokens_per_question'] / 2:.0f})."
    )
    return "\n".join(lines)


def main() -> int:
    result = asyncio.run(run_c1())
    table = report_c1(result)
    print(table)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "context_provenance.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "context_provenance.md").write_text(
        "# C1: provenance-anchored summaries (LoCoMo dev)\n\n" + table + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
