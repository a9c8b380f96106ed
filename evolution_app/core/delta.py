"""The review delta (SPEC 9.2 step 2): what a session's ledger holds after the review cursor.

`scan_delta(events)` reads the complete events after the cursor once and keeps what the
evidence gate, the reviewers and the gates need: the tool calls paired with their results,
the user and assistant messages, a user correction, a tool error the agent recovered from,
and whether the agent wrote a SKILL.md itself. Each fact keeps the ledger event id (and
seq) it came from, so a candidate can cite its evidence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sessions_app.core.events import Event

# SPEC 9.2: a user message right after an assistant message, with one of these markers.
CORRECTION_MARKERS = (
    "no,",
    "no.",
    "wrong",
    "actually",
    "instead",
    "not what i",
    "that's incorrect",
    "that is incorrect",
    "please fix",
    "try again",
    "不对",
    "错了",
    "不是",
    "应该是",
    "重新",
)
FUTURE_MARKERS = ("next time", "going forward", "from now on", "by default", "reuse", "always", "以后", "下次", "默认")
WORKFLOW_MARKERS = (
    "workflow",
    "steps",
    "template",
    "format",
    "schema",
    "fields",
    "rule",
    "procedure",
    "流程",
    "步骤",
    "格式",
)
ERROR_MARKERS = ("error:", "failed:", "exception:", "traceback")
_SKILL_WRITE_TOOLS = re.compile(r"write|edit|patch|file|save", re.I)
_SHELL_TOOLS = re.compile(r"exec|shell|bash|run", re.I)
_SHELL_MUTATION = re.compile(r"cat\s*>|\btee\b|sed\s+-i|>\s*\S*skill\.md", re.I)

EvidenceKind = Literal["tool_call", "tool_result", "correction", "recovered_error", "user_request", "answer"]


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One ledger event a candidate rests on: its id and seq, what it shows, an excerpt."""

    event_id: str
    seq: int
    kind: EvidenceKind
    excerpt: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "seq": self.seq, "kind": self.kind, "excerpt": self.excerpt}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Evidence:
        return cls(
            event_id=str(data["event_id"]),
            seq=int(data.get("seq", 0)),
            kind=data.get("kind", "tool_call"),
            excerpt=str(data.get("excerpt", "")),
        )


@dataclass(frozen=True, kw_only=True)
class ToolStep:
    """One tool call of the delta and, once it came, its result."""

    name: str
    arguments: Mapping[str, Any]
    call_event_id: str
    call_seq: int
    result_event_id: str = ""
    result_seq: int = 0
    result: str = ""
    failed: bool = False

    @property
    def succeeded(self) -> bool:
        return bool(self.result_event_id) and not self.failed


@dataclass(frozen=True, kw_only=True)
class TranscriptEntry:
    """A message of the delta as the reviewer reads it."""

    event_id: str
    seq: int
    role: str
    author: str
    text: str = ""
    tool_name: str = ""
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, raw JSON arguments)


@dataclass(frozen=True, kw_only=True)
class ReviewDelta:
    """What is new in a session since the last review (see the module docstring)."""

    first_seq: int
    last_seq: int
    agent: str = ""
    transcript: tuple[TranscriptEntry, ...] = ()
    tool_steps: tuple[ToolStep, ...] = ()
    user_requests: tuple[TranscriptEntry, ...] = ()
    answers: tuple[TranscriptEntry, ...] = ()
    correction: Evidence | None = None
    recovered_error: Evidence | None = None
    wrote_skill: bool = False
    errors: tuple[str, ...] = field(default_factory=tuple)

    @property
    def tool_call_count(self) -> int:
        return len(self.tool_steps)

    @property
    def has_conversation(self) -> bool:
        return bool(self.user_requests or self.answers)

    @property
    def event_ids(self) -> frozenset[str]:
        ids = {e.event_id for e in self.transcript}
        return frozenset(ids)

    def evidence_for(self, event_id: str) -> Evidence | None:
        """The evidence record of a ledger event of this delta (None for an unknown id)."""
        for step in self.tool_steps:
            if step.call_event_id == event_id:
                return Evidence(
                    event_id=event_id,
                    seq=step.call_seq,
                    kind="tool_call",
                    excerpt=f"{step.name}({_short_args(step.arguments)})",
                )
            if step.result_event_id == event_id:
                return Evidence(
                    event_id=event_id,
                    seq=step.result_seq,
                    kind="tool_result",
                    excerpt=f"{step.name} -> {_clip(step.result, 160)}",
                )
        for special in (self.correction, self.recovered_error):
            if special is not None and special.event_id == event_id:
                return special
        for entry in self.transcript:
            if entry.event_id == event_id:
                kind: EvidenceKind = "user_request" if entry.role == "user" else "answer"
                return Evidence(event_id=event_id, seq=entry.seq, kind=kind, excerpt=_clip(entry.text, 160))
        return None

    @property
    def succeeded(self) -> bool:
        """The delta ends with an answer and no run error: the outcome the gates require."""
        return bool(self.answers) and not self.errors


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_args(arguments: Mapping[str, Any]) -> str:
    return _clip(", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items()), 120)


def _arguments(raw: str) -> Mapping[str, Any]:
    try:
        value = json.loads(raw or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def is_tool_error(text: str) -> bool:
    """A tool result that reports its own failure: the runner's `{"error": ...}` payload,
    or plain text that starts with an error marker (SPEC 9.2: "error:", "failed:",
    "exception:", "traceback"). Markers inside a successful result (log lines a search
    found) are not a failure of the tool."""
    try:
        data = json.loads(text)
    except ValueError:
        head = text.lstrip().lower()
        return head.startswith(ERROR_MARKERS) or "traceback (most recent call last)" in head[:2000]
    return isinstance(data, dict) and bool(data.get("error"))


def is_correction(text: str) -> bool:
    """SPEC 9.2: a user correction, or feedback about the workflow for next time."""
    lowered = " ".join(text.lower().split())
    if any(lowered.startswith(m) or f" {m}" in f" {lowered}" for m in CORRECTION_MARKERS):
        return True
    return any(m in lowered for m in FUTURE_MARKERS) and any(m in lowered for m in WORKFLOW_MARKERS)


def _wrote_skill(entry: TranscriptEntry) -> bool:
    for name, arguments in entry.tool_calls:
        if "skill.md" not in arguments.lower():
            continue
        if _SKILL_WRITE_TOOLS.search(name) or (_SHELL_TOOLS.search(name) and _SHELL_MUTATION.search(arguments)):
            return True
    return False


def scan_delta(events: Sequence[Event]) -> ReviewDelta:
    """The review delta of complete ledger events (in seq order)."""
    transcript: list[TranscriptEntry] = []
    steps: dict[str, ToolStep] = {}
    order: list[str] = []
    user_requests: list[TranscriptEntry] = []
    answers: list[TranscriptEntry] = []
    errors: list[str] = []
    correction: Evidence | None = None
    pending_error: Evidence | None = None
    recovered: Evidence | None = None
    last_conversational_role = ""
    agent = ""
    wrote_skill = False
    seqs = [e.seq or 0 for e in events]
    for event in events:
        if event.partial:
            continue
        seq = event.seq or 0
        if event.is_error and not event.is_runner_completion:
            errors.append(event.error.message if event.error is not None else "error")
            continue
        message = event.message
        if message is None:
            continue
        entry = TranscriptEntry(
            event_id=event.id,
            seq=seq,
            role=message.role,
            author=event.author,
            text=message.content,
            tool_name=message.tool_name or "",
            tool_calls=tuple((c.name, c.arguments) for c in message.tool_calls),
        )
        transcript.append(entry)
        if message.role == "assistant":
            agent = agent or event.author
            wrote_skill = wrote_skill or _wrote_skill(entry)
            for call in message.tool_calls:
                steps[call.id] = ToolStep(
                    name=call.name, arguments=_arguments(call.arguments), call_event_id=event.id, call_seq=seq
                )
                order.append(call.id)
            if message.content.strip() and not message.tool_calls:
                answers.append(entry)
            if pending_error is not None and recovered is None:
                recovered = pending_error  # SPEC 9.2: an error later followed by an assistant message
            last_conversational_role = "assistant"
        elif message.role == "tool":
            failed = is_tool_error(message.content)
            call_id = message.tool_call_id or ""
            asked = steps.get(call_id)
            if asked is not None:
                steps[call_id] = ToolStep(
                    name=asked.name,
                    arguments=asked.arguments,
                    call_event_id=asked.call_event_id,
                    call_seq=asked.call_seq,
                    result_event_id=event.id,
                    result_seq=seq,
                    result=message.content,
                    failed=failed,
                )
            if failed and pending_error is None:
                pending_error = Evidence(
                    event_id=event.id,
                    seq=seq,
                    kind="recovered_error",
                    excerpt=f"{message.tool_name or 'tool'} -> {_clip(message.content, 160)}",
                )
            # Tool messages never decide what "right after an assistant message" means.
        elif message.role == "user":
            if message.content.strip():
                user_requests.append(entry)
                if correction is None and last_conversational_role == "assistant" and is_correction(message.content):
                    correction = Evidence(
                        event_id=event.id, seq=seq, kind="correction", excerpt=_clip(message.content, 160)
                    )
            last_conversational_role = "user"
    return ReviewDelta(
        first_seq=min(seqs) if seqs else 0,
        last_seq=max(seqs) if seqs else 0,
        agent=agent,
        transcript=tuple(transcript),
        tool_steps=tuple(steps[i] for i in order),
        user_requests=tuple(user_requests),
        answers=tuple(answers),
        correction=correction,
        recovered_error=recovered,
        wrote_skill=wrote_skill,
        errors=tuple(errors),
    )


@dataclass(frozen=True, kw_only=True)
class ReviewPolicy:
    """The evidence gate (SPEC 9.2 step 4, DESIGN 6): review a delta only when it shows
    enough work to learn from. A trigger set to 0 / False is disabled."""

    min_tool_calls: int = 4
    on_correction: bool = True
    on_recovered_error: bool = True

    def decide(self, delta: ReviewDelta) -> tuple[bool, str]:
        """(review?, why): the triggers that fired, or why none did."""
        fired: list[str] = []
        if self.min_tool_calls and delta.tool_call_count >= self.min_tool_calls:
            fired.append(f"{delta.tool_call_count} tool calls")
        if self.on_correction and delta.correction is not None:
            fired.append(f"user correction (event {delta.correction.seq})")
        if self.on_recovered_error and delta.recovered_error is not None:
            fired.append(f"recovered tool error (event {delta.recovered_error.seq})")
        if fired:
            return True, "; ".join(fired)
        wanted = []
        if self.min_tool_calls:
            wanted.append(f">= {self.min_tool_calls} tool calls")
        if self.on_correction:
            wanted.append("a user correction")
        if self.on_recovered_error:
            wanted.append("a recovered tool error")
        return False, (
            f"below the evidence gate: {delta.tool_call_count} tool call(s), no correction, no recovered error "
            f"(needs {' or '.join(wanted) or 'a trigger; every trigger is disabled'})"
        )
