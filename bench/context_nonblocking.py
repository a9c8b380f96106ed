"""Issue 12, C5: non-blocking compaction, measured with a model of realistic latency.

The real run path (`Runner` + `LLMAgent` with its governance, in-memory session service)
drives 200-turn sessions built from QMSum meetings as in C4 (`bench.context_beyond.c4_script`:
each turn a meeting line, half of them with a round of 1-3 tool calls whose outputs are
log-normal between 0.5k and 20k tokens; results over 8,192 tokens keep head and tail, as
in C4), in windows of 32k and 64k tokens (at 128k these sessions never reach a threshold:
old tool results become placeholders). The model answers after `CALL_S` (2 s) and the
summary model after `SUMMARY_S` (8 s), CONTEXT-ANCHORS section 7's figures; both are
slept at `--scale` of real time (0.1 by default: the extractive summariser's own work
on a 40k-token input takes up to about 0.7 s, which must fit in the slept summary time) and the waits are scaled back up. The
summariser is deterministic (the offline extractive one), so a summary is a function of its
input.

Per model call, from the pre-call report each call records (`extensions.context.precall`):
the added stall (what compaction held the call back: waits for a summary scaled back to
model seconds, plus the measured work of swaps and rebuilds), and whether the call
blocked (it waited for a summary). Policies, all on the same script:
- ours: a summary starts in the background at 0.55 of the window; the next call swaps it
  in; the synchronous 0.7 path stays as the fallback (`BackgroundCompactionConfig`); and
  the same with the soft threshold at 0.45;
- seed: SPEC 4.8, synchronous at 0.7;
- Codex: synchronous at 0.9 (auto-compaction at 90% of the window);
- Claude Code: synchronous at 0.835 (auto-compact near 83.5% of a 200k window).

Swap correctness: at every swap, the same summary is computed synchronously from the
session the call sees (the previous summary and the events up to the swapped summary's
boundary), the request rebuilt with it, and compared message for message with the request
the call sent. Events appended while a summary ran are counted, and each must be carried
by the swapped request (not summarised, not missing).

No database, no network: run `python bench/context_nonblocking.py`, or `--only c5` of
`bench/context_beyond.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import json
import random
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runs.core.agents.llm import LLMAgent  # noqa: E402
from runs.core.context.compaction import OVERSIZED_RECOMMENDED, CompactionConfig  # noqa: E402
from runs.core.context.governance import (  # noqa: E402
    TIKTOKEN,
    BackgroundCompactionConfig,
    ContextGovernance,
    PrecallConfig,
)
from runs.core.context.request import BuiltRequest, build_for_invocation  # noqa: E402
from runs.core.invocation import Invocation  # noqa: E402
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse  # noqa: E402
from runs.core.llm.offline import extractive_summary  # noqa: E402
from runs.core.runner import Runner  # noqa: E402
from runs.core.tools.base import Tool  # noqa: E402
from runs.core.tools.function import FunctionTool  # noqa: E402
from sessions_app.core.events import Message, ToolCall, filter_matches  # noqa: E402
from sessions_app.core.inmemory import InMemorySessionService  # noqa: E402
from sessions_app.core.summary import (  # noqa: E402
    ExtractiveSummarizer,
    SummaryEngine,
    SummaryRequest,
    SummaryResult,
)

CALL_S = 2.0
SUMMARY_S = 8.0
SCALE = 0.1
WINDOWS = (32_768, 65_536)
SUMMARY_BUDGET = 1024
APP = "bench"
POLICIES: dict[str, tuple[float, float | None]] = {
    # name: (synchronous pre-call ratio, soft ratio or None)
    "ours": (0.7, 0.55),
    "ours_soft_0.45": (0.7, 0.45),
    "seed": (0.7, None),
    "codex": (0.9, None),
    "claude_code": (0.835, None),
}
CARRIED = {"verbatim", "truncated", "placeholder", "withheld", "silent"}


class LatencyModel:
    """A model that answers the script after `call_s` seconds: a tool round where the turn
    has one, then the turn's answer."""

    def __init__(
        self, script: Sequence[tuple[str, str, list[tuple[str, str, bool]]]], *, window: int, call_s: float
    ) -> None:
        self.window = window
        self.call_s = call_s
        self._steps: list[Message] = []
        for index, (_, answer, tools) in enumerate(script):
            if tools:
                calls = tuple(
                    ToolCall(id=f"call-{index}-{n}", name="fetch_output", arguments=json.dumps({"key": f"{index}-{n}"}))
                    for n in range(len(tools))
                )
                self._steps.append(Message(role="assistant", content="", tool_calls=calls))
            self._steps.append(Message(role="assistant", content=answer))
        self.requests: list[ModelRequest] = []

    def info(self) -> ModelInfo:
        return ModelInfo(name="latency-model", context_window=self.window)

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        self.requests.append(request)
        await asyncio.sleep(self.call_s)
        message = self._steps.pop(0)
        yield ModelResponse(
            id=f"r{len(self.requests)}",
            partial=False,
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            model="latency-model",
        )


class SlowSummarizer:
    """The deterministic extractive summariser, answering `summary_s` seconds after it was
    asked (its own work counts towards them; `overrun_s` is how far it went over)."""

    def __init__(self, inner: ExtractiveSummarizer, summary_s: float) -> None:
        self.inner = inner
        self.summary_s = summary_s
        self.name = f"slow-{inner.name}"
        self.calls = 0
        self.overrun_s = 0.0

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        began = time.perf_counter()
        result = await self.inner.summarize(request)
        spent = time.perf_counter() - began
        self.overrun_s = max(self.overrun_s, spent - self.summary_s)
        await asyncio.sleep(max(0.0, self.summary_s - spent))
        return result


def extractive() -> ExtractiveSummarizer:
    return ExtractiveSummarizer(extractive_summary, budget_tokens=SUMMARY_BUDGET, name="extractive")


@dataclasses.dataclass
class SwapCheck:
    equal: bool
    appended: int
    carried: int


class CheckedAgent(LLMAgent):
    """The product agent, plus the bench's check at every swap (see the module docstring)."""

    checks: list[SwapCheck]

    async def _request(self, invocation: Invocation, step: int, instruction: str, specs: list[Any]) -> BuiltRequest:
        key = invocation.filter_key
        before = invocation.session.summaries.get(key)
        built = await super()._request(invocation, step, instruction, specs)
        report = invocation.state_of(self.name).precall or {}
        after = invocation.session.summaries.get(key)
        if report.get("background") in ("swapped", "waited") and after is not None:
            self.checks.append(await self._reference(invocation, before, after, built, instruction, specs))
        return built

    async def _reference(
        self, invocation: Invocation, before: Any, after: Any, built: BuiltRequest, instruction: str, specs: list[Any]
    ) -> SwapCheck:
        start = before.last_seq if before is not None else 0
        # From the ledger, as a synchronous summary reads it (the loaded session holds only
        # the newest `history_event_limit` events).
        ledger = await invocation.session_service.list_events(
            invocation.session.key, after_seq=start, limit=after.last_seq - start
        )
        events = tuple(
            e
            for e in ledger
            if (e.seq or 0) <= after.last_seq and filter_matches(e.filter_key, invocation.filter_key) and not e.partial
        )
        text = (
            await extractive().summarize(
                SummaryRequest(filter_key=invocation.filter_key, previous=before, events=events)
            )
        ).text
        reference_session = dataclasses.replace(
            invocation.session,
            summaries={
                **invocation.session.summaries,
                invocation.filter_key: dataclasses.replace(after, text=text.strip()),
            },
        )
        reference = build_for_invocation(
            dataclasses.replace(invocation, session=reference_session),
            instruction=instruction,
            tools=specs,
            governance=self.governance,
            window=built.window,
        )
        appended = [e.seq for e in invocation.session.events if (e.seq or 0) > after.last_seq]
        manifest = built.manifest
        carried = sum(
            1
            for seq in appended
            if manifest is not None and (entry := manifest.of(seq or 0)) is not None and entry.disposition in CARRIED
        )
        return SwapCheck(
            equal=reference.request.messages == built.request.messages, appended=len(appended), carried=carried
        )


def output_tools(outputs: dict[str, str]) -> list[Tool]:
    def fetch_output(key: str) -> str:
        """Fetch a scripted output.

        Args:
            key: which output
        """
        return outputs[key]

    return [FunctionTool(fetch_output)]


async def run_policy(
    script: Sequence[tuple[str, str, list[tuple[str, str, bool]]]], *, policy: str, window: int, scale: float
) -> dict[str, Any]:
    hard, soft = POLICIES[policy]
    summarizer = SlowSummarizer(extractive(), SUMMARY_S * scale)
    governance = ContextGovernance(
        summaries=SummaryEngine(summarizer=summarizer, tokenizer=TIKTOKEN),
        compaction=CompactionConfig(oversized_tool_result_max_tokens=OVERSIZED_RECOMMENDED),
        precall=PrecallConfig(ratio=hard),
        background=BackgroundCompactionConfig(ratio=soft, wait_s=600.0) if soft is not None else None,
        tokenizer=TIKTOKEN,
    )
    outputs = {f"{i}-{n}": content for i, (_, _, tools) in enumerate(script) for n, (_, content, _) in enumerate(tools)}
    model = LatencyModel(script, window=window, call_s=CALL_S * scale)
    agent = CheckedAgent(
        name="worker",
        model=model,
        instruction="Answer from the meeting.",
        tools=output_tools(outputs),
        governance=governance,
        max_steps=4,
    )
    agent.checks = []
    service = InMemorySessionService()
    runner = Runner(app=APP, agents=[agent], session_service=service, load_after_summary=True)
    session_id: str | None = None
    calls: list[dict[str, Any]] = []
    started = time.perf_counter()
    for user, _, _ in script:
        handle = await runner.start(user_id="bench", session_id=session_id, message=user, stream=True)
        session_id = handle.session_id
        events = [e async for e in handle.events()]
        for event in events:
            context = event.extensions.get("context") if not event.partial and event.role == "assistant" else None
            if context is not None:
                calls.append({"sent_tokens": context["sent_tokens"], **(context.get("precall") or {})})
    await agent.background_compactions.join()
    elapsed = time.perf_counter() - started
    stalls = [_modelled_stall(c, scale) for c in calls]
    soft_line, hard_line = int(window * POLICIES["ours"][1]), int(window * hard)  # type: ignore[operator]
    # A call that reached the pre-call threshold straight from under the soft one: no
    # background summary could have been started for it.
    jumps = sum(
        1
        for before, call in itertools.pairwise(calls)
        if before["sent_tokens"] < soft_line and call.get("tokens_before", call["sent_tokens"]) >= hard_line
    )
    blocking = [c for c in calls if c.get("wait_ms", 0) > 0]
    return {
        "policy": policy,
        "window": window,
        "calls": len(calls),
        "summaries": summarizer.calls,
        "stall_p50_s": _percentile(stalls, 50),
        "stall_p95_s": _percentile(stalls, 95),
        "stall_p99_s": _percentile(stalls, 99),
        "stall_max_s": max(stalls, default=0.0),
        "stall_total_s": sum(stalls),
        "blocking_calls": len(blocking),
        "blocking_share": len(blocking) / len(calls) if calls else 0.0,
        "jumps": jumps,
        "swaps": sum(1 for c in calls if c.get("background") == "swapped"),
        "waited": sum(1 for c in calls if c.get("background") == "waited"),
        "sync_fallbacks": sum(
            1
            for c in calls
            if c.get("status") in ("advanced", "not_advanced", "error") and c.get("background") != "waited"
        ),
        "peak_tokens": max((c["sent_tokens"] for c in calls), default=0),
        "over_window": sum(1 for c in calls if c["sent_tokens"] > window),
        "swap_checks": len(agent.checks),
        "swap_equal": sum(1 for c in agent.checks if c.equal),
        "appended_during_jobs": sum(c.appended for c in agent.checks),
        "appended_carried": sum(c.carried for c in agent.checks),
        "summary_overrun_s": round(summarizer.overrun_s, 3),
        "wall_s": round(elapsed, 1),
    }


def _modelled_stall(call: dict[str, Any], scale: float) -> float:
    """Seconds of model time: waits scaled back up, the rest (swap and rebuild work) as measured."""
    stall_ms, wait_ms = call.get("stall_ms", 0.0), call.get("wait_ms", 0.0)
    return ((stall_ms - wait_ms) + wait_ms / scale) / 1000


def _percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def run_c5(*, sessions: int = 1, windows: Sequence[int] = WINDOWS, scale: float = SCALE) -> list[dict[str, Any]]:
    from bench.context_beyond import SEED, c4_script, qmsum_sessions

    rows = []
    for index, (name, turns) in enumerate(qmsum_sessions(sessions)):
        script = c4_script(turns, random.Random(SEED * 7 + index))
        for window in windows:
            for policy in POLICIES:
                row = asyncio.run(run_policy(script, policy=policy, window=window, scale=scale))
                rows.append({"session": name, **row})
                print(
                    f"c5 {name} {window} {policy}: {row['calls']} calls, p95 {row['stall_p95_s']:.2f} s, "
                    f"blocking {row['blocking_share']:.1%}, {row['wall_s']} s",
                    file=sys.stderr,
                )
    return rows


def report_c5(rows: list[dict[str, Any]]) -> str:
    lines = [
        "## C5, non-blocking compaction",
        "",
        f"Model call {CALL_S:g} s, summary {SUMMARY_S:g} s (slept at a fraction of real time, waits scaled back). "
        "Stall: what compaction held a call back, in model seconds. Blocking: the call waited for a summary. "
        "Jumps: calls that reached the pre-call threshold straight from under 0.55 of the window in one step "
        "(a tool round), where no background summary could have started. Overrun: how far the extractive "
        "summariser's own work went past the slept summary time (real seconds; the stall counts it scaled up, "
        "so a stall over 8 s on a call that waited for one summary is that overrun).",
        "",
        "| window | policy | calls | summaries | stall p50 / p95 / p99 / max (s) | stall in all (s) | blocking calls | of which jumps | swaps (waited) | swap = synchronous | appended during jobs, carried | peak tokens | overrun (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for window in sorted({r["window"] for r in rows}):
        for policy in POLICIES:
            group = [r for r in rows if r["window"] == window and r["policy"] == policy]
            if not group:
                continue
            calls = sum(r["calls"] for r in group)
            blocking = sum(r["blocking_calls"] for r in group)
            checks = sum(r["swap_checks"] for r in group)
            lines.append(
                f"| {window:,} | {policy} | {calls} | {sum(r['summaries'] for r in group)} | "
                f"{max(r['stall_p50_s'] for r in group):.2f} / {max(r['stall_p95_s'] for r in group):.2f} / "
                f"{max(r['stall_p99_s'] for r in group):.2f} / "
                f"{max(r['stall_max_s'] for r in group):.2f} | {sum(r['stall_total_s'] for r in group):.0f} | "
                f"{blocking} ({blocking / calls:.1%}) | {sum(r['jumps'] for r in group)} | "
                f"{sum(r['swaps'] for r in group)} ({sum(r['waited'] for r in group)}) | "
                + (f"{sum(r['swap_equal'] for r in group)}/{checks}" if checks else "n/a")
                + f" | {sum(r['appended_carried'] for r in group)}/{sum(r['appended_during_jobs'] for r in group)} | "
                f"{max(r['peak_tokens'] for r in group):,} | {max(r['summary_overrun_s'] for r in group):.2f} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1, help="200-turn QMSum sessions")
    parser.add_argument("--scale", type=float, default=SCALE, help="share of real time the latencies are slept")
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    args = parser.parse_args(argv)
    rows = run_c5(sessions=args.sessions, windows=args.windows, scale=args.scale)
    text = report_c5(rows)
    print(text)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "context_nonblocking.md").write_text(text + "\n")
    (results / "context_nonblocking.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
