"""Context benchmark: what a model call sends over a long conversation, governance on vs off.

Each LoCoMo conversation (7 in `locomo_dev7.json`, 19-32 sessions and 10-20k tokens of
dialogue each) is played as one Agentsite session: speaker A's utterances are the user
messages, speaker B's the answers, which a `ScriptedModel` (context window 8,192) gives
back; every LoCoMo session opens with its date. Each exchange is one run (`Runner.start` +
`wait`), so one model call; the prompt of every call is counted with cl100k_base.

- `off`: no governance: every call shows the whole conversation so far.
- `on`: DESIGN 6's defaults: the rolling summary (offline extractive summarizer, trigger at
  max(0.5 x 8,192, 2,000) tokens, in-process jobs) and the projection of the summary plus
  the events after its boundary, tool-result compaction and pre-call compaction at
  max(0.7 x 8,192, 2,000). Summary jobs are awaited after each run, so the numbers do not
  depend on timing.

The data is read where it lies (`../shared/data/locomo/`, or `--data`), never copied. The
report (a markdown table) is printed and written to `bench/results/context_tokens.md`; the
per-call series go to `bench/results/context_tokens.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/context.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

DATA_DIR = ROOT.parent / "shared" / "data" / "locomo"
OUTPUT = ROOT / "bench" / "results" / "context_tokens.md"
WINDOW = 8192
APP = "bench"
INSTRUCTION = (
    "You are {b}, chatting with your friend {a}. Answer as {b} would, in a sentence or two, "
    "remembering what you both said before."
)
WINDOW_SIZE = 10  # early / late windows, in calls


@dataclass(frozen=True, kw_only=True)
class Exchange:
    user: str
    answer: str


def find_data(path: Path | None) -> Path:
    if path is not None:
        return path
    found = sorted(DATA_DIR.glob("*.json")) if DATA_DIR.is_dir() else []
    if not found:
        raise SystemExit(f"no LoCoMo data under {DATA_DIR}; pass --data PATH")
    return found[0]


def _utterance(turn: dict[str, Any]) -> str:
    text = str(turn.get("text", "")).strip()
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]" if caption else text


def exchanges(conversation: dict[str, Any]) -> list[Exchange]:
    """Speaker A's utterances as user messages, speaker B's as the answers, session by session."""
    a = conversation["speaker_a"]
    numbers = sorted(
        int(key.split("_")[1]) for key in conversation if key.startswith("session_") and not key.endswith("date_time")
    )
    out: list[Exchange] = []
    for number in numbers:
        header = f"[{conversation.get(f'session_{number}_date_time', f'session {number}')}]"
        user: list[str] = [header]
        answer: list[str] = []
        for turn in conversation[f"session_{number}"]:
            if turn["speaker"] == a:
                if answer:
                    out.append(Exchange(user=" ".join(user), answer=" ".join(answer)))
                    user, answer = [], []
                user.append(_utterance(turn))
            else:
                answer.append(_utterance(turn))
        if answer:
            out.append(Exchange(user=" ".join(user), answer=" ".join(answer)))
        elif len(user) > 1 and out:
            # The session ends on A: B's next answer is the next session's; keep A's words.
            out.append(Exchange(user=" ".join(user), answer="(no answer)"))
    return out


async def play(conversation: dict[str, Any], *, governed: bool) -> dict[str, Any]:
    from runs.core.agents.llm import LLMAgent
    from runs.core.context.governance import TIKTOKEN, ContextGovernance, extractive_summarizer
    from runs.core.llm.scripted import ScriptedModel, ScriptStep
    from runs.core.runner import Runner
    from runs.core.tokens import count_messages
    from sessions_app.core.inmemory import InMemorySessionService
    from sessions_app.core.session import SessionKey
    from sessions_app.core.summary import ContextThreshold, InProcessSummaryScheduler, SummaryEngine

    service = InMemorySessionService()
    model = ScriptedModel(name="bench-scripted-model", context_window=WINDOW)
    governance = scheduler = None
    if governed:
        engine = SummaryEngine(
            summarizer=extractive_summarizer(budget_tokens=512), checker=ContextThreshold(), tokenizer=TIKTOKEN
        )
        governance = ContextGovernance(summaries=engine)
        scheduler = InProcessSummaryScheduler(engine, service)
    agent = LLMAgent(
        name="friend",
        model=model,
        instruction=INSTRUCTION.format(a=conversation["speaker_a"], b=conversation["speaker_b"]),
        governance=governance,
    )
    runner = Runner(
        app=APP,
        agents=[agent],
        session_service=service,
        summary_scheduler=scheduler,
        load_after_summary=governed,
        history_event_limit=100_000,
    )
    session_id = None
    started = time.perf_counter()
    for exchange in exchanges(conversation):
        model.extend([ScriptStep.answer(exchange.answer, chunk_size=10_000)])
        handle = await runner.start(user_id="bench", session_id=session_id, message=exchange.user)
        session_id = handle.session_id
        record = await handle.wait()
        if record.status != "completed":
            raise RuntimeError(f"a run ended {record.status}: {record.error}")
        if scheduler is not None:
            await scheduler.join()
    elapsed = time.perf_counter() - started
    model.assert_consumed()
    key = SessionKey(app=APP, user_id="bench", session_id=session_id or "")
    ledger = await service.list_events(key, limit=1_000_000)
    precall = sum(
        1 for e in ledger if ((e.extensions.get("context") or {}).get("precall") or {}).get("status") == "advanced"
    )
    summary = await service.get_summary(key, filter_key=APP)
    await runner.close()
    return {
        "prompt_tokens": [count_messages(r.messages) for r in model.requests],
        "raw_tokens": [e.extensions["context"]["raw_tokens"] for e in ledger if "context" in e.extensions],
        "summaries": summary.version if summary is not None else 0,
        "summary_tokens": TIKTOKEN.count_text(summary.text) if summary is not None else 0,
        "precall_compactions": precall,
        "elapsed_s": round(elapsed, 2),
    }


def _stats(series: Sequence[int]) -> dict[str, float]:
    ordered = sorted(series)
    return {
        "calls": len(series),
        "first": series[0],
        "mean": round(statistics.fmean(series), 1),
        "p50": statistics.median(series),
        "p95": ordered[min(len(ordered) - 1, int(0.95 * (len(ordered) - 1) + 0.5))],
        "max": max(series),
        "last": series[-1],
        "early": round(statistics.fmean(series[:WINDOW_SIZE]), 1),
        "late": round(statistics.fmean(series[-WINDOW_SIZE:]), 1),
        "total": sum(series),
        "over_window": sum(1 for tokens in series if tokens > WINDOW),
    }


def report(results: dict[str, dict[str, Any]], data: Path) -> list[str]:
    lines = [
        "# Context benchmark: prompt tokens per model call, LoCoMo, governance on vs off",
        "",
        f"Data: `{data.name}` ({len(results)} conversations), read in place. Scripted model, window {WINDOW:,} "
        "tokens; tokens are cl100k_base counts of the messages of each model call (tool schemas apart: there are none).",
        "`off`: every call sends the whole conversation so far. `on`: DESIGN 6 defaults (rolling extractive "
        "summary triggered at 4,096 tokens, summary + events after its boundary, pre-call compaction at 5,734).",
        f"early / late: mean of the first / last {WINDOW_SIZE} calls; over window: calls whose prompt exceeds "
        f"{WINDOW:,} tokens (a real endpoint would refuse them).",
        "",
        "| conversation | calls | mode | mean | p50 | p95 | max | early | late | late/early | over window | total | summaries |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    totals = {"off": 0, "on": 0}
    for name, result in results.items():
        for mode in ("off", "on"):
            s = result[mode]["stats"]
            totals[mode] += s["total"]
            summaries = (
                f"{result[mode]['summaries']} ({result[mode]['precall_compactions']} pre-call)" if mode == "on" else "-"
            )
            lines.append(
                f"| {name} | {s['calls']} | {mode} | {s['mean']:,.0f} | {s['p50']:,.0f} | {s['p95']:,} | {s['max']:,} | "
                f"{s['early']:,.0f} | {s['late']:,.0f} | x{s['late'] / s['early']:.2f} | {s['over_window']} | "
                f"{s['total']:,} | {summaries} |"
            )
    saved = 1 - totals["on"] / totals["off"] if totals["off"] else 0.0
    lines += [
        "",
        f"All conversations: {totals['off']:,} prompt tokens off, {totals['on']:,} on: {saved:.1%} fewer.",
        "",
        "Prompt tokens at each tenth of the conversation (mean over conversations):",
        "",
        "| mode | " + " | ".join(f"{10 * i}%" for i in range(1, 11)) + " |",
        "| --- | " + " | ".join("---:" for _ in range(10)) + " |",
    ]
    for mode in ("off", "on"):
        deciles = []
        for i in range(1, 11):
            values = []
            for result in results.values():
                series = result[mode]["prompt_tokens"]
                values.append(series[min(len(series) - 1, max(0, round(i / 10 * len(series)) - 1))])
            deciles.append(statistics.fmean(values))
        lines.append(f"| {mode} | " + " | ".join(f"{d:,.0f}" for d in deciles) + " |")
    return lines


async def main_async(conversations: list[dict[str, Any]], limit: int | None) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for item in conversations[:limit]:
        name = item.get("sample_id") or f"conversation-{len(results) + 1}"
        result: dict[str, Any] = {}
        for mode in ("off", "on"):
            played = await play(item["conversation"], governed=mode == "on")
            played["stats"] = _stats(played["prompt_tokens"])
            result[mode] = played
            print(
                f"  {name} {mode}: {played['stats']['calls']} calls, mean {played['stats']['mean']:,.0f} tokens, "
                f"max {played['stats']['max']:,}, {played['elapsed_s']}s",
                file=sys.stderr,
                flush=True,
            )
        results[name] = result
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, help=f"LoCoMo JSON (default: the first file under {DATA_DIR})")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where the markdown report goes")
    args = parser.parse_args(argv)
    data = find_data(args.data)
    started = time.perf_counter()
    results = asyncio.run(main_async(json.loads(data.read_text()), args.conversations))
    lines = report(results, data)
    print("\n".join(lines))
    output = args.output.resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n")
    output.with_suffix(".json").write_text(
        json.dumps(
            {
                "benchmark": "context",
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "python": platform.python_version(),
                "data": data.name,
                "window": WINDOW,
                "elapsed_s": round(time.perf_counter() - started, 1),
                "conversations": results,
            }
        )
        + "\n"
    )
    shown = output.relative_to(ROOT) if output.is_relative_to(ROOT) else output
    print(
        f"\nResults written to {shown} and {shown.with_suffix('.json')} ({time.perf_counter() - started:.0f}s in all)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
