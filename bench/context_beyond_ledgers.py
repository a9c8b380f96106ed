"""The context benchmark's shared ground (`bench/context_beyond.py`): its constants, the ledgers
it builds from the shared data sets, the synthetic tool outputs and `mean`."""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.context import exchanges  # LoCoMo -> user/answer exchanges, shared
from runs.core.context.governance import TIKTOKEN
from runs.core.llm.base import ToolSpec
from runs.core.llm.offline import extractive_summary
from sessions_app.core.events import OBJECT_RUNNER_COMPLETION, OBJECT_TOOL_RESPONSE, Event, Message, ToolCall
from sessions_app.core.session import Summary, SummaryBoundary
from sessions_app.core.summary import render_conversation

ROOT = Path(__file__).resolve().parent.parent
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


def tool_output(rng: random.Random, source: str, index: int) -> str:
    tokens = int(min(20_000, max(500, rng.lognormvariate(math.log(2500), 1.0))))
    words = source.split() or ["data"]
    start = rng.randrange(len(words))
    out = [f"result {index}:"]
    while len(out) < tokens * 3 // 4:  # ~0.75 words per token of English text
        out.append(words[(start + len(out)) % len(words)])
    return " ".join(out)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
