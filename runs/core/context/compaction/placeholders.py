"""The texts a compaction pass writes (policy note, placeholder, truncation marker, argument
note) and the copy-on-write replacement of one item. Placeholder and marker texts are
functions of the event alone (ids, tool name, sizes), never of the request they appear in."""

from __future__ import annotations

import dataclasses
import json

from runs.core.context.compaction.config import CompactionPass
from runs.core.context.projection import ProjectedItem
from sessions_app.core.summary import Tokenizer

SESSION_LOAD_TOOL = "session_load"
PLACEHOLDER_TAG = "[compacted tool result]"
"""Every text a pass writes starts with this; a pass never compacts it again."""
CURRENT_INVOCATION_REASON = "current_invocation_summary"
ARGS_NOTE_KEY = "_context_note"


def is_compacted(content: str) -> bool:
    return content.startswith(PLACEHOLDER_TAG)


def policy_note() -> str:
    """Pass 0's text: no ids and no recovery hints (SPEC 4.6)."""
    return f"{PLACEHOLDER_TAG} This result was left out of the context by the compaction policy for this tool."


def placeholder(item: ProjectedItem, *, session_load: bool, reason: str = "historical_compaction") -> str:
    """Pass 1's recoverable placeholder for a tool result."""
    message = item.message
    event = item.event
    event_id = event.id if event is not None else ""
    failed = bool(event is not None and event.extensions.get("tool_error"))
    if reason == CURRENT_INVOCATION_REASON:
        lead = (
            f"{PLACEHOLDER_TAG} This tool result of the current run is left out of the raw history; the call "
            f"{'ended with an error' if failed else 'succeeded'}, and its payload was compacted to keep the "
            "context within bounds. Use the summary and the details below before repeating work."
        )
    else:
        lead = (
            f"{PLACEHOLDER_TAG} This tool call {'ended with an error' if failed else 'succeeded'}; the assistant "
            "already used its result, which was removed to save context. Rely on the summary and the details "
            "below. Re-run a tool only if it is read-only or idempotent and the exact data is needed; never "
            "repeat an operation with side effects."
        )
    lines = [lead]
    if event_id:
        lines.append(f"event_id: {event_id}")
    if message.tool_call_id:
        lines.append(f"tool_call_id: {message.tool_call_id}")
    lines.append(f"tool_name: {message.tool_name or 'tool'}")
    lines.append(f"reason: {reason}")
    if not event_id and not message.tool_call_id:
        lines.append("recoverable: false")
    elif session_load and event_id:
        lines.append(
            f"For the full result, call {SESSION_LOAD_TOOL} with this event_id "
            "(content_offset/content_limit page through it)."
        )
    else:
        lines.append("The full result cannot be loaded with the tools available here.")
    return "\n".join(lines)


def _truncation_marker(item: ProjectedItem, dropped: int, *, session_load: bool) -> str:
    message = item.message
    event_id = item.event.id if item.event is not None else ""
    parts = [f"[... {dropped} characters of this tool result left out"]
    if event_id:
        parts.append(f"event_id={event_id}")
    if message.tool_call_id:
        parts.append(f"tool_call_id={message.tool_call_id}")
    parts.append(f"tool_name={message.tool_name or 'tool'}")
    if session_load and event_id:
        parts.append(f"call {SESSION_LOAD_TOOL} with this event_id for the rest ...]")
    else:
        parts.append("re-run only safe read-only or idempotent tools if the rest is needed ...]")
    return "; ".join(parts)


def _truncate(
    item: ProjectedItem, limit: int, tokenizer: Tokenizer, *, session_load: bool
) -> tuple[str, int, int] | None:
    """The longest head + marker + tail of the result within `limit` tokens (binary search over
    the characters kept) with the head and tail lengths it kept, or None when even the marker
    alone does not fit."""
    content = item.message.content
    best: tuple[str, int, int] | None = None
    low, high = 0, len(content)
    while low <= high:
        keep = (low + high) // 2
        head, tail = content[: (keep + 1) // 2], content[len(content) - keep // 2 :] if keep // 2 else ""
        marker = _truncation_marker(item, len(content) - keep, session_load=session_load)
        candidate = f"{PLACEHOLDER_TAG} {head}\n{marker}\n{tail}"
        if tokenizer.count_text(candidate) <= limit:
            best, low = (candidate, len(head), len(tail)), keep + 1
        else:
            high = keep - 1
    return best


def _replace(
    item: ProjectedItem, content: str, which: CompactionPass, tokenizer: Tokenizer
) -> tuple[ProjectedItem, int]:
    before = tokenizer.count_message(item.message)
    message = dataclasses.replace(item.message, content=content)
    saved = before - tokenizer.count_message(message)
    return (
        dataclasses.replace(item, message=message, compaction=which, original_tokens=item.original_tokens or before),
        saved,
    )


def shorten_arguments(item: ProjectedItem, limit: int, tokenizer: Tokenizer) -> ProjectedItem | None:
    """SPEC 4.5: the resume tail's call message with every call's arguments over `limit`
    tokens replaced by a note naming the event (None when none is over)."""
    event_id = item.event.id if item.event is not None else ""
    note = json.dumps(
        {
            ARGS_NOTE_KEY: "tool arguments omitted; the call completed before the summary",
            "event_id": event_id,
        }
    )
    calls = tuple(
        dataclasses.replace(call, arguments=note) if tokenizer.count_text(call.arguments) > limit else call
        for call in item.message.tool_calls
    )
    if calls == item.message.tool_calls:
        return None
    before = tokenizer.count_message(item.message)
    return dataclasses.replace(
        item,
        message=dataclasses.replace(item.message, tool_calls=calls),
        compaction="args",
        original_tokens=item.original_tokens or before,
    )
