"""Pins by the user over REST (issue 24): pin or unpin one of their messages.

A pin is a state change, so it travels in an event like every other one: the pinned state
(folded up to date from the ledger first) with the user's pin added or retired, appended by
the session service as a state update authored by "user". The ledger's messages are never
touched.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync

from runs.core.context.pinned import STATE_KEY, PinnedState, fold_pins, pin_event, unpin_event
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import OBJECT_STATE_UPDATE, Event
from sessions_app.core.session import SessionKey


async def _change(row: Any, event_id: str, *, pin: bool) -> PinnedState:
    service = DjangoSessionService()
    key = SessionKey(app=row.app, user_id=str(row.user_id), session_id=row.id)
    session = await service.get_session(key)
    assert session is not None  # the caller owns the row
    current = fold_pins(PinnedState.of_session_state(session.state), session.events)
    if pin:
        event = next((e for e in session.events if e.id == event_id), None)
        updated = pin_event(current, event=event, event_id=event_id)
    else:
        updated = unpin_event(current, event_id=event_id)
    if updated != PinnedState.of_session_state(session.state):
        await service.append_event(
            session, Event(author="user", object=OBJECT_STATE_UPDATE, state_delta={STATE_KEY: updated.to_dict()})
        )
    return updated


def session_pin(*, session: Any, event_id: str) -> PinnedState:
    """Pin the user's message `event_id` of `session` (an owned Session row) as theirs."""
    return async_to_sync(_change)(session, event_id, pin=True)


def session_unpin(*, session: Any, event_id: str) -> PinnedState:
    """Retire every active pin from the message `event_id` of `session`."""
    return async_to_sync(_change)(session, event_id, pin=False)
