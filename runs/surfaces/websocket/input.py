"""The session websocket's client frames, checked (runs/surfaces/websocket/consumers.py): a bad frame is
answered with an error frame and the socket stays open (docs/websocket.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def _error_frame(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if field:
        error["field"] = field
    return {"type": "error", "error": error}


def _text_problem(value: str) -> str | None:
    """Why a string cannot be stored (PostgreSQL keeps no NUL, UTF-8 no lone surrogate)."""
    if (index := value.find("\x00")) >= 0:
        return f"contains a NUL character (U+0000) at index {index}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate (U+{ord(value[exc.start]):04X}) at index {exc.start}"
    return None


def _checked_text(frame: dict[str, Any], field: str) -> Any:
    value = frame.get(field)
    if isinstance(value, str) and (problem := _text_problem(value)) is not None:
        raise FrameError("invalid_frame", f"{field} {problem}", field)
    return value


class FrameError(Exception):
    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.frame = _error_frame(code, message, field)


def _frame_message(frame: dict[str, Any], *, empty_ok: bool = False) -> str:
    """The frame's `message`: a non-empty string within the size limit (empty allowed
    beside attachments)."""
    message = _checked_text(frame, "message")
    if not isinstance(message, str) or (not message.strip() and not empty_ok):
        raise FrameError("invalid_frame", "message must be a non-empty string", "message")
    limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
    if len(message) > limit:
        raise FrameError("message_too_large", f"message is {len(message)} characters; the limit is {limit}", "message")
    return message
