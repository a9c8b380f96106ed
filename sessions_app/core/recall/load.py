"""Session recall: session_load (SPEC 5.3)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sessions_app.core.events import Event
from sessions_app.core.recall.defaults import (
    CONTENT_LIMIT,
    HISTORY_NOTE,
    LOAD_AFTER,
    LOAD_BEFORE,
    LOAD_MAX_SPAN,
    MAX_CONTENT_LIMIT,
    RANGE_PAGE_EVENTS,
    AnchorNotFoundError,
    RangeError,
    RecallError,
)
from sessions_app.core.recall.index import EventRange, EventWindow, RecallIndex
from sessions_app.core.recall.slices import loaded_message
from sessions_app.core.session import Session, SessionKey

# -- session_load (SPEC 5.3) ------------------------------------------------------------------


def normalize_window(before: int | None, after: int | None) -> tuple[int, int]:
    """Negative → 0; both 0 → the defaults (1/1); at most `LOAD_MAX_SPAN` in all, taking
    from `after` first while it is not smaller than `before`."""
    b = max(0, before or 0)
    a = max(0, after or 0)
    if b == 0 and a == 0:
        return LOAD_BEFORE, LOAD_AFTER
    while b + a > LOAD_MAX_SPAN:
        if a >= b:
            a -= 1
        else:
            b -= 1
    return b, a


def normalize_content_window(offset: int | None, limit: int | None) -> tuple[int, int]:
    o = max(0, offset or 0)
    n = CONTENT_LIMIT if not limit or limit <= 0 else min(limit, MAX_CONTENT_LIMIT)
    return o, n


def _latest_tool_result(events: Iterable[Event], tool_call_id: str) -> Event | None:
    for event in reversed(list(events)):
        if event.message is not None and event.message.tool_call_id == tool_call_id and not event.partial:
            return event
    return None


async def _resolve_tool_call(index: RecallIndex, session: Session, key: SessionKey, tool_call_id: str) -> str | None:
    if key.session_id == session.id:
        event = _latest_tool_result(session.events, tool_call_id)
        if event is not None:
            return event.id
    event = await index.find_tool_result(key, tool_call_id)
    return event.id if event is not None else None


async def session_load(
    index: RecallIndex,
    *,
    session: Session,
    event_id: str | None = None,
    tool_call_id: str | None = None,
    session_id: str | None = None,
    before: int | None = LOAD_BEFORE,
    after: int | None = LOAD_AFTER,
    content_offset: int | None = 0,
    content_limit: int | None = CONTENT_LIMIT,
    seq: int | None = None,
    unit: bool = False,
    section: str | None = None,
    first_seq: int | str | None = None,
    last_seq: int | str | None = None,
) -> dict[str, Any]:
    """SPEC 5.3: a small raw window around one event of the user's session (the current
    one by default), tool results byte-sliced. Raises `RecallError` with a message for the
    model when the anchor cannot be resolved.

    Beyond SPEC (issue 12, C1): a range instead of an anchor, `section` as a summary
    header prints it ("41-77" or "[events 41-77]") or `first_seq` and `last_seq`, loads
    the recallable events of that range in pages (see `load_range`).

    Beyond SPEC (issue 12): `seq` anchors at the first recallable event at or after that
    seq, for the seq ranges a request names instead of ids (events not loaded into it).
    `unit=True` (C7) loads the anchor's whole unit instead of a ±N window: a message
    alone, whole; a tool result with the call that asked for it (name and arguments,
    which no window shows). `before`/`after` are then ignored."""
    key = SessionKey(app=session.app, user_id=session.user_id, session_id=(session_id or "").strip() or session.id)
    event_id = (event_id or "").strip()
    tool_call_id = (tool_call_id or "").strip()
    if (section or "").strip() or first_seq is not None or last_seq is not None:
        if event_id or tool_call_id or seq is not None:
            raise RangeError(
                "give either a range (section, or first_seq and last_seq) or an anchor (event_id, tool_call_id, seq), not both"
            )
        first, last = parse_range(section=section, first_seq=first_seq, last_seq=last_seq)
        return await load_range(index, key=key, first_seq=first, last_seq=last, content_limit=content_limit)
    anchor = event_id
    if not anchor and tool_call_id:
        anchor = await _resolve_tool_call(index, session, key, tool_call_id) or ""
        if not anchor:
            raise AnchorNotFoundError(f"tool_call_id {tool_call_id!r} not found in session {key.session_id!r}")
    if not anchor and seq is not None:
        finder = getattr(index, "event_id_at", None)
        if finder is None:
            raise RecallError("this session store cannot load by seq; use event_id")
        anchor = await finder(key, max(1, int(seq))) or ""
        if not anchor:
            raise AnchorNotFoundError(f"no recallable event at or after seq {seq!r} in session {key.session_id!r}")
    if not anchor:
        raise RecallError("event_id is required unless tool_call_id is provided (or a seq)")
    b, a = (0, 0) if unit else normalize_window(before, after)
    try:
        window = await index.event_window(key, anchor_event_id=anchor, before=b, after=a)
    except AnchorNotFoundError:
        if not (event_id and tool_call_id):
            raise
        fallback = await _resolve_tool_call(index, session, key, tool_call_id)
        if fallback is None or fallback == anchor:
            raise
        anchor = fallback
        window = await index.event_window(key, anchor_event_id=anchor, before=b, after=a)
    offset, limit = normalize_content_window(content_offset, content_limit)
    messages = [loaded_message(e, offset=offset if e.id == anchor else 0, limit=limit) for e in window.events]
    if unit:
        call = await _unit_call(index, key, window)
        if call is not None:
            messages.insert(0, call)
    answer: dict[str, Any] = {
        "session_id": key.session_id,
        "event_id": anchor,
        "before": b,
        "after": a,
        "note": HISTORY_NOTE,
        "messages": messages,
        "count": len(messages),
    }
    if unit:
        answer["unit"] = True
    return answer


_RANGE = re.compile(r"^\s*(?:\[?\s*events\s+)?(\d+)\s*(?:-|\u2013|\u2014|\.\.)\s*(\d+)\s*\]?\s*$", re.IGNORECASE)


def _seq_value(name: str, value: int | str) -> int:
    if isinstance(value, bool):
        raise RangeError(f"{name} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if not re.fullmatch(r"-?\d+", text):
        raise RangeError(f"{name} must be a whole number, got {value!r}")
    return int(text)


def parse_range(
    *, section: str | None = None, first_seq: int | str | None = None, last_seq: int | str | None = None
) -> tuple[int, int]:
    """(first, last) of a load range: `section` as a summary header prints it ("41-77",
    "[events 41-77]"), else `first_seq` and `last_seq`. Raises `RangeError` for anything
    else: not numbers, a missing end, seqs below 1, first after last."""
    text = (section or "").strip()
    if text:
        if first_seq is not None or last_seq is not None:
            raise RangeError("give the range once: either section or first_seq and last_seq")
        match = _RANGE.match(text)
        if match is None:
            raise RangeError(f"section {section!r} is not a range; give it as a summary header prints it, e.g. '41-77'")
        first, last = int(match.group(1)), int(match.group(2))
    else:
        if first_seq is None or last_seq is None:
            raise RangeError("a range needs both first_seq and last_seq (or a section such as '41-77')")
        first, last = _seq_value("first_seq", first_seq), _seq_value("last_seq", last_seq)
    if first < 1:
        raise RangeError(f"seqs start at 1, got first_seq {first!r}")
    if first > last:
        raise RangeError(f"first_seq {first!r} is after last_seq {last!r}")
    return first, last


async def load_range(
    index: RecallIndex,
    *,
    key: SessionKey,
    first_seq: int,
    last_seq: int,
    content_limit: int | None = CONTENT_LIMIT,
) -> dict[str, Any]:
    """C1: the recallable events of `key`'s session with seqs in `first_seq`..`last_seq`,
    oldest first, one page at a time. A page holds at most `RANGE_PAGE_EVENTS` events and
    `content_limit` bytes of content (at least one event; a tool result is sliced to the
    limit, paged further by session_load with its event_id and content_offset). When the
    range goes on, the answer has `next_seq`: load `next_seq`..`last_seq` for the next
    page. Raises `RangeError` when the range ends past the session's ledger, and
    `AnchorNotFoundError` when the session is not the user's."""
    finder = getattr(index, "events_in_range", None)
    if finder is None:
        raise RecallError("this session store cannot load by range; use event_id")
    _, limit = normalize_content_window(0, content_limit)
    found: EventRange = await finder(key, first_seq=first_seq, last_seq=last_seq, limit=RANGE_PAGE_EVENTS + 1)
    if last_seq > found.ledger_last_seq:
        raise RangeError(
            f"range {first_seq}-{last_seq} is outside the ledger of session {key.session_id!r}, "
            f"which ends at seq {found.ledger_last_seq}"
        )
    messages: list[dict[str, Any]] = []
    used = 0
    next_seq: int | None = None
    for event in found.events:
        loaded = loaded_message(event, limit=limit)
        size = len(str(loaded.get("content", "")).encode("utf-8"))
        if messages and (len(messages) >= RANGE_PAGE_EVENTS or used + size > limit):
            next_seq = event.seq
            break
        messages.append(loaded)
        used += size
    answer: dict[str, Any] = {
        "session_id": key.session_id,
        "section": f"{first_seq}-{last_seq}",
        "first_seq": first_seq,
        "last_seq": last_seq,
        "note": HISTORY_NOTE,
        "messages": messages,
        "count": len(messages),
    }
    if next_seq is not None:
        answer["next_seq"] = next_seq
        answer["next"] = {"first_seq": next_seq, "last_seq": last_seq}
    return answer


async def _unit_call(index: RecallIndex, key: SessionKey, window: EventWindow) -> dict[str, Any] | None:
    """The call half of a tool-result unit, as a loaded message with only that call; None
    when the anchor is no tool result or the index cannot find calls."""
    anchor = next((e for e in window.events if e.id == window.anchor_event_id), None)
    message = anchor.message if anchor is not None else None
    finder = getattr(index, "find_tool_call", None)
    if anchor is None or message is None or message.tool_call_id is None or finder is None:
        return None
    event = await finder(key, message.tool_call_id, before_seq=anchor.seq)
    if event is None or event.message is None:
        return None
    calls = [c for c in event.message.tool_calls if c.id == message.tool_call_id]
    return {
        "event_id": event.id,
        "seq": event.seq,
        "role": "assistant",
        "created": event.created_at.isoformat(),
        "content": event.message.content,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
    }
