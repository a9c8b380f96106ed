"""`pin_instruction` (issue 24): the model pins a standing instruction of the user's, in the
user's own words, citing the message they come from.

The quote must be in the cited user message (whitespace aside): the model cannot pin what
the user did not say, nor pin its own words or a tool result. The pin is recorded with
source "model" and its event, and retires only the pins `supersedes` names. The new pinned
state travels in the tool's state delta, like every other state change.
"""

from __future__ import annotations

from typing import Any

from runs.core.context.pinned import STATE_KEY, PinnedState, PinRefused, fold_pins, pin_quote
from runs.core.tools.base import ToolArgumentError, ToolContext
from runs.core.tools.function import FunctionTool
from sessions_app.core.events import Event
from sessions_app.core.recall import AnchorNotFoundError

DESCRIPTION = (
    "Pin a standing instruction of the user's so that it holds for the rest of the session, "
    "whatever gets summarized: quote the user's words verbatim (only the instruction, not the "
    "whole message) and give the event_id of the user message they come from. To replace an "
    "instruction the user corrected, name the old pin's id or event id in supersedes; nothing "
    "else is retired. A quote that is not in that message is refused."
)
PIN_INSTRUCTION = (
    "When the user gives an instruction meant to hold from now on (a format, a language, a limit, "
    "something never to do), call pin_instruction with their exact words and the event_id of their message."
)


async def _find(context: ToolContext, event_id: str) -> Event | None:
    for event in context.session.events:
        if event.id == event_id:
            return event
    index = context.services.get("recall")
    if index is None:
        return None
    try:
        window = await index.event_window(context.session.key, anchor_event_id=event_id, before=0, after=0)
    except AnchorNotFoundError:
        return None
    return next((e for e in window.events if e.id == event_id), None)


async def _pin_instruction(
    context: ToolContext, quote: str, event_id: str, supersedes: list[str] | None = None
) -> dict[str, Any]:
    """Pin the user's instruction, verbatim, from one of their messages.

    Args:
        quote: the user's words, exactly as they wrote them.
        event_id: the id of the user message the words come from.
        supersedes: ids (pin or event) of earlier pins this instruction replaces.
    """
    stored = PinnedState.of_session_state(context.state)
    current = fold_pins(stored, context.session.events)
    try:
        updated = pin_quote(
            current,
            event=await _find(context, event_id),
            event_id=event_id,
            quote=quote,
            source="model",
            supersedes=supersedes or (),
        )
    except PinRefused as exc:
        raise ToolArgumentError(str(exc)) from None
    context.state_delta[STATE_KEY] = updated.to_dict()
    pinned = next(r for r in reversed(updated.records) if r.source_event_id == event_id and r.active)
    return {"pinned": pinned.to_dict(), "active": len(updated.active)}


def pin_tools() -> list[FunctionTool]:
    """`pin_instruction`, ready for an agent's tool list."""
    return [FunctionTool(_pin_instruction, name="pin_instruction", description=DESCRIPTION)]
