"""C6 of `bench/context_beyond.py`, compaction that cannot overflow: `ChunkedSummarizer` against a
surrogate model that refuses requests over its window, beside the other policies' rules."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.context_beyond_ledgers import count, mean
from runs.core.context.governance import chunked_summarizer
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse
from runs.core.llm.offline import extractive_summary
from sessions_app.core.events import Event, Message
from sessions_app.core.summary import SUMMARY_BUDGET_RATIO

C6_WINDOWS = (4096, 8192)
C6_KEEP_TURNS = 10
C6_FAIL_RATE = 0.1
LANGCHAIN_TOKENS = 4000


class _TooLong(Exception):
    def __str__(self) -> str:
        return "context_length_exceeded"


@dataclass
class SurrogateModel:
    """The extractive surrogate behind a model's limits: refuses a request over its window,
    fails a seeded share of calls (a 503), records every request it accepted."""

    context_window: int
    rng: random.Random
    fail_rate: float = 0.0
    accepted: list[str] = field(default_factory=list)
    calls: int = 0

    async def complete(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> str:
        self.calls += 1
        text = "\n".join(m.content for m in messages)
        if sum(count(m.content) + 3 for m in messages) > self.context_window:
            raise _TooLong()
        if self.rng.random() < self.fail_rate:
            raise RuntimeError("503 upstream")
        self.accepted.append(text)
        return extractive_summary(text.split("<conversation>")[-1], 300)


@dataclass
class _AsModel:
    """A `SurrogateModel` behind the run layer's `Model` contract (info + generate), as the
    composition root sees a provider; the model's 3 attempts stand in for the provider's retries."""

    surrogate: SurrogateModel

    def info(self) -> ModelInfo:
        return ModelInfo(name="surrogate", context_window=self.surrogate.context_window, provider="bench")

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        text = await self.surrogate.complete(request.messages)
        yield ModelResponse(id="s", partial=False, message=Message(role="assistant", content=text))


async def bounded_compaction(name: str, turns: list[str], window: int, rng: random.Random) -> dict[str, Any]:
    from sessions_app.core.summary import (
        ChunkedSummarizer,
        LLMSummarizer,
        SummaryRequest,
        Tokenizer,
        conversation_lines,
    )

    tokenizer = Tokenizer(count_text=count, count_message=lambda m: count(m.content) + 3)
    events = tuple(
        Event(author=t.split(":", 1)[0] or "speaker", message=Message(role="user", content=t), seq=i + 1)
        for i, t in enumerate(turns)
    )
    hidden = events[:-C6_KEEP_TURNS]
    lines = {e.seq: "\n".join(conversation_lines(e)) for e in hidden}
    request = SummaryRequest(filter_key="", previous=None, events=hidden)
    out: dict[str, Any] = {
        "meeting": name,
        "window": window,
        "hidden_events": len(hidden),
        "hidden_tokens": sum(count(t) for t in lines.values()),
    }

    model = SurrogateModel(context_window=window, rng=rng, fail_rate=C6_FAIL_RATE)
    try:
        await ChunkedSummarizer(model, tokenizer=tokenizer, attempts=5).summarize(request)
        failed = 0
    except Exception:
        failed = 1
    seen = "\n".join(model.accepted)
    out["ours"] = {
        "failures": failed,
        "coverage": sum(t in seen for t in lines.values()) / len(lines),
        "calls": model.calls,
    }

    # The demo's own path (agentsite.composition.build_summarizer): `chunked_summarizer`
    # over a run-layer Model, through the same adapter a provider model goes through.
    demo = SurrogateModel(context_window=window, rng=rng, fail_rate=C6_FAIL_RATE)
    try:
        await chunked_summarizer(_AsModel(demo), tokenizer=tokenizer).summarize(request)
        failed = 0
    except Exception:
        failed = 1
    seen = "\n".join(demo.accepted)
    out["demo wiring: chunked_summarizer(Model)"] = {
        "failures": failed,
        "coverage": sum(t in seen for t in lines.values()) / len(lines),
    }

    # SPEC 3.4 (the seed): one request; the longest prefix of events that fits.
    leaf = LLMSummarizer(SurrogateModel(context_window=window, rng=rng), tokenizer=tokenizer)
    _, last = leaf.standalone_request(request, leaf.budget())
    taken = len(hidden) if last is None else (last.seq or 0)
    out["seed: longest prefix"] = {"failures": 0, "coverage": taken / len(hidden)}
    # Everything in one request: refused when the hidden part is over the window.
    out["one request, no bound"] = {
        "failures": int(out["hidden_tokens"] > window),
        "coverage": 0.0 if out["hidden_tokens"] > window else 1.0,
    }

    def newest_within(budget: int) -> float:
        used = kept = 0
        for e in reversed(hidden):
            used += count(lines[e.seq]) + 1
            if used > budget:
                break
            kept += 1
        return kept / len(hidden)

    out["Codex: drop oldest until it fits"] = {
        "failures": 0,
        "coverage": newest_within(int(window * SUMMARY_BUDGET_RATIO)),
    }
    out["LangChain: last 4,000 tokens"] = {"failures": 0, "coverage": newest_within(LANGCHAIN_TOKENS)}
    return out


C6_POLICIES = (
    "ours",
    "demo wiring: chunked_summarizer(Model)",
    "seed: longest prefix",
    "one request, no bound",
    "Codex: drop oldest until it fits",
    "LangChain: last 4,000 tokens",
)


def report_c6(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"## C6: compaction that cannot overflow (QMSum test, {len(rows) // len(C6_WINDOWS)} meetings; all but the last "
        f"{C6_KEEP_TURNS} turns hidden; surrogate model refuses requests over its window and fails {C6_FAIL_RATE:.0%} of calls)",
        "",
        "| window | policy | compactions failed | summarizer coverage (mean / min) |",
        "|---|---|---|---|",
    ]
    for window in C6_WINDOWS:
        subset = [r for r in rows if r["window"] == window]
        for policy in C6_POLICIES:
            values = [r[policy] for r in subset]
            lines.append(
                f"| {window:,} | {policy} | {sum(v['failures'] for v in values)}/{len(values)} | "
                f"{mean([v['coverage'] for v in values]):.1%} / {min(v['coverage'] for v in values):.1%} |"
            )
    lines += [
        "",
        f"Hidden part per meeting: {mean([r['hidden_tokens'] for r in rows]):,.0f} tokens on average "
        f"(max {max(r['hidden_tokens'] for r in rows):,}); ours made {mean([r['ours']['calls'] for r in rows if r['window'] == 4096]):.1f} "
        "model calls per compaction at 4k (retries included).",
    ]
    return "\n".join(lines)
