"""Session recall: snippets, slices, loaded messages and hidden boundaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sessions_app.core.events import Event
from sessions_app.core.recall.analysis import normalize_space
from sessions_app.core.recall.defaults import CONTENT_LIMIT, SNIPPET_CHARS, SNIPPET_LINE_CHARS, STATE_LAST_INCLUDED_TS
from sessions_app.core.recall.index import EventWindow, recall_text
from sessions_app.core.session import Summary, select_summary

# -- snippets, slices and loaded messages ---------------------------------------------------


def compact_text(text: str, limit: int) -> str:
    """Whitespace collapsed and cut to `limit` characters, "..." marking a cut."""
    text = normalize_space(text)
    if limit <= 0:
        return ""
    if len(text) <= limit:
        return text
    if limit <= 3:
        return text[:limit]
    return text[: limit - 3] + "..."


def excerpt(text: str, limit: int, terms: Sequence[str] = ()) -> str:
    """Like `compact_text`, but when the first matching term lies past the cut, the
    excerpt starts shortly before it so that the reader sees why the event matched."""
    flat = normalize_space(text)
    if len(flat) <= limit or not terms:
        return compact_text(flat, limit)
    lower = flat.lower()
    positions = [p for t in terms if (p := lower.find(t)) >= 0]
    if not positions or min(positions) + 16 < limit - 3:
        return compact_text(flat, limit)
    start = max(0, min(positions) - limit // 4)
    body = flat[start:]
    return "..." + compact_text(body, limit - 3) if len(body) > limit - 3 else "..." + body


def slice_utf8(text: str, offset: int, limit: int) -> tuple[str, int, int, int]:
    """(slice, start, end, total) of `text`'s UTF-8 bytes from `offset`, at most `limit`
    bytes, moved to character boundaries; at least one character when any remains."""
    data = text.encode("utf-8")
    total = len(data)
    start = min(max(0, offset), total)
    while start < total and (data[start] & 0xC0) == 0x80:
        start += 1
    end = min(total, start + max(0, limit))
    while start < end < total and (data[end] & 0xC0) == 0x80:
        end -= 1
    if end == start and start < total:
        end = start + 1
        while end < total and (data[end] & 0xC0) == 0x80:
            end += 1
    return data[start:end].decode("utf-8"), start, end, total


def loaded_message(event: Event, *, offset: int = 0, limit: int = CONTENT_LIMIT) -> dict[str, Any]:
    """One event as session_load shows it. Tool results are byte-sliced from `offset`;
    the "tool_name: " prefix is kept only when the whole result is shown."""
    message = event.message
    if message is None:
        return {
            "event_id": event.id,
            "seq": event.seq,
            "role": "assistant",
            "created": event.created_at.isoformat(),
            "content": "",
        }
    role = "tool" if message.tool_call_id is not None else (message.role or "assistant")
    loaded: dict[str, Any] = {
        "event_id": event.id,
        "seq": event.seq,
        "role": role,
        "created": event.created_at.isoformat(),
    }
    if message.tool_call_id is None:
        loaded["content"] = message.content
        return loaded
    content, start, end, total = slice_utf8(message.content, offset, limit)
    truncated = start > 0 or end < total
    prefix = f"{message.tool_name}: " if message.tool_name and not truncated else ""
    loaded.update(
        content=prefix + content,
        tool_call_id=message.tool_call_id,
        tool_name=message.tool_name,
        content_offset=start,
        content_bytes=total,
        returned_bytes=end - start,
        content_truncated=truncated,
    )
    if end < total:
        loaded["next_content_offset"] = end
    return loaded


def _window_snippet(window: EventWindow, terms: Sequence[str]) -> str:
    """SPEC 5.2: "role: text" lines (≤96 chars; the anchor marked "[match] "), ≤280 in
    all. The anchor line goes in first, then neighbours nearest first, so it is never the
    one that does not fit."""
    lines: list[str] = []
    anchor = -1
    for event in window.events:
        recalled = recall_text(event)
        if recalled is None:
            continue
        is_anchor = event.id == window.anchor_event_id
        text = excerpt(recalled[0], SNIPPET_LINE_CHARS, terms if is_anchor else ())
        if not text:
            continue
        if is_anchor:
            anchor = len(lines)
        lines.append(("[match] " if is_anchor else "") + f"{recalled[1]}: {text}")
    if anchor < 0:
        return ""
    chosen = {anchor}
    used = len(lines[anchor])
    for distance in range(1, len(lines)):
        for index in (anchor - distance, anchor + distance):
            if 0 <= index < len(lines) and used + 1 + len(lines[index]) <= SNIPPET_CHARS:
                chosen.add(index)
                used += 1 + len(lines[index])
    return "\n".join(lines[i] for i in sorted(chosen))[:SNIPPET_CHARS]


# -- boundaries -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class HiddenBoundary:
    """What the summary hides: events with seq ≤ `through_seq` (or, lacking a seq, created
    at or before `cutoff_at`)."""

    through_seq: int | None = None
    cutoff_at: datetime | None = None


def hidden_boundary(
    summaries: Mapping[str, Summary], *, filter_key: str = "", state: Mapping[str, Any] | None = None
) -> HiddenBoundary | None:
    """What the summary shown for `filter_key` hides from the model (SPEC 5.2
    current_hidden): the summary the projection picks (`select_summary`: the exact key,
    else the aggregate of the keys above it, with the earliest boundary), else the
    summarizer's session-state cutoff. None: nothing is hidden."""
    chosen = select_summary(summaries, filter_key)
    if chosen is not None and chosen.text:
        if chosen.boundary is None:
            # A legacy summary covers what was created before it was written (SPEC 2.4).
            return HiddenBoundary(cutoff_at=chosen.updated_at)
        if chosen.boundary.last_seq > 0:
            return HiddenBoundary(through_seq=chosen.boundary.last_seq)
        return None  # an aggregate with an unbounded member keeps all raw history visible
    raw = (state or {}).get(STATE_LAST_INCLUDED_TS)
    if isinstance(raw, str):
        try:
            return HiddenBoundary(cutoff_at=datetime.fromisoformat(raw))
        except ValueError:
            return None
    return None
