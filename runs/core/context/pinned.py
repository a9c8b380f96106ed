"""Pinned intent (issue 12, C2): the user's directives survive every summary and compaction.

A user message may carry instructions that must hold for the rest of the session ("Always
answer in French.", "Never restart the payments service.", "Use PostgreSQL instead of
MySQL.", "Actually, write dates as DD/MM/YYYY."). A summarizer, lossy by nature, may drop
them; users of every anchor agent report exactly that. Here they become typed
`PinnedRecord`s, each with the event it came from, and every request carries the active
ones verbatim in a pinned block under its own token budget (`pinned_block`), whatever the
summary says.

- Detection is by patterns (`extract_pins`), offline and deterministic: sentence-initial
  imperatives ("always", "never", "don't", "make sure", "you must", "from now on"), constraints ("at most 3", "no more than", "keep it under"), corrections
  ("actually, ...", "no, ...", "I meant ...", "X instead of Y") and decisions ("let's go
  with", "we decided"). Social formulas ("don't worry", "never mind") are not pinned.
- A later record supersedes an earlier active one on the same subject (`_supersedes`):
  "instead of Y" retires the pins that mention Y; a correction retires the pin it shares
  most of its content words with; a directive retires an older one that it restates with
  another value (the same words but for one or two). The superseded record stays in the state, marked, and is never
  shown again: stale directives are dropped, not summarized.
- The state is derived data (`PinnedState`), folded forward from the ledger's user
  messages (`fold_pins`) and kept in session state through a state delta, so a request
  needs neither the old events nor the summary to show it.

Plain Python, no Django and no run layer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sessions_app.core.events import Event
from sessions_app.core.text import stem

PinKind = Literal["directive", "constraint", "correction", "decision"]
PIN_KINDS: tuple[PinKind, ...] = ("directive", "constraint", "correction", "decision")

STATE_KEY = "pinned_intent"
"""Where a session keeps its `PinnedState` (a JSON object)."""

PINNED_BUDGET_RATIO = 0.05
"""The pinned block's share of the context window (issue 12: at most 5%)."""
MAX_PIN_CHARS = 400
"""Longer sentences are not pinned: a directive is short; a paragraph is content."""

PINNED_HEADER = (
    "The user's standing instructions, verbatim, with the seq of the message each came from "
    "(later ones already replace what they contradict). Follow them unless the user changes them:"
)

_LEAD = r"^(?:(?:ok(?:ay)?|and|also|so|but|please|pls|hey)[,\s]+)*"
_PATTERNS: tuple[tuple[PinKind, re.Pattern[str]], ...] = (
    ("correction", re.compile(r"\binstead of\b|\brather than\b", re.IGNORECASE)),
    ("constraint", re.compile(
        _LEAD + r"(?:keep (?:it|them|each|every|answers?|replies|responses)\b.*\b(?:under|below|within|short)"
        r"|(?:limit|cap) \w+"
        r"|(?:do not|don't|never) exceed\b)"
        r"|\b(?:no more than|at most|at least|not more than) \d",
        re.IGNORECASE,
    )),
    ("directive", re.compile(
        _LEAD + r"(?:always|never|don't|do not|dont|make sure|be sure|ensure|remember to|avoid"
        r"|you must|from now on|going forward|in (?:the )?future"
        r"|only (?:use|answer|reply|write|respond)|stop \w+ing|use)\b",
        re.IGNORECASE,
    )),
    ("decision", re.compile(
        _LEAD + r"(?:let's go with|let us go with|we(?:'ll| will) go with|we (?:have )?decided|i(?:'ve| have)? decided"
        r"|decision:|we(?:'re| are) going with|go with)\b",
        re.IGNORECASE,
    )),
)
# Formulas of conversation that look like directives but ask nothing of the assistant.
_SOCIAL = re.compile(
    r"^(?:(?:ok(?:ay)?|and|also|so|but|please|hey)[,\s]+)*(?:don't|do not|never) (?:worry|mind|give up|forget to (?:smile|have fun))"
    r"|^always (?:a pleasure|happy|glad|good|great|nice|fun)\b|^no (?:problem|worries|way|doubt)\b"
    r"|^wait (?:till|until|and see)\b|^use (?:it|them|that|this)\b"
    # Statements with the subject left out ("Never been there", "Always here to help") and the
    # "must" of a guess ("You must have been thrilled"): nothing is asked of anyone.
    r"|^(?:always|never) (?:been|was|were|had|is|am|are|here|there|a|an|heard|knew|thought)\b"
    r"|^(?:always|never) (?!bring\b|sing\b)\w{3,}ing\b|^you must (?:have|feel|be|know|love|like|enjoy|miss)\b"
    r"|^(?:(?:and|so|but)[,\s]+)?(?:don't|do not) (?:know|be afraid|forget to (?:take care|enjoy|have))\b",
    re.IGNORECASE,
)
_CORRECTION_LEAD = re.compile(
    _LEAD + r"(?:(?:actually|correction|scratch that)\b[,:]?|(?:no|nope|wait|sorry)[,:]|i (?:meant|mean)\b[,:]?)\s*",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?:[^.!?\n]|\.(?=\d))+[.!?]*")  # "Python 3.11" and "$4.50" stay whole
_WORD = re.compile(r"[^\W_]+")
_FUNCTION_WORDS = frozenset(
    "a an the and or but to of in on for with at by from as is are be it this that these those "
    "always never don't dont do not no actually correction instead rather than please make sure "
    "be ensure remember you must should need have from now going forward future only use i me my "
    "we our us let let's will we'll go decided decision keep under at most least more wait sorry "
    "meant mean scratch nope avoid stop".split()
)
_INSTEAD = re.compile(r"\b(?:instead of|rather than)\s+(.+?)(?:[,.;!?]|$)", re.IGNORECASE)

CORRECTION_OVERLAP = 0.3
"""A correction retires the most similar earlier pin whose content-word overlap reaches this."""


@dataclass(frozen=True, kw_only=True)
class PinnedRecord:
    """One pinned instruction: its kind, its exact text, where it came from, and what
    retired it (None while it is active)."""

    id: str
    kind: PinKind
    text: str
    source_event_id: str
    source_seq: int
    superseded_by: str | None = None
    supersedes: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.superseded_by is None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id, "kind": self.kind, "text": self.text,
            "source_event_id": self.source_event_id, "source_seq": self.source_seq,
        }
        if self.superseded_by is not None:
            data["superseded_by"] = self.superseded_by
        if self.supersedes:
            data["supersedes"] = list(self.supersedes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PinnedRecord:
        return cls(
            id=str(data["id"]), kind=data["kind"], text=str(data["text"]),
            source_event_id=str(data.get("source_event_id", "")), source_seq=int(data.get("source_seq", 0)),
            superseded_by=data.get("superseded_by"), supersedes=tuple(data.get("supersedes") or ()),
        )


@dataclass(frozen=True, kw_only=True)
class PinnedState:
    """Every pinned record of a session (active and superseded), oldest first, and the
    newest seq folded in (events at or before it are never read again)."""

    records: tuple[PinnedRecord, ...] = ()
    through_seq: int = 0

    @property
    def active(self) -> tuple[PinnedRecord, ...]:
        return tuple(r for r in self.records if r.active)

    def to_dict(self) -> dict[str, Any]:
        return {"through_seq": self.through_seq, "records": [r.to_dict() for r in self.records]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PinnedState:
        if not data:
            return cls()
        return cls(
            records=tuple(PinnedRecord.from_dict(r) for r in data.get("records") or ()),
            through_seq=int(data.get("through_seq", 0)),
        )

    @classmethod
    def of_session_state(cls, state: Mapping[str, Any]) -> PinnedState:
        raw = state.get(STATE_KEY)
        return cls.from_dict(raw if isinstance(raw, Mapping) else None)


@dataclass(frozen=True, kw_only=True)
class PinCandidate:
    kind: PinKind
    text: str


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def classify(sentence: str) -> PinKind | None:
    """The kind of instruction a sentence is, or None when it is not one."""
    if len(sentence) > MAX_PIN_CHARS or len(_WORD.findall(sentence)) < 3 or _SOCIAL.search(sentence):
        return None
    if sentence.rstrip().endswith("?"):
        return None  # a question asks; it does not instruct
    if _CORRECTION_LEAD.match(sentence):
        return "correction"
    for kind, pattern in _PATTERNS:
        if pattern.search(sentence):
            return kind
    return None


def extract_pins(text: str) -> list[PinCandidate]:
    """The instructions in a user message, sentence by sentence, in order."""
    out: list[PinCandidate] = []
    for sentence in sentences(text):
        kind = classify(sentence)
        if kind is not None:
            out.append(PinCandidate(kind=kind, text=sentence))
    return out


def _standalone_kind(sentence: str) -> PinKind | None:
    lead = _CORRECTION_LEAD.match(sentence)
    rest = sentence[lead.end():] if lead else sentence
    if _SOCIAL.search(rest):
        return None
    for kind, pattern in _PATTERNS:
        if kind != "correction" and pattern.search(rest):
            return kind
    return None


def content_words(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in _WORD.findall(text.lower()) if w not in _FUNCTION_WORDS and len(w) > 1)


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def _supersedes(new: PinCandidate, active: Sequence[PinnedRecord]) -> list[PinnedRecord]:
    """The active records `new` retires (see the module docstring)."""
    retired: list[PinnedRecord] = []
    for match in _INSTEAD.finditer(new.text):
        old = content_words(match.group(1))
        retired.extend(r for r in active if old and old <= content_words(r.text) and r not in retired)
    if retired:
        return retired
    words = content_words(new.text)
    if new.kind == "correction":
        # The most similar pin; on a tie, the newest.
        scored = sorted(((_overlap(words, content_words(r.text)), i) for i, r in enumerate(active)), reverse=True)
        if scored and scored[0][0] >= CORRECTION_OVERLAP:
            return [active[scored[0][1]]]
        return []
    return [r for r in active if r.kind in ("directive", "constraint", "correction") and _restates(new.text, r.text)]


def _restates(new: str, old: str) -> bool:
    """Whether `new` is `old` with one value changed: the same words but for one run of at
    most two, and at least one content word in common ("Always answer in French." ->
    "Always answer in German."; not "Never use tabs." -> "Never use spaces.")."""
    a, b = [w.lower() for w in _WORD.findall(new)], [w.lower() for w in _WORD.findall(old)]
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    changed = max(len(a), len(b)) - head - tail
    shared = a[:head] + (a[len(a) - tail:] if tail else [])
    return 0 < changed <= 2 and head >= 1 and bool(content_words(" ".join(shared)))


def fold_pins(state: PinnedState, events: Iterable[Event]) -> PinnedState:
    """`state` with the user messages of `events` after `state.through_seq` folded in."""
    records = list(state.records)
    through = state.through_seq
    for event in sorted((e for e in events if e.seq is not None and e.seq > state.through_seq), key=lambda e: e.seq or 0):
        through = max(through, event.seq or 0)
        if event.partial or not event.is_user_message:
            continue
        for number, candidate in enumerate(extract_pins(event.text)):
            pin_id = f"{event.id}:{number}"
            active = [r for r in records if r.active]
            retired = {r.id for r in _supersedes(candidate, active)}
            if candidate.kind == "correction" and not retired:
                # "Actually, ..." and "X instead of Y" are everyday speech; they are pinned
                # only when they correct a pinned instruction or are one themselves.
                kind = _standalone_kind(candidate.text)
                if kind is None:
                    continue
                candidate = PinCandidate(kind=kind, text=candidate.text)
            records = [replace(r, superseded_by=pin_id) if r.id in retired else r for r in records]
            records.append(PinnedRecord(
                id=pin_id, kind=candidate.kind, text=candidate.text, source_event_id=event.id,
                source_seq=event.seq or 0, supersedes=tuple(sorted(retired)),
            ))
    return PinnedState(records=tuple(records), through_seq=through)


@dataclass(frozen=True, kw_only=True)
class PinnedBlock:
    """The pinned block of a request: its text and what it shows and leaves out."""

    text: str
    shown: tuple[PinnedRecord, ...]
    omitted: tuple[PinnedRecord, ...] = field(default=())
    tokens: int = 0


def _line(record: PinnedRecord) -> str:
    return f"- [seq {record.source_seq}] {record.text}"


def _render(shown: Sequence[PinnedRecord], omitted: Sequence[PinnedRecord]) -> str:
    lines = [PINNED_HEADER, *(_line(r) for r in shown)]
    if omitted:
        seqs = ", ".join(str(r.source_seq) for r in omitted[:3]) + (", ..." if len(omitted) > 3 else "")
        lines.append(f"- ({len(omitted)} more over the pinned budget; session_load seq {seqs})")
    return "\n".join(lines)


def pinned_block(
    state: PinnedState, *, budget_tokens: int, count_text: Callable[[str], int]
) -> PinnedBlock | None:
    """The active records as a block within `budget_tokens`, or None when there are none.

    Over budget, corrections and constraints go first, then directives and decisions,
    newest first within a kind; what does not fit is named by seq, so that session_load
    brings it back. Shown records keep their source order.
    """
    active = state.active
    if not active:
        return None
    priority = {"correction": 0, "constraint": 1, "directive": 2, "decision": 3}
    ranked = sorted(active, key=lambda r: (priority[r.kind], -r.source_seq))
    chosen: list[PinnedRecord] = []
    used = count_text(PINNED_HEADER)
    for record in ranked:
        cost = count_text(_line(record)) + 1
        if used + cost <= budget_tokens:
            chosen.append(record)
            used += cost
    while True:
        # The omission line costs tokens too: give up the weakest pins until all of it fits.
        shown = tuple(r for r in active if r in chosen)
        omitted = tuple(r for r in active if r not in chosen)
        text = _render(shown, omitted)
        tokens = count_text(text)
        if tokens <= budget_tokens or not chosen:
            return PinnedBlock(text=text, shown=shown, omitted=omitted, tokens=tokens)
        chosen.pop()
