"""Redone turns (issue 21, `runs.turns`): which ledger events a later turn replaces.

Regenerate and edit append a new user message naming the one it redoes in its extensions
(`regenerates: X`, `edit_of: X`); the ledger keeps the earlier turn. The turn of X is X and
every event after it up to the next message the user sent: the model is not shown it any
more (`runs.core.context.projection`) and a summary made after the redo leaves it out
(`sessions_app.core.summary`). Plain Python, shared by both.
"""

from __future__ import annotations

from collections.abc import Sequence

from sessions_app.core.events import Event, Message

REDO_EXTENSIONS: tuple[str, ...] = ("regenerates", "edit_of")
"""`Event.extensions` keys of a user message that redoes an earlier one."""


def opens_turn(event: Event, message: Message) -> bool:
    """A message the user sent: where a chat turn starts (and the previous one ends)."""
    return event.author == "user" and message.role == "user"


def redo_target(event: Event, message: Message) -> str | None:
    """The id of the message this one regenerates or edits, if it is a user message that
    redoes one."""
    if not opens_turn(event, message):
        return None
    for key in REDO_EXTENSIONS:
        target = event.extensions.get(key)
        if isinstance(target, str) and target:
            return target
    return None


def superseded_positions(shown: Sequence[tuple[Event, Message]]) -> set[int]:
    """Positions in `shown` (events with the message a model sees, in ledger order) of the
    turns a later user message regenerates or edits: the message named and everything after
    it up to the next user message. An edit of an older message replaces that message's
    turn only, not the turns after it, as the chat shows them; chains follow from each
    redo naming the one before it. Only a target before its redo counts (a redo can only
    name a message it has seen), so a turn's events all precede the redo and a new event is
    never superseded when it arrives."""
    # Redo markers are rare: look for them first, so a ledger without one costs a check per event.
    marker_at: dict[str, int] = {}
    for index, (event, message) in enumerate(shown):
        target = redo_target(event, message)
        if target is not None:
            marker_at.setdefault(target, index)
    hidden: set[int] = set()
    if not marker_at:
        return hidden
    starts = {i for i, (event, _) in enumerate(shown) if i < marker_at.get(event.id, -1)}
    hiding = False
    for index, (event, message) in enumerate(shown):
        if index in starts:
            hiding = True
        elif opens_turn(event, message):
            hiding = False
        if hiding:
            hidden.add(index)
    return hidden


def superseded_event_ids(events: Sequence[Event]) -> frozenset[str]:
    """Ids of the events of `events` (ledger order) in a turn a later one of them
    regenerates or edits. Events without a message never open or end a turn; they are
    superseded when they fall inside such a turn. What auto memory (issue 21) must not
    learn from: the user replaced that history."""
    hidden = superseded_spans(
        [(e, e.message) for e in events if e.message is not None and opens_turn(e, e.message) and e.seq is not None]
    )
    if not hidden:
        return frozenset()
    return frozenset(e.id for e in events if e.seq is not None and in_spans(e.seq, hidden))


def superseded_spans(openers: Sequence[tuple[Event, Message]]) -> tuple[tuple[int, int], ...]:
    """The seq ranges (first, last, both included) of superseded turns, from a session's
    turn-opening user messages (`opens_turn`) in ledger order, each with its seq: the
    turn of a redone message runs from it to just before the next message the user sent,
    which exists, since the redo is itself one. Session recall (issue 21) reads only the
    openers of a ledger and tests any event's seq against these ranges."""
    hidden = superseded_positions(openers)
    spans: list[tuple[int, int]] = []
    for position in sorted(hidden):
        first = openers[position][0].seq
        following = openers[position + 1][0].seq if position + 1 < len(openers) else None
        if first is not None and following is not None:
            spans.append((first, following - 1))
    return tuple(spans)


def in_spans(seq: int, spans: Sequence[tuple[int, int]]) -> bool:
    """Whether `seq` lies in one of `spans` (`superseded_spans`)."""
    return any(first <= seq <= last for first, last in spans)
