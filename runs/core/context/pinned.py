"""Pinned intent (issue 12, C2; issue 24): the user's standing instructions survive every
summary and compaction.

A user message may carry instructions that must hold for the rest of the session ("Always
answer in French.", "Never restart the payments service.", "从现在起，回答不要超过三句话。").
A summarizer, lossy by nature, may drop them. Here they become typed `PinnedRecord`s, each
with its source and the event it came from, and every request carries the active ones
verbatim in a pinned block under its own token budget (`pinned_block`).

Pins come from three sources (`PinSource`), each recorded with its source event:
- `user`: the user pins (or unpins) one of their messages (REST, the chat UI): `pin_event`,
  `unpin_event`;
- `model`: the model calls `pin_instruction` with the user's words, verbatim, and the event
  they come from; `pin_quote` refuses a quote that is not in that user message;
- `extractor`: `extract_pins`, deliberately conservative: a sentence is pinned only when it
  carries a standing-scope marker ("always", "never", "from now on", "every time ...,",
  以后, 始终, 永远, toujours, immer, siempre, ...) and reads as addressed to the assistant,
  not as a statement about someone (no subject before the verb: "I always ...", "She never
  ...", 我总是 ...), not a question, not a suggestion (吧); in English the marker opens the
  sentence ("Always ...", "From now on, ...") or "from now on" closes it, since an "always"
  inside a sentence is the adverb of a statement. The markers and subjects are
  closed-class grammar of each language, not phrases from any conversation; its precision
  and recall are measured on bench/data/pinned_labels.jsonl (bench/pinned_extractor.py).

A correction supersedes only what it names (`_supersedes`): a pin from the extractor retires
an active pin it restates with another value ("Always answer in French." -> "Actually, always
answer in German."), and a sentence that opens as a correction is pinned, without a scope
marker, only when it restates an active pin that way ("Actually, answer in German."); the
user and the model name what they replace by pin or event id. The
superseded record stays in the state, marked, and is never shown again.

The state is derived data (`PinnedState`), folded forward from the ledger's user messages
(`fold_pins`) and kept in session state through a state delta, so a request needs neither
the old events nor the summary to show it.

Plain Python, no Django and no run layer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from sessions_app.core.events import Event
from sessions_app.core.text import FUNCTION_WORDS, stem

PinKind = Literal["directive", "constraint", "correction", "decision"]
PIN_KINDS: tuple[PinKind, ...] = ("directive", "constraint", "correction", "decision")
PinSource = Literal["user", "model", "extractor"]
PIN_SOURCES: tuple[PinSource, ...] = ("user", "model", "extractor")

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

# -- the conservative extractor: closed-class grammar per language, no phrases of any conversation
# Standing-scope markers: what makes an imperative hold beyond the next answer.
_SCOPE = re.compile(
    r"\b(?:always|never|from now on|going forward|from here on|in (?:the )?future|for the rest of (?:this|the|our) \w+"
    r"|(?:do not|don't|dont) ever|ever again|every time|whenever"
    r"|toujours|jamais|désormais|dorénavant|à partir de maintenant|à l'avenir"
    r"|immer|niemals|nie|ab jetzt|von nun an|künftig|ab sofort"
    r"|siempre|nunca|jamás|a partir de ahora|de ahora en adelante)\b",
    re.IGNORECASE,
)
_TRAILING_SCOPE = re.compile(
    r"\b(?:from now on|going forward|from here on|in (?:the )?future|for the rest of (?:this|the|our) \w+)"
    r"(?:,?\s*please)?\s*[.!]*$",
    re.IGNORECASE,
)
# Languages whose imperative puts the adverb after the verb ("Réponds toujours ...", "Antworte
# immer ...", "Responde siempre ..."): there the subject check alone decides.
_VERB_FIRST_SCOPE = re.compile(
    r"\b(?:toujours|jamais|désormais|dorénavant|à partir de maintenant|à l'avenir"
    r"|immer|niemals|nie|ab jetzt|von nun an|künftig|ab sofort"
    r"|siempre|nunca|jamás|a partir de ahora|de ahora en adelante)\b",
    re.IGNORECASE,
)
_CONDITIONAL_SCOPE = re.compile(r"^(?:every time|whenever)\b", re.IGNORECASE)
_CJK_SCOPE = re.compile(r"以后|今后|此后|往后|从现在起|从现在开始|始终|总是|永远|一律|每次|不要再|别再|再也不要")
_CJK_LEAD = re.compile(r"^(?:请|麻烦|那么|那|好的|好|另外|还有|以后|今后|从现在起|从现在开始|[，,、\s])*")
_CJK_NOT_INSTRUCTION = re.compile(r"[吧吗呢？?][。！!.\s]*$")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
# Words that open a clause without instructing (leads) and words that name a subject: a
# clause whose first word is a subject is a statement about someone ("I always ...").
_LEADS = frozenset(
    "ok okay and also so but please pls hey now then actually correction no nope sorry wait "
    "oh well alright right yes yeah".split()
)
_ASKING_LEADS = ("make sure", "be sure", "remember to", "please make sure", "please remember to")
_SUBJECTS = frozenset(
    "i i'm i've i'd we we're he she they it it's this that these those there things everyone everybody nobody "
    "somebody someone people my our his her their its the a an mine "
    "je j' tu il elle on nous vous ils elles le la les un une mon ma mes ce c'est "
    "ich du er sie es wir ihr der die das ein eine mein meine man "
    "yo tú él ella nosotros ellos ellas el los las una mi".split()
)
_YOU_MODALS = frozenset("must should need have will shall".split())
_MODAL_SECOND = frozenset("should will would can could may might must is are was were has have had".split())
# After a sentence-initial "always"/"never", words that show no imperative follows
# (auxiliaries, articles, adverbs): "Never been there", "Never a dull moment".
_NOT_A_VERB = frozenset("been was were is am are had has have a an the here there so too quite ever".split())
_CORRECTION_LEAD = re.compile(
    r"^(?:(?:ok(?:ay)?|and|also|so|but|please)[,\s]+)*"
    r"(?:(?:actually|correction|scratch that)\b[,:]?|(?:no|nope|wait|sorry)[,:]|i (?:meant|mean)\b[,:]?)\s*",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"(?:[^.!?\n。！？]|\.(?=\d))+[.!?。！？]*")  # "Python 3.11" and "$4.50" stay whole
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
_NUMBER = re.compile(r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|hundred)\b", re.IGNORECASE)
_CJK_NUMBER = re.compile(r"[一二三四五六七八九十百两]+(?:个|句|行|条|段|次|字|点|项|页|分钟|秒|天)")
# Words a restated instruction may change without changing what it asks: the shared function
# words (sessions_app.core.text) and the words instructions are phrased with.
_FUNCTION_WORDS = FUNCTION_WORDS | frozenset(
    "actually always avoid but correction decided decision don't dont ensure forward future go going instead "
    "keep least let let's make mean meant more most need never nope now only please rather remember scratch "
    "sorry stop sure under use wait we'll".split()
)


@dataclass(frozen=True, kw_only=True)
class PinnedRecord:
    """One pinned instruction: its kind, its exact text, who pinned it (`source`), the
    event it came from, and what retired it (None while it is active)."""

    id: str
    kind: PinKind
    text: str
    source_event_id: str
    source_seq: int
    source: PinSource = "extractor"
    superseded_by: str | None = None
    supersedes: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.superseded_by is None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "text": self.text,
            "source_event_id": self.source_event_id,
            "source_seq": self.source_seq,
            "source": self.source,
        }
        if self.superseded_by is not None:
            data["superseded_by"] = self.superseded_by
        if self.supersedes:
            data["supersedes"] = list(self.supersedes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PinnedRecord:
        return cls(
            id=str(data["id"]),
            kind=data["kind"],
            text=str(data["text"]),
            source_event_id=str(data.get("source_event_id", "")),
            source_seq=int(data.get("source_seq", 0)),
            source=data.get("source", "extractor"),
            superseded_by=data.get("superseded_by"),
            supersedes=tuple(data.get("supersedes") or ()),
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


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _strip_leads(words: list[str]) -> tuple[list[str], bool]:
    """`words` without leading discourse words; also whether a lead asked for something
    ("make sure", "remember to"), which lets a following "you" stand for the addressee."""
    asking = False
    changed = True
    while changed and words:
        changed = False
        joined = " ".join(words[:3])
        for lead in _ASKING_LEADS:
            if joined.startswith(lead):
                words = words[len(lead.split()) :]
                asking = changed = True
                break
        if words and words[0] in _LEADS:
            words = words[1:]
            changed = True
    return words, asking


def _addressed(clause: str, *, scoped: bool = False) -> bool:
    """Whether an alphabetic clause reads as an imperative to the assistant, not a statement
    about someone: after leads and a leading scope marker, no subject opens it. `scoped`:
    the clause is the main clause of "every time ..., " / "whenever ..., ", which scoped it."""
    words, asking = _strip_leads(_words(clause))
    marker = _SCOPE.match(" ".join(words))
    after_marker = bool(marker)
    if marker:
        words = words[len(_words(marker.group(0))) :]
        words, more = _strip_leads(words)
        asking = asking or more
    if len(words) < 2:
        return False
    first, second = words[0], words[1]
    if first == "you":
        if asking and (second in _YOU_MODALS or _SCOPE.match(" ".join(words[1:]))):
            return True
        return second in _YOU_MODALS
    if not (after_marker or scoped) and not _TRAILING_SCOPE.search(clause) and not _VERB_FIRST_SCOPE.search(clause):
        # English puts a standing instruction's scope first ("Always ...", "From now on, ...")
        # or last ("... from now on."); an "always" or "never" inside the sentence is the
        # adverb of a statement ("The dog always sleeps there"), whatever its subject.
        return False
    if first in _SUBJECTS or second in _MODAL_SECOND:
        return False
    if after_marker and (
        first in _NOT_A_VERB
        or (len(first) > 4 and first.endswith("ing"))
        or (len(first) > 4 and first.endswith("ed") and not first.endswith("eed"))
    ):
        return False
    return True


def _is_instruction(sentence: str) -> bool:
    text = sentence.strip()
    if text.endswith(("?", "？")):
        return False  # a question asks; it does not instruct
    if _CJK.search(text):
        marker = _CJK_SCOPE.search(text)
        if marker is None or _CJK_NOT_INSTRUCTION.search(text):
            return False
        prefix = _CJK_LEAD.sub("", text[: marker.start()])
        return not prefix and len(_CJK.findall(text)) >= 4
    if len(_words(text)) < 3 or not _SCOPE.search(text):
        return False
    body = _CORRECTION_LEAD.sub("", text, count=1)
    if _CONDITIONAL_SCOPE.match(body) and "," in body:
        # "Every time you write SQL, use ...": the instruction is the main clause.
        return _addressed(body.split(",", 1)[1], scoped=True)
    return _addressed(body)


def classify(sentence: str) -> PinKind | None:
    """The kind of standing instruction a sentence is, or None when it is not one: a
    correction when it opens as one ("Actually, ..."), a constraint when it sets a number,
    else a directive."""
    if len(sentence) > MAX_PIN_CHARS or not _is_instruction(sentence):
        return None
    if _CORRECTION_LEAD.match(sentence):
        return "correction"
    if _NUMBER.search(sentence) or _CJK_NUMBER.search(sentence):
        return "constraint"
    return "directive"


def extract_pins(text: str) -> list[PinCandidate]:
    """The standing instructions in a user message, sentence by sentence, in order."""
    out: list[PinCandidate] = []
    for sentence in sentences(text):
        kind = classify(sentence)
        if kind is not None:
            out.append(PinCandidate(kind=kind, text=sentence))
    return out


def content_words(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in _WORD.findall(text.lower()) if w not in _FUNCTION_WORDS and len(w) > 1)


_POSITIVE_SCOPE = re.compile(
    r"^(?:(?:please|always|from now on|going forward|from here on|in (?:the )?future)[,\s]+)+", re.IGNORECASE
)


def _core(text: str) -> str:
    """An instruction without its correction lead and leading positive scope ("Actually,
    always answer in German." -> "answer in German."): what a restatement is compared on.
    Negations ("never", "don't") stay: they are the instruction."""
    return _POSITIVE_SCOPE.sub("", _CORRECTION_LEAD.sub("", text.strip(), count=1))


def _supersedes(new: PinCandidate, active: Sequence[PinnedRecord]) -> list[PinnedRecord]:
    """The active records an extracted pin retires: only those it restates with another
    value (see `_restates`), compared without leads and positive scope markers."""
    return [r for r in active if _restates(_core(new.text), _core(r.text))]


def _named_correction(sentence: str, active: Sequence[PinnedRecord]) -> PinCandidate | None:
    """A sentence that opens as a correction and restates an active pin ("Actually, write
    dates as DD/MM/YYYY." after "Always write dates as YYYY-MM-DD."): it names what it
    corrects, so it is pinned although it carries no scope marker of its own."""
    if len(sentence) > MAX_PIN_CHARS or sentence.rstrip().endswith(("?", "？")) or not _CORRECTION_LEAD.match(sentence):
        return None
    candidate = PinCandidate(kind="correction", text=sentence)
    return candidate if _supersedes(candidate, active) else None


def _tokens(text: str) -> list[str]:
    return [t for t in (w.strip(".,;:!?()\"'").lower() for w in text.split()) if t]


def _restates(new: str, old: str) -> bool:
    """Whether `new` is `old` with one value changed: the same words but for one run of at
    most two, and at least one content word in common ("Always answer in French." ->
    "Always answer in German."; not "Never use tabs." -> "Never use spaces.")."""
    # Values are whitespace-separated tokens: "YYYY-MM-DD" -> "DD/MM/YYYY" is one change.
    a, b = _tokens(new), _tokens(old)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    changed = max(len(a), len(b)) - head - tail
    shared = a[:head] + (a[len(a) - tail :] if tail else [])
    return 0 < changed <= 2 and head >= 1 and bool(content_words(" ".join(shared)))


def fold_pins(state: PinnedState, events: Iterable[Event]) -> PinnedState:
    """`state` with the user messages of `events` after `state.through_seq` folded in."""
    records = list(state.records)
    through = state.through_seq
    for event in sorted(
        (e for e in events if e.seq is not None and e.seq > state.through_seq), key=lambda e: e.seq or 0
    ):
        through = max(through, event.seq or 0)
        if event.partial or not event.is_user_message:
            continue
        number = 0
        for sentence in sentences(event.text):
            active = [r for r in records if r.active]
            kind = classify(sentence)
            candidate = (
                PinCandidate(kind=kind, text=sentence) if kind is not None else _named_correction(sentence, active)
            )
            if candidate is None:
                continue
            pin_id = f"{event.id}:{number}"
            number += 1
            retired = {r.id for r in _supersedes(candidate, active)}
            records = [replace(r, superseded_by=pin_id) if r.id in retired else r for r in records]
            records.append(
                PinnedRecord(
                    id=pin_id,
                    kind=candidate.kind,
                    text=candidate.text,
                    source_event_id=event.id,
                    source_seq=event.seq or 0,
                    supersedes=tuple(sorted(retired)),
                )
            )
    return PinnedState(records=tuple(records), through_seq=through)


class PinRefused(ValueError):
    """A pin the user or the model asked for cannot be made (the message says why)."""


def _normalized(text: str) -> str:
    return " ".join(text.split())


def _pinnable(event: Event | None, event_id: str) -> Event:
    if event is None:
        raise PinRefused(f"no event {event_id!r} in this session")
    if event.partial or not event.is_user_message:
        raise PinRefused(f"event {event_id!r} is not a message of the user; only the user's words are pinned")
    return event


def _retire(records: list[PinnedRecord], names: Iterable[str], by: str) -> tuple[list[PinnedRecord], tuple[str, ...]]:
    """`records` with the active ones named (by pin id or source event id) retired by `by`."""
    wanted = set(names)
    retired = tuple(r.id for r in records if r.active and (r.id in wanted or r.source_event_id in wanted))
    unknown = wanted - {r.id for r in records} - {r.source_event_id for r in records}
    if unknown:
        raise PinRefused(f"nothing pinned is named {sorted(unknown)[0]!r}")
    return [replace(r, superseded_by=by) if r.id in retired else r for r in records], retired


def pin_quote(
    state: PinnedState,
    *,
    event: Event | None,
    event_id: str,
    quote: str,
    source: PinSource,
    kind: PinKind = "directive",
    supersedes: Sequence[str] = (),
) -> PinnedState:
    """`state` with `quote` pinned from the user message `event` (the one `event_id` names),
    by `source`, retiring the active pins `supersedes` names (pin ids or event ids) and no
    others. Refused (`PinRefused`) when the event is not a user message of the session or
    the quote, whitespace aside, is not in it: a pin is always the user's own words."""
    message = _pinnable(event, event_id)
    text = _normalized(quote)
    if not text:
        raise PinRefused("the quote is empty")
    if len(text) > MAX_PIN_CHARS:
        raise PinRefused(f"the quote is longer than {MAX_PIN_CHARS} characters; pin the instruction, not the message")
    if text not in _normalized(message.text):
        raise PinRefused(f"the quote {text!r} is not in event {event_id!r}; quote the user's words verbatim")
    records = list(state.records)
    if any(r.active and r.source_event_id == message.id and r.text == text for r in records):
        return state  # already pinned: pinning twice is one pin
    pin_id = f"{message.id}:{source}:{sum(1 for r in records if r.source_event_id == message.id)}"
    records, retired = _retire(records, supersedes, pin_id)
    records.append(
        PinnedRecord(
            id=pin_id,
            kind=kind,
            text=text,
            source_event_id=message.id,
            source_seq=message.seq or 0,
            source=source,
            supersedes=retired,
        )
    )
    return replace(state, records=tuple(records))


def pin_event(state: PinnedState, *, event: Event | None, event_id: str) -> PinnedState:
    """The user pins a whole message of theirs (`pin_quote` with the message's text)."""
    message = _pinnable(event, event_id)
    return pin_quote(state, event=message, event_id=event_id, quote=message.text, source="user")


def unpin_event(state: PinnedState, *, event_id: str) -> PinnedState:
    """`state` with every active pin from `event_id` retired by the user, whatever its
    source. Refused when nothing active came from that event."""
    if not any(r.active and r.source_event_id == event_id for r in state.records):
        raise PinRefused(f"nothing pinned comes from event {event_id!r}")
    records, _ = _retire(list(state.records), [event_id], f"{event_id}:user:unpin")
    return replace(state, records=tuple(records))


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


def pinned_block(state: PinnedState, *, budget_tokens: int, count_text: Callable[[str], int]) -> PinnedBlock | None:
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
