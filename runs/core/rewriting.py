"""The user-message rewriter (SPEC 1.2 step 8, 1.4): one incoming message, several current-turn messages.

A `UserMessageRewriter` on the Runner sees the incoming user message before the invocation
is built and returns the messages the turn holds instead: at least one, the last being the
invocation message (a user message). Every returned message with a payload is persisted
as the current turn, in order, marked `rewritten` on its ledger event. It runs before the
agent starts and before anything of the turn is written, so it cannot be a `before_run`
callback (runs.core.callbacks), which runs once the turn is in the ledger.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from runs.core.errors import UsageError
from sessions_app.core.events import Message

logger = logging.getLogger(__name__)

REWRITTEN = "rewritten"
"""`Event.extensions[REWRITTEN]` is True on each current-turn event a rewriter produced."""


@dataclass(frozen=True, kw_only=True)
class RewriteContext:
    """What a rewriter may read: who sends the message, where, to which agent."""

    user_id: str
    session_id: str
    agent_name: str
    state: Mapping[str, Any] = field(default_factory=dict)


UserMessageRewriter = Callable[[RewriteContext, Message], "Sequence[Message] | Awaitable[Sequence[Message]]"]


def normalize_role(message: Message) -> Message:
    """SPEC 1.2 step 1: a message with an empty role and a payload is a user message."""
    if not message.role and message.has_payload:
        logger.warning("a message without a role is taken as a user message")
        return replace(message, role="user")
    return message


async def rewrite_user_message(
    rewriter: UserMessageRewriter, context: RewriteContext, message: Message
) -> list[Message]:
    """The current-turn messages the rewriter makes of `message`; `UsageError` when it returns
    none, a message without a payload last, a tool message, or a last message that is not
    the user's."""
    result = rewriter(context, message)
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, Message) or not isinstance(result, Sequence):
        raise UsageError(f"the user message rewriter must return a list of messages, got {type(result).__name__}")
    messages = [normalize_role(m) for m in result if isinstance(m, Message)]
    if len(messages) != len(result):
        raise UsageError("the user message rewriter returned something that is not a message")
    if not messages:
        raise UsageError("the user message rewriter returned no message")
    last = messages[-1]
    if last.role != "user" or not last.has_payload:
        raise UsageError("the user message rewriter's last message must be a user message with a payload")
    # Only payload-bearing messages are persisted as the current turn (SPEC 1.2 step 8).
    messages = [m for m in messages if m.has_payload]
    for item in messages:
        if item.role not in ("user", "assistant", "system"):
            raise UsageError(f"the user message rewriter returned a message with role {item.role!r}")
    return messages
