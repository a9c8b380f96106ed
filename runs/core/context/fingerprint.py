"""History fingerprints (issue 25, item 5): how a stateless client's resent chat finds the
session that already holds it.

A client that keeps no session id (LangChain `ChatOpenAI`, the Agents SDK) resends the whole
chat with each request: the earlier messages, then the new user message. After a run, the
conversation the client holds is the run's seed, its input and the answer it was given; its
next request resends exactly that before its new message. So the session stores the
fingerprint of that conversation (a hash, never the text), and a later request whose earlier
messages hash the same continues it instead of seeding a new session.

The hash covers what the client resends and nothing it may drop: each message's role, its
text (surrounding whitespace stripped: clients trim), its tool calls (id, name, arguments),
the call a tool result answers, and its attachments' identity. The agent's name is part of
the hash, so the same chat sent to another agent never matches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from sessions_app.core.events import ContentPart, Message, ToolCall

FINGERPRINT_VERSION = 1
"""Part of every hash: a change of the normalization below must not match older rows."""


def _part(part: ContentPart) -> list[Any]:
    # Bytes of an inline upload are not kept on the part once stored; its name, type and
    # size identify it well enough, a URL identifies itself.
    return [part.type, part.name, part.mime, part.size, part.url or ""]


def _message(message: Message) -> list[Any]:
    return [
        message.role,
        message.content.strip(),
        [[c.id, c.name, c.arguments] for c in message.tool_calls],
        message.tool_call_id or "",
        [_part(p) for p in message.attachments],
    ]


def history_fingerprint(agent: str, messages: Sequence[Message]) -> str:
    """The fingerprint of a chat sent to `agent`: a SHA-256 hex digest of its normalized
    messages (those without payload are skipped, as seeding skips them)."""
    normalized = [FINGERPRINT_VERSION, agent, [_message(m) for m in messages if m.has_payload]]
    text = json.dumps(normalized, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def conversation_after(history: Sequence[Message], answer: str, calls: Sequence[ToolCall] = ()) -> tuple[Message, ...]:
    """The chat a client holds after a run: what it sent (`history`: the earlier messages
    and the run's input) and the assistant message it was answered with, which its next
    request resends as it was received."""
    reply = Message(role="assistant", content=answer, tool_calls=tuple(calls))
    return (*history, reply)
