"""Memory extraction: the delta of a session since the cursor."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from sessions_app.core.events import Event
from sessions_app.core.memory_extract.values import MAX_MESSAGE_CHARS, ConversationMessage

# -- the delta ------------------------------------------------------------------------------------------


def conversation_message(event: Event) -> ConversationMessage | None:
    """SPEC 6.3 step 2: user and assistant messages with text; no tool calls, no tool results."""
    message = event.message
    if message is None or event.partial or event.is_error or event.is_runner_completion:
        return None
    if message.role not in ("user", "assistant") or message.tool_calls or message.tool_call_id:
        return None
    if not message.content.strip():
        return None
    return ConversationMessage(
        role=message.role,
        text=message.content[:MAX_MESSAGE_CHARS],
        at=event.created_at,
        seq=event.seq or 0,
    )


_INJECTION = re.compile(
    r"ignore (?:all |any |the )?(?:previous|prior|above|earlier) (?:instructions|messages|prompts|rules)|"
    r"disregard (?:all |any |the )?(?:previous|prior|above|earlier)|"
    r"\byou are now\b|\bnew (?:system )?instructions?\s*:|\bsystem prompt\b|<\|im_start\|>|<\|system\|>|"
    r"^\s*#{2,}\s*(?:system|instruction)|\bjailbreak\b|\bdo anything now\b|"
    r"(?:remember|store|save) (?:this|that) (?:as a |in )?(?:memory|memories) for (?:all|every) users?",
    re.I | re.M,
)
_TOOL_OUTPUT = re.compile(
    r"Traceback \(most recent call last\)|</?(?:tool_result|tool_response|function_results?)>|\"tool_call_id\"\s*:",
)
_LOG_LINE = re.compile(r"^\s*\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}", re.M)


def message_pollution(message: ConversationMessage) -> str:
    """Why a user message looks polluted ("" when it does not): prompt injection, or pasted
    tool output (stack traces, tool-result markup, JSON blobs, log dumps)."""
    if message.role != "user":
        return ""
    text = message.text
    if _INJECTION.search(text):
        return f"prompt injection in message {message.seq}"
    if _TOOL_OUTPUT.search(text) or len(_LOG_LINE.findall(text)) >= 3:
        return f"tool output in message {message.seq}"
    stripped = text.strip()
    if len(stripped) > 200 and stripped[0] in "[{":
        try:
            json.loads(stripped)
        except ValueError:
            pass
        else:
            return f"tool output (JSON) in message {message.seq}"
    return ""


def pollution_reason(messages: Sequence[ConversationMessage]) -> str:
    """The first polluted user message's reason ("" when none is)."""
    return next((reason for reason in map(message_pollution, messages) if reason), "")


def without_polluted(
    messages: Sequence[ConversationMessage],
) -> tuple[list[ConversationMessage], list[tuple[ConversationMessage, str]]]:
    """The clean messages, and each skipped one with why. A polluted user message takes the
    assistant's answers to it along: they are about (or obey) the pasted text."""
    clean: list[ConversationMessage] = []
    skipped: list[tuple[ConversationMessage, str]] = []
    skipping = False
    for message in messages:
        if message.role == "user":
            reason = message_pollution(message)
            skipping = bool(reason)
            if reason:
                skipped.append((message, reason))
                continue
        elif skipping:
            skipped.append((message, f"answer to a polluted message in message {message.seq}"))
            continue
        clean.append(message)
    return clean, skipped


def within_budget(messages: Sequence[ConversationMessage], budget: int) -> list[ConversationMessage]:
    """The longest prefix of `messages` whose text fits `budget` (at least one message)."""
    taken: list[ConversationMessage] = []
    used = 0
    for message in messages:
        used += len(message.text)
        if taken and used > budget:
            break
        taken.append(message)
    return taken
