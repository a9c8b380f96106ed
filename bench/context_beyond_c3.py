"""C3 of `bench/context_beyond.py`, projection manifest: 200-turn QMSum sessions, every call's
manifest checked, every hidden item loaded back with `session_load`."""

from __future__ import annotations

import json
import random
import statistics
from typing import Any

from bench.context_beyond_ledgers import APP, SESSION_LOAD, WINDOW, LedgerBuilder, count, summary_through, tool_output
from runs.core.context.compaction import OVERSIZED_RECOMMENDED, CompactionConfig
from runs.core.context.governance import ContextGovernance
from runs.core.context.manifest import HIDDEN, ManifestError
from runs.core.context.request import BuiltRequest, build_context
from sessions_app.core.events import Event
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import MAX_CONTENT_LIMIT, InMemoryRecallIndex, recall_text, session_load
from sessions_app.core.session import Session, Summary


async def manifest_session(name: str, turns: list[tuple[str, str]], rng: random.Random) -> dict[str, Any]:
    corpus = " ".join(u + " " + a for u, a in turns)
    ledger = LedgerBuilder()
    summary: Summary | None = None
    governance = ContextGovernance(
        compaction=CompactionConfig(oversized_tool_result_max_tokens=OVERSIZED_RECOMMENDED),
        manifest_check=True,
    )
    coverage: list[float] = []
    dropped = refused = calls = 0
    dispositions: dict[str, int] = {}
    last: BuiltRequest | None = None
    session = Session(app=APP, user_id="alice", id=name)
    for index in range(200):
        user, answer = turns[index % len(turns)]
        tools: list[tuple[str, str | None, bool]] = []
        if rng.random() < 0.5:
            cut = rng.random() < 0.05
            for k in range(rng.randint(1, 3)):
                failed = rng.random() < 0.1
                content = (
                    None
                    if cut and k == 0
                    else (json.dumps({"error": "timeout"}) if failed else tool_output(rng, corpus, index))
                )
                tools.append((rng.choice(["search_logs", "read_file", "lookup_ticket"]), content, failed))
        start = len(ledger.events)
        ledger.exchange(index, user, answer, tools=tools)
        # The runner's load: events after the boundary (its cut turn included), the newest 150.
        boundary = summary.last_seq if summary is not None else 0
        loaded = (
            [
                e
                for e in ledger.events
                if (e.seq or 0) > boundary or e.invocation_id == ledger.events[boundary - 1].invocation_id
            ]
            if boundary
            else list(ledger.events)
        )
        session = Session(
            app=APP,
            user_id="alice",
            id=name,
            events=loaded[-150:],
            last_seq=len(ledger.events),
            summaries={APP: summary} if summary is not None else {},
        )
        try:
            built = build_context(
                session,
                filter_key=APP,
                instruction="Answer from the meeting.",
                tools=[SESSION_LOAD],
                governance=governance,
                window=WINDOW,
                active_invocation_id=f"t{index}",
                current_unit=f"req:req-t{index}",
            )
        except ManifestError:
            refused += 1
            continue
        calls += 1
        assert built.manifest is not None
        coverage.append(built.manifest.coverage)
        dropped += len(built.manifest.dropped)
        for key, value in built.manifest.counts().items():
            dispositions[key] = dispositions.get(key, 0) + value
        last = built
        if built.sent_tokens > WINDOW // 2 and start > 0:
            # Roll the summary forward to the end of the previous turn (what a job would do).
            summary = summary_through(
                ledger.events, start, f"summary through seq {start}", (summary.version + 1) if summary else 1
            )
    assert last is not None and last.manifest is not None
    recovery = await recover(name, ledger.events, last)
    return {
        "session": name,
        "events": len(ledger.events),
        "calls": calls,
        "refused": refused,
        "coverage_min": min(coverage),
        "dropped": dropped,
        "dispositions": dispositions,
        **recovery,
    }


async def recover(name: str, events: list[Event], built: BuiltRequest) -> dict[str, Any]:
    """Load every hidden item of the last request back and compare it byte for byte."""
    service = InMemorySessionService()
    stored = await service.create_session(app=APP, user_id="alice", session_id=name)
    for event in events:
        await service.append_event(stored, event.replace(seq=None))
    index = InMemoryRecallIndex(service)
    manifest = built.manifest
    assert manifest is not None
    by_seq = {e.seq: e for e in events}
    sent = "\n".join(m.content for m in built.request.messages)
    hidden = exact = one_call = calls_only = verbatim_ok = verbatim = 0
    overhead: list[int] = []
    for entry in manifest.entries:
        event = by_seq[entry.seq]
        if entry.disposition == "verbatim":
            verbatim += 1
            verbatim_ok += event.text in sent
            continue
        if entry.disposition not in HIDDEN:
            continue
        hidden += 1
        if recall_text(event) is None:
            calls_only += 1  # a call message: its results load by tool_call_id; its arguments do not
            continue
        content, pages, returned = "", 0, 0
        while True:
            anchor: dict[str, Any] = {"seq": event.seq} if entry.disposition == "gap" else {"event_id": event.id}
            loaded = await session_load(
                index,
                session=stored,
                before=0,
                after=1,
                content_offset=len(content.encode()),
                content_limit=MAX_CONTENT_LIMIT,
                **anchor,
            )
            pages += 1
            [message] = [m for m in loaded["messages"] if m["event_id"] == event.id]
            # The cost of the anchor: the answer without the neighbour SPEC 5.3 always adds.
            returned += count(json.dumps({**loaded, "messages": [message]}, ensure_ascii=False))
            piece = str(message["content"])
            if (
                message.get("tool_call_id")
                and not message.get("content_offset")
                and piece.startswith(f"{message.get('tool_name')}: ")
            ):
                piece = piece[len(str(message.get("tool_name"))) + 2 :]
            content += piece
            if not message.get("content_truncated") or not piece:
                break
        exact += content == event.text
        one_call += pages == 1
        overhead.append(returned - count(event.text))
    return {
        "hidden": hidden,
        "recovered_exact": exact,
        "recovered_in_one_call": one_call,
        "hidden_call_messages": calls_only,
        "verbatim": verbatim,
        "verbatim_in_request": verbatim_ok,
        "load_overhead_tokens_p50": statistics.median(overhead) if overhead else 0,
        "load_overhead_tokens_max": max(overhead) if overhead else 0,
    }


def report_c3(rows: list[dict[str, Any]]) -> str:
    lines = [
        "## C3: projection manifest (3 x 200-turn QMSum sessions, window 8,192, history window 150 events)",
        "",
        "| session | events | calls | refused | min coverage | silent drops | hidden at end | byte-exact back | in one call | call msgs (results only) | load overhead p50/max tokens (anchor, all pages) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['session']} | {r['events']} | {r['calls']} | {r['refused']} | {r['coverage_min']:.0%} | {r['dropped']} | "
            f"{r['hidden']} | {r['recovered_exact']}/{r['hidden'] - r['hidden_call_messages']} | "
            f"{r['recovered_in_one_call']}/{r['hidden'] - r['hidden_call_messages']} | {r['hidden_call_messages']} | "
            f"{r['load_overhead_tokens_p50']:.0f}/{r['load_overhead_tokens_max']} |"
        )
    totals: dict[str, int] = {}
    for r in rows:
        for k, v in r["dispositions"].items():
            totals[k] = totals.get(k, 0) + v
    lines += ["", "Dispositions over all calls: " + ", ".join(f"{k} {v:,}" for k, v in sorted(totals.items()))]
    return "\n".join(lines)
