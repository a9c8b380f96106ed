"""Redo a turn over the session websocket (issue 21): the `regenerate` and `edit` frames,
the websocket's twin of `runs/surfaces/turn_apis.py`.

    {"type": "regenerate"}
    {"type": "edit", "event_id": str, "message": str}

Each is answered with `{"type": "run.accepted", "run_id", "turn_event_id", "regenerates" |
"edit_of"}` (the REST answer's ids), then the new run's events, or with an error frame whose
`code` and `field` are REST's (`runs.turns` decides both): `nothing_to_regenerate`,
`not_editable` and `not_found` naming `event_id`, `run_active`; the frame's own shape errors
use the socket's codes (`invalid_frame`, `message_too_large`, naming the field).
`runs/surfaces/websocket/consumers.py` hands these frames here; the protocol is in docs/websocket.md.
"""

from __future__ import annotations

from typing import Any, Final

from django.conf import settings

from runs import turns
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call

KINDS: Final = frozenset({"regenerate", "edit"})


class _Refused(Exception):
    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


async def answer(kind: str, frame: dict[str, Any], *, user: Any, session_id: str) -> dict[str, Any]:
    """The frame that answers a `regenerate` or `edit` frame (`kind`) from `user`'s socket on
    `session_id`: `run.accepted` once the new turn's run has started, else `error`."""
    event_id: str | None = None
    message: str | None = None
    try:
        if kind == "edit":
            event_id = _text(frame, "event_id")
            message = _message(frame)
        done = await _redo(user=user, session_id=session_id, event_id=event_id, message=message)
    except _Refused as exc:
        error: dict[str, Any] = {"code": exc.code, "message": exc.message}
        if exc.field:
            error["field"] = exc.field
        return {"type": "error", "error": error}
    return {
        "type": "run.accepted",
        "run_id": done.record.id,
        "turn_event_id": done.event_id,
        done.kind: done.of_event_id,
    }


@db_call
def _redo(*, user: Any, session_id: str, event_id: str | None, message: str | None) -> turns.RedoneTurn:
    # The socket's owner was checked at the handshake; the chat may have been deleted since.
    session = session_selectors.session_get(user=user, session_id=session_id)
    if session is None:
        raise _Refused("not_found", f"session {session_id!r} not found")
    try:
        if event_id is None or message is None:
            return turns.session_regenerate(user=user, session=session)
        return turns.session_message_edit(user=user, session=session, event_id=event_id, text=message)
    except turns.TurnError as exc:
        raise _Refused(exc.code, exc.message, exc.field) from None


def _text(frame: dict[str, Any], field: str) -> str:
    """The frame's `field`: a non-empty string that can be stored."""
    value = frame.get(field)
    if not isinstance(value, str) or not value.strip():
        raise _Refused("invalid_frame", f"{field} must be a non-empty string", field)
    # PostgreSQL keeps no NUL, UTF-8 no lone surrogate: refused here, as REST's fields do.
    if (index := value.find("\x00")) >= 0:
        raise _Refused("invalid_frame", f"{field} contains a NUL character (U+0000) at index {index}", field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        at = exc.start
        raise _Refused(
            "invalid_frame", f"{field} contains a lone surrogate (U+{ord(value[at]):04X}) at index {at}", field
        ) from None
    return value


def _message(frame: dict[str, Any]) -> str:
    """The edited text: as REST's, non-empty and within AGENTSITE_MAX_MESSAGE_CHARS."""
    message = _text(frame, "message")
    limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
    if len(message) > limit:
        raise _Refused("message_too_large", f"message is {len(message)} characters; the limit is {limit}", "message")
    return message
