"""Issue 24, item 5: the seed's figures side by side, reproduced without a real model.

The seed article (`../shared/seed/000_dfbd5c70a44b6f42.txt`, section 11) reports three
setups measured with real models. What needs no model is reproduced here, with the
offline extractive summarizer (`runs.core.llm.offline.extractive_summary`) standing in
for the model summary and cl100k_base token counts (each message's text plus 4 tokens of
framing). Nothing is fitted: every split is reported as is.

MT-Bench-101 (`mtbench101.jsonl`, all 1,388 dialogues, 13 tasks, 2-7 turns; the seed used
917 cases, 9 tasks, DeepSeek-V3.2). Each turn is one answer call: long context sends
every earlier turn and the new user message; with summaries, a rolling summary is made
after every second turn (the previous summary and the turns since, extracted within the
budget) and each call sends the summary, the turns since it and the new message. The
answers are the data's own (the same completions in both). Figures: answer-call prompt
tokens (the seed's -24.47%), prompt tokens with the summary calls' own input counted as
a model summarizer would read it, total tokens (prompt + completion, the summaries being
completions; the seed's -12.89%), and the share of dialogues whose total grows (the
seed's 35.9%), by length. Budgets: 512 tokens (the demo's default) and 128.

LongMemEval (`onemem_longmemeval_oracle_first25.json`: the first 25 questions, oracle
sessions; the seed used the 70 single-session-user cases, about 50 sessions and 103k
tokens each). Every case's sessions go to one user (a haystack of all 25 cases'
sessions); each question searches them (scope other_sessions, top 5). Figures: hit rate
of an answer session in the top 5, and prompt tokens of summary + recall (two calls: the
summary and the question, then the same with the search answer as the model reads it)
against one long-context call with every session (the seed's -94.04%).

LoCoMo (`locomo_dev7.json`, categories 1-4; the seed's figures are answer F1 with a
model, 0.549 for session recall against 0.469 for long context, temporal 0.174): what is
reproducible without a model is whether recall brings the evidence: recall@5 of the
evidence turns with hybrid `session_search` (every LoCoMo session but the last behind the
summary boundary, scope current_hidden), by category, and prompt tokens of summary +
recall against long context, counted as for LongMemEval.

Intervals: 95% bootstrap over dialogues or questions (2,000 resamples). Run:
`python bench/seed_figures.py` (a few minutes); writes
`bench/results/seed_figures.json` and `.md`. `--limit N` takes the first N of each data set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/seed_figures.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from runs.core.context.governance import TIKTOKEN  # noqa: E402
from runs.core.llm.offline import extractive_summary  # noqa: E402
from sessions_app.core.events import Event, Message  # noqa: E402
from sessions_app.core.inmemory import InMemorySessionService  # noqa: E402
from sessions_app.core.recall import InMemoryRecallIndex, session_search  # noqa: E402
from sessions_app.core.session import Summary, SummaryBoundary  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results"
APP = "seed"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
RESAMPLES = 2000
FRAMING = 4  # tokens of role and separators per message
BUDGETS = (512, 128)
K = 5
SUMMARY_PROMPT = (
    "Update the running summary of this conversation with the new turns. Keep names, numbers, "
    "decisions and open questions; drop small talk."
)
SEED = {
    "mtbench_prompt": -0.2447,
    "mtbench_total": -0.1289,
    "mtbench_negative": 0.359,
    "lme_prompt": -0.9404,
    "locomo_recall_f1": 0.549,
    "locomo_long_context_f1": 0.469,
    "locomo_temporal_f1": 0.174,
}


def tokens(text: str) -> int:
    return TIKTOKEN.count_text(text) + FRAMING


def bootstrap(values: Sequence[float], *, seed: int = 24) -> tuple[float, float, float]:
    """The mean and its 95% bootstrap interval."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(RESAMPLES))
    return sum(values) / n, means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def bootstrap_change(pairs: Sequence[tuple[float, float]], *, seed: int = 24) -> tuple[float, float, float]:
    """The relative change of the sums (after / before - 1) and its 95% bootstrap interval."""
    rng = random.Random(seed)
    n = len(pairs)

    def change(sample: Sequence[tuple[float, float]]) -> float:
        return sum(a for _, a in sample) / max(1.0, sum(b for b, _ in sample)) - 1

    draws = sorted(change([pairs[rng.randrange(n)] for _ in range(n)]) for _ in range(RESAMPLES))
    return change(pairs), draws[int(0.025 * RESAMPLES)], draws[int(0.975 * RESAMPLES) - 1]


# -- MT-Bench-101 -----------------------------------------------------------------------------


def mtbench_dialogue(history: Sequence[dict[str, str]], budget: int) -> dict[str, int]:
    """One dialogue's token counts, long context against rolling summaries every two turns."""
    long_prompt = summary_prompt = roll_prompt = roll_completion = 0
    completion = sum(tokens(t["bot"]) for t in history)
    summary = ""
    covered = 0  # turns the summary stands for
    for t, turn in enumerate(history):
        earlier = sum(tokens(x["user"]) + tokens(x["bot"]) for x in history[:t])
        long_prompt += earlier + tokens(turn["user"])
        since = sum(tokens(x["user"]) + tokens(x["bot"]) for x in history[covered:t])
        summary_prompt += (tokens(summary) if summary else 0) + since + tokens(turn["user"])
        if (t + 1) % 2 == 0:
            # The seed rolls every second turn, the last included (its cost is what makes
            # short dialogues lose).
            new = "\n".join(f"user: {x['user']}\nassistant: {x['bot']}" for x in history[covered : t + 1])
            source = f"{summary}\n{new}" if summary else new
            roll_prompt += tokens(SUMMARY_PROMPT) + tokens(source)
            summary = extractive_summary(source, budget)
            roll_completion += tokens(summary)
            covered = t + 1
    return {
        "turns": len(history),
        "long_prompt": long_prompt,
        "summary_prompt": summary_prompt,
        "roll_prompt": roll_prompt,
        "roll_completion": roll_completion,
        "completion": completion,
    }


def mtbench(limit: int | None) -> dict[str, Any]:
    lines = (DATA / "mtbench101" / "mtbench101.jsonl").read_text().splitlines()[:limit]
    dialogues = [json.loads(line)["history"] for line in lines if line.strip()]
    out: dict[str, Any] = {"dialogues": len(dialogues), "budgets": {}}
    for budget in BUDGETS:
        rows = [mtbench_dialogue(h, budget) for h in dialogues]

        def total_long(r: dict[str, int]) -> float:
            return r["long_prompt"] + r["completion"]

        def total_summary(r: dict[str, int]) -> float:
            return r["summary_prompt"] + r["roll_prompt"] + r["completion"] + r["roll_completion"]

        def negative(selected: Callable[[dict[str, int]], bool], rows: list[dict[str, int]] = rows) -> float:
            chosen = [r for r in rows if selected(r)]
            return sum(total_summary(r) > total_long(r) for r in chosen) / max(1, len(chosen))

        out["budgets"][str(budget)] = {
            "answer_prompt_change": bootstrap_change([(r["long_prompt"], r["summary_prompt"]) for r in rows]),
            "prompt_change_with_rolls": bootstrap_change(
                [(r["long_prompt"], r["summary_prompt"] + r["roll_prompt"]) for r in rows]
            ),
            "total_change": bootstrap_change([(total_long(r), total_summary(r)) for r in rows]),
            "negative_share": bootstrap([float(total_summary(r) > total_long(r)) for r in rows]),
            "negative_share_2_turns": negative(lambda r: r["turns"] <= 2),
            "negative_share_4_plus": negative(lambda r: r["turns"] >= 4),
            "total_change_4_plus": bootstrap_change(
                [(total_long(r), total_summary(r)) for r in rows if r["turns"] >= 4]
            ),
        }
    return out


# -- LongMemEval -------------------------------------------------------------------------------


def _lme_turns(text: str) -> list[tuple[str, str]]:
    turns: list[tuple[str, str]] = []
    for line in text.split("\n"):
        for role in ("user", "assistant"):
            if line.startswith(f"{role}: "):
                turns.append((role, line[len(role) + 2 :]))
                break
        else:
            if turns and not line.startswith(("LongMemEval session", "Date:")):
                turns[-1] = (turns[-1][0], f"{turns[-1][1]}\n{line}")
    return turns


async def longmemeval(limit: int | None) -> dict[str, Any]:
    cases = json.loads((DATA / "longmemeval" / "onemem_longmemeval_oracle_first25.json").read_text())["cases"][:limit]
    service = InMemorySessionService()
    index = InMemoryRecallIndex(service)
    owner: dict[str, str] = {}
    history: list[str] = []
    for c, case in enumerate(cases):
        for episode in case["episodes"]:
            sid = episode["text"].split("\n", 1)[0].rsplit(" ", 1)[-1]
            stored = await service.create_session(app=APP, user_id="u", session_id=f"{c}:{sid}")
            owner[stored.id] = sid
            for role, text in _lme_turns(episode["text"]):
                await service.append_event(stored, Event(author=role, message=Message(role=role, content=text.strip())))  # type: ignore[arg-type]  # user/assistant
                history.append(f"{role}: {text.strip()}")
    long_context = sum(tokens(line) for line in history)
    summary = extractive_summary("\n".join(history), BUDGETS[0])
    current = await service.create_session(app=APP, user_id="u", session_id="now")
    hits: list[float] = []
    pairs: list[tuple[float, float]] = []
    for case in cases:
        question = case["queries"][0]["query"]
        answer = await session_search(index, session=current, query=question, scope="other_sessions", top_k=K)
        hits.append(
            float(any(owner[r["session_id"]] in case["metadata"]["answer_session_ids"] for r in answer["results"]))
        )
        first = tokens(summary) + tokens(question)
        pairs.append((long_context + tokens(question), first + first + tokens(json.dumps(answer, ensure_ascii=False))))
    sessions = sum(len(c["episodes"]) for c in cases)
    return {
        "questions": len(cases),
        "sessions": sessions,
        "long_context_tokens": long_context,
        "hit_rate@5": bootstrap(hits),
        "prompt_change": bootstrap_change(pairs),
    }


# -- LoCoMo ------------------------------------------------------------------------------------


async def locomo(limit: int | None) -> dict[str, Any]:
    from bench.recall import load_locomo

    cases, _ = load_locomo(DATA / "locomo" / "locomo_dev7.json")
    service = InMemorySessionService()
    index = InMemoryRecallIndex(service)
    by_category: dict[str, list[float]] = {}
    pairs: list[tuple[float, float]] = []
    for case in cases[:limit]:
        last_session = max(int(t.key[1:].split(":")[0]) for t in case.turns)
        hidden_keys = {t.key for t in case.turns if int(t.key[1:].split(":")[0]) < last_session}
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
        hidden = [e for e in session.events if keys[e.id] in hidden_keys]
        last = max(hidden, key=lambda e: e.seq or 0)
        hidden_text = "\n".join(f"{t.speaker}: {t.text}" for t in case.turns if t.key in hidden_keys)
        summary = extractive_summary(hidden_text, BUDGETS[0])
        boundary = SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=last.seq or 0)
        await service.put_summary(session.key, Summary(text=summary, boundary=boundary))
        loaded = await service.get_session(session.key, event_limit=0)
        assert loaded is not None
        long_context = sum(tokens(f"{t.speaker}: {t.text}") for t in case.turns)
        recent = sum(tokens(f"{t.speaker}: {t.text}") for t in case.turns if t.key not in hidden_keys)
        for question in case.questions:
            groups = [g & hidden_keys for g in question.evidence if g & hidden_keys]
            if not groups:
                continue
            answer = await session_search(index, session=loaded, query=question.text, top_k=K)
            found = {keys[r["event_id"]] for r in answer["results"]}
            reach = sum(1 for g in groups if g & found) / len(groups)
            by_category.setdefault(question.category, []).append(reach)
            by_category.setdefault("all", []).append(reach)
            first = tokens(summary) + recent + tokens(question.text)
            pairs.append(
                (long_context + tokens(question.text), first + first + tokens(json.dumps(answer, ensure_ascii=False)))
            )
    return {
        "questions": len(by_category.get("all", [])),
        "recall@5": {c: bootstrap(v) for c, v in sorted(by_category.items())},
        "prompt_change": bootstrap_change(pairs),
    }


# -- report ------------------------------------------------------------------------------------


def _pct(t: Sequence[float]) -> str:
    return f"{t[0]:+.2%} [{t[1]:+.2%}, {t[2]:+.2%}]"


def _ci(t: Sequence[float]) -> str:
    return f"{t[0]:.3f} [{t[1]:.3f}, {t[2]:.3f}]"


def report(result: dict[str, Any]) -> str:
    """One table, the seed's figure beside ours."""
    mt, lme, lc = result["mtbench"], result["longmemeval"], result["locomo"]
    rows = ["| data set and figure | seed (real model) | ours (offline, no model) | split |", "|---|---|---|---|"]
    split_mt = f"MT-Bench-101, all {mt['dialogues']} dialogues"
    for budget, b in mt["budgets"].items():
        tag = f"summary budget {budget}"
        rows += [
            f"| MT-Bench-101 answer-call prompt tokens, summaries vs long context ({tag}) | {SEED['mtbench_prompt']:+.2%} | {_pct(b['answer_prompt_change'])} | {split_mt} |",
            f"| MT-Bench-101 prompt tokens with the summary calls' input ({tag}) | - | {_pct(b['prompt_change_with_rolls'])} | {split_mt} |",
            f"| MT-Bench-101 total tokens ({tag}) | {SEED['mtbench_total']:+.2%} | {_pct(b['total_change'])} | {split_mt} |",
            f"| MT-Bench-101 dialogues that cost more ({tag}) | {SEED['mtbench_negative']:.1%} | {_ci(b['negative_share'])} (2 turns: {b['negative_share_2_turns']:.1%}; 4+: {b['negative_share_4_plus']:.1%}) | {split_mt} |",
            f"| MT-Bench-101 total tokens, dialogues of 4+ turns ({tag}) | -28% to -40% | {_pct(b['total_change_4_plus'])} | {split_mt} |",
        ]
    split_lme = f"LongMemEval oracle, first {lme['questions']} questions, haystack of their {lme['sessions']} sessions ({lme['long_context_tokens']:,} tokens)"
    rows += [
        f"| LongMemEval prompt tokens, summary + recall vs long context | {SEED['lme_prompt']:+.2%} | {_pct(lme['prompt_change'])} | {split_lme} |",
        f"| LongMemEval answer session in the top 5 (hit rate) | - (answer quality up on 3 metrics) | {_ci(lme['hit_rate@5'])} | {split_lme} |",
    ]
    split_lc = f"LoCoMo dev (locomo_dev7.json), {lc['questions']} questions with hidden evidence"
    rows += [
        f"| LoCoMo answer F1: session recall / long context | {SEED['locomo_recall_f1']} / {SEED['locomo_long_context_f1']} | needs a model: not reproduced | {split_lc} |",
        f"| LoCoMo evidence recall@5, all categories | answer F1 {SEED['locomo_recall_f1']} (session recall) | {_ci(lc['recall@5']['all'])} | {split_lc} |",
    ]
    for category, values in lc["recall@5"].items():
        if category != "all":
            seed_cell = f"answer F1 {SEED['locomo_temporal_f1']} (session recall)" if category == "temporal" else "-"
            rows.append(f"| LoCoMo evidence recall@5, {category} | {seed_cell} | {_ci(values)} | {split_lc} |")
    rows.append(
        f"| LoCoMo prompt tokens, summary + recall vs long context | - | {_pct(lc['prompt_change'])} | {split_lc} |"
    )
    return "\n".join(rows) + "\n\n95% bootstrap intervals over dialogues or questions in brackets."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N of each data set (a quick look)")
    args = parser.parse_args(argv)
    result = {
        "mtbench": mtbench(args.limit),
        "longmemeval": asyncio.run(longmemeval(args.limit)),
        "locomo": asyncio.run(locomo(args.limit)),
    }
    table = report(result)
    print(table)
    if args.limit is None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "seed_figures.json").write_text(json.dumps(result, indent=2) + "\n")
        (RESULTS / "seed_figures.md").write_text(
            "# The seed's figures side by side (issue 24, item 5)\n\n" + table + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
