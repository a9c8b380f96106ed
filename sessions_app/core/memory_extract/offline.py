"""Memory extraction: relative dates and the offline extractor."""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any

from sessions_app.core.memory import (
    MemoryEntry,
    analyze,
    token_cosine,
)
from sessions_app.core.memory_extract.values import ConversationMessage, ExtractedCall, ExtractionRequest

# -- relative dates ------------------------------------------------------------------------------------

_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "a couple of": 2,
    "few": 3,
    "a few": 3,
}
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))
DATE_EXPRESSION = re.compile(
    r"\b(?:the day before yesterday|yesterday|today|tonight|this (?:morning|afternoon|evening)|last night|"
    r"last (?:week|month|year|" + "|".join(_WEEKDAYS) + r")|"
    r"(?:\d+|a couple of|couple of|a few|few|an?|one|two|three|four|five|six|seven|eight|nine|ten) "
    r"(?:days?|weeks?|months?|years?) ago|"
    r"\d{4}-\d{2}-\d{2}|(?:on )?(?:" + _MONTH_NAMES + r")\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?|"
    r"\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:" + _MONTH_NAMES + r")(?:,? \d{4})?)\b",
    re.I,
)


def _shift_months(day: date, months: int) -> date:
    month_index = day.month - 1 + months
    year, month = day.year + month_index // 12, month_index % 12 + 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def resolve_date(expression: str, reference: datetime) -> date | None:
    """The absolute day a date expression names, counted from `reference` (when it was said)."""
    text = " ".join(expression.lower().replace(",", " ").split()).removeprefix("on ")
    today = reference.date()
    if text in ("today", "tonight", "this morning", "this afternoon", "this evening"):
        return today
    if text in ("yesterday", "last night"):
        return today - timedelta(days=1)
    if text == "the day before yesterday":
        return today - timedelta(days=2)
    if text == "last week":
        return today - timedelta(days=7)
    if text == "last month":
        return _shift_months(today, -1)
    if text == "last year":
        return _shift_months(today, -12)
    if text.startswith("last ") and text[5:] in _WEEKDAYS:
        back = (today.weekday() - _WEEKDAYS.index(text[5:])) % 7 or 7
        return today - timedelta(days=back)
    ago = re.fullmatch(r"(.+?) (day|week|month|year)s? ago", text)
    if ago:
        count = int(ago.group(1)) if ago.group(1).isdigit() else _NUMBERS.get(ago.group(1))
        if count is None:
            return None
        unit = ago.group(2)
        if unit == "day":
            return today - timedelta(days=count)
        if unit == "week":
            return today - timedelta(weeks=count)
        return _shift_months(today, -count * (12 if unit == "year" else 1))
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        try:
            return date.fromisoformat(text)
        except ValueError:
            return None
    words = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text).replace(" of ", " ").replace(".", "").split()
    month = next((_MONTHS[w] for w in words if w in _MONTHS), None)
    numbers = [int(w) for w in words if w.isdigit()]
    if month is None or not numbers:
        return None
    day_number = numbers[0] if numbers[0] <= 31 else None
    year = next((n for n in numbers if n > 31), None)
    if day_number is None:
        return None
    try:
        if year is not None:
            return date(year, month, day_number)
        candidate = date(today.year, month, day_number)
        # A date without a year that lies ahead is last year's (memories are about the past).
        return candidate if candidate <= today else date(today.year - 1, month, day_number)
    except ValueError:
        return None


# -- the offline extractor -----------------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?\n。！？]+[.!?。！？]?")
_NAME = re.compile(r"\b(?i:my name is|my name's|call me)\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2})")
_PREFERENCE = re.compile(
    r"\bi\s*(?:really\s+|much\s+|strongly\s+)?(prefer|like|love|enjoy|hate|dislike|can't stand|'d rather|would rather)\s+(.+)",
    re.I,
)
_PRODUCTION = re.compile(
    r"\bwe(?:'re| are)?\s+(?:run|use|deploy|running|using|deploying)\s+(.+?)\s+(?:in|on|for)\s+(?:production|prod)\b",
    re.I,
)
_MOVED = re.compile(r"\bwe\s+(?:have\s+)?(?:moved|migrated|switched)\s+from\s+(.+?)\s+to\s+(.+)", re.I)
_NO_LONGER = re.compile(
    r"\bwe\s+(?:no longer|don't|do not|stopped)\s+(?:use|run|using|running)\s+(.+?)(?:\s+any\s?more)?$", re.I
)
_LIVE = re.compile(r"\bi\s+(?:live|am based|'m based)\s+in\s+([A-Z][\w' -]+)", re.I)
_WORK = re.compile(r"\bi\s+work\s+(?:at|for)\s+([A-Z][\w&' .-]+)", re.I)
_ROLE = re.compile(
    r"\bi(?:'m| am)\s+an?\s+((?:[\w-]+\s+){0,3}(?:engineer|developer|manager|designer|student|teacher|doctor|nurse|"
    r"scientist|analyst|architect|consultant|founder|researcher|writer|lawyer|administrator|admin|sre|cto|ceo|lead)"
    r"(?:\s+(?:at|for)\s+[A-Z][\w&'.-]*(?:\s+[A-Z][\w&'.-]*)*)?)",
    re.I,
)
_FORGET = re.compile(r"\b(?:please\s+)?forget\s+(?:that\s+|about\s+)?(.+)", re.I)
_EPISODE_SUBJECT = re.compile(r"\b(i|we)\s+(?:just\s+|finally\s+|also\s+)?([a-z]+)\b(.*)", re.I)
_PAST_IRREGULAR = frozenset(
    "went had met got made took gave saw ran began bought sold flew wrote did drove rode found left lost "
    "won built spent sent paid read heard told thought felt kept brought caught taught fought sang swam".split()
)
_PREFERENCE_VERBS = {
    "prefer": "Prefers",
    "'d rather": "Prefers",
    "would rather": "Prefers",
    "like": "Likes",
    "love": "Loves",
    "enjoy": "Enjoys",
    "hate": "Dislikes",
    "dislike": "Dislikes",
    "can't stand": "Dislikes",
}
_CLAUSE_END = re.compile(
    r"\s*(?:,\s*(?:but|because|since|so|and then)\b|\bbut\b|\bbecause\b|\band\s+(?:i|we|my|our)\b|;).*$", re.I
)
_TRAILING_TIME = re.compile(r"[\s,]+$")


def _clause(text: str) -> str:
    """A statement's object, without what follows it or when it happened."""
    text = _CLAUSE_END.sub("", text)
    text = " ".join(DATE_EXPRESSION.sub(" ", text).split())
    return text.strip().rstrip(".!?。！？").strip()


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def _first_person_to_third(text: str) -> str:
    replacements = (
        (r"\bmy\b", "their"),
        (r"\bour\b", "their"),
        (r"\bme\b", "them"),
        (r"\bus\b", "them"),
        (r"\bmine\b", "theirs"),
        (r"\bours\b", "theirs"),
        (r"\bmyself\b", "themselves"),
    )
    for pattern, replacement in replacements:
        text = re.sub(pattern, replacement, text, flags=re.I)
    return text


def _capitalized(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _same_attribute(existing: Sequence[MemoryEntry], prefix: str) -> MemoryEntry | None:
    return next((e for e in existing if e.kind == "fact" and e.text.lower().startswith(prefix.lower())), None)


def _matching(existing: Sequence[MemoryEntry], text: str, threshold: float = 0.5) -> list[MemoryEntry]:
    tokens = analyze(text)
    if not tokens:
        return []
    return [
        e for e in existing if token_cosine(tokens, analyze(e.text)) >= threshold or set(tokens) <= set(analyze(e.text))
    ]


def _add(text: str, topics: Sequence[str], **extra: Any) -> ExtractedCall:
    return ExtractedCall(name="memory_add", arguments={"memory": text, "kind": "fact", "topics": list(topics), **extra})


def _set_attribute(existing: Sequence[MemoryEntry], prefix: str, text: str, topics: Sequence[str]) -> ExtractedCall:
    """An attribute that holds one value: update the memory that has it, else add one."""
    current = _same_attribute(existing, prefix)
    if current is not None:
        if current.text == text:
            return ExtractedCall(name="memory_noop", arguments={})
        return ExtractedCall(
            name="memory_update",
            arguments={"memory_id": current.id, "memory": text, "kind": "fact", "topics": list(topics)},
        )
    return _add(text, topics)


def _episode(sentence: str, reference: datetime) -> ExtractedCall | None:
    match = DATE_EXPRESSION.search(sentence)
    if match is None:
        return None
    day = resolve_date(match.group(0), reference)
    if day is None:
        return None
    rest = (sentence[: match.start()] + " " + sentence[match.end() :]).strip()
    subject = _EPISODE_SUBJECT.search(rest)
    if subject is None:
        return None
    verb = subject.group(2).lower()
    if not (verb.endswith("ed") or verb in _PAST_IRREGULAR):
        return None
    action = _clause(f"{verb}{subject.group(3)}")
    action = _TRAILING_TIME.sub("", " ".join(action.split()))
    if len(action.split()) < 2:
        return None
    participants = re.findall(r"\bwith\s+([A-Z][a-z]+)", subject.group(3))
    return ExtractedCall(
        name="memory_add",
        arguments={
            "memory": f"{_capitalized(_first_person_to_third(action))} on {day.isoformat()}",
            "kind": "episode",
            "event_time": day.isoformat(),
            "topics": ["events"],
            "participants": participants,
        },
    )


def extract_by_patterns(
    messages: Sequence[ConversationMessage], existing: Sequence[MemoryEntry]
) -> list[ExtractedCall]:
    """The offline extractor's rules over the user messages of a delta (see the module docstring)."""
    calls: list[ExtractedCall] = []
    for message in messages:
        if message.role != "user":
            continue
        for sentence in _sentences(message.text):
            calls.extend(_sentence_calls(sentence, existing, message.at))
    # One call per memory text: the same statement twice in a delta is one memory.
    unique: dict[str, ExtractedCall] = {}
    for call in calls:
        if call.name == "memory_noop":
            continue
        unique.setdefault(json.dumps([call.name, dict(call.arguments)], sort_keys=True), call)
    return list(unique.values())


def _sentence_calls(sentence: str, existing: Sequence[MemoryEntry], at: datetime) -> list[ExtractedCall]:
    forget = _FORGET.search(sentence)
    if forget:
        return [
            ExtractedCall(name="memory_delete", arguments={"memory_id": e.id})
            for e in _matching(existing, _clause(forget.group(1)))
        ]
    calls: list[ExtractedCall] = []
    name = _NAME.search(sentence)
    if name:
        calls.append(_set_attribute(existing, "Name is ", f"Name is {name.group(1).strip()}", ["identity"]))
    moved = _MOVED.search(sentence)
    if moved:
        old, new = _clause(moved.group(1)), _clause(moved.group(2))
        for entry in _matching(existing, old, threshold=0.3):
            calls.append(
                ExtractedCall(
                    name="memory_update",
                    arguments={
                        "memory_id": entry.id,
                        "memory": re.sub(re.escape(old), new, entry.text, flags=re.I),
                        "kind": "fact",
                        "topics": list(entry.topics),
                    },
                )
            )
        if not calls:
            calls.append(_add(f"Uses {new} (moved from {old})", ["stack"]))
        return calls
    no_longer = _NO_LONGER.search(sentence)
    if no_longer:
        target = _clause(no_longer.group(1))
        return [
            ExtractedCall(name="memory_delete", arguments={"memory_id": e.id})
            for e in _matching(existing, target, threshold=0.3)
            if "stack" in e.topics or target.lower() in e.text.lower()
        ]
    production = _PRODUCTION.search(sentence)
    if production:
        calls.append(_add(f"Runs {_clause(production.group(1))} in production", ["stack"]))
    preference = _PREFERENCE.search(sentence)
    if preference and not production:
        verb = _PREFERENCE_VERBS[preference.group(1).lower()]
        what = _first_person_to_third(_clause(preference.group(2)))
        if what and not DATE_EXPRESSION.search(what):
            calls.append(_add(f"{verb} {what}", ["preferences"]))
    live = _LIVE.search(sentence)
    if live:
        calls.append(_set_attribute(existing, "Lives in ", f"Lives in {_clause(live.group(1))}", ["location"]))
    work = _WORK.search(sentence)
    if work:
        calls.append(_set_attribute(existing, "Works at ", f"Works at {_clause(work.group(1))}", ["work"]))
    role = _ROLE.search(sentence)
    if role:
        calls.append(_add(f"Is a {_clause(role.group(1))}", ["work"]))
    if not calls:
        episode = _episode(sentence, at)
        if episode is not None:
            calls.append(episode)
    return calls


class PatternMemoryExtractor:
    """The offline extractor: rules instead of a model (DESIGN 7). Deterministic."""

    async def extract(self, request: ExtractionRequest) -> list[ExtractedCall]:
        return [c for c in extract_by_patterns(request.messages, request.existing) if c.name in request.enabled_tools]
