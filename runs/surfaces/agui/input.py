"""AG-UI over HTTP, the request (runs/surfaces/agui/views.py): the caller authenticated, the
body read as a `RunAgentInput` and checked, and the run's input found in it (`AguiTurn`); a
request refused here is answered in the API envelope before any stream starts."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
from ag_ui.core import RunAgentInput, Tool, ToolMessage, UserMessage
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions
from rest_framework.request import Request

from agentsite.api.json_input import InputError, parse_json
from agentsite.errors import envelope
from agentsite.threads import DB_EXECUTOR
from runs.attachment_input import agui_parts
from runs.auth import BearerTokenAuthentication, SessionAuthentication
from runs.core.attachments import AttachmentError
from runs.core.llm.base import ToolSpec
from runs.core.output import OutputSpec, SchemaError
from runs.core.protocols.agui import history_messages, text_of
from runs.core.tools.client import (
    ClientToolError,
    check_unique,
    client_tool_spec,
)
from sessions_app.core.events import ContentPart, Message

logger = logging.getLogger(__name__)

_SESSION_ID_MAX = 64
_MESSAGE_ROLES = {"developer", "system", "assistant", "user", "tool", "activity", "reasoning"}
_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AguiRequestError(Exception):
    """An error answered before the stream starts, in the API envelope."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def response(self) -> JsonResponse:
        return JsonResponse(envelope(self.code, self.message, self.field), status=self.status)


@dataclass(frozen=True, kw_only=True)
class AguiTurn:
    """What a RunAgentInput asks for: a user message, or client-side tool results."""

    thread_id: str
    client_run_id: str
    text: str | None = None
    tool_messages: tuple[ToolMessage, ...] = ()
    tool_indexes: tuple[int, ...] = ()  # their positions in `messages`, to name a bad field
    history: tuple[Message, ...] = ()
    """The messages before the input: seeded history for a new thread (SPEC 1.4)."""
    output: OutputSpec | None = None
    """`forwardedProps.outputSchema`: the answer's required shape (issue 20)."""
    client_tools: tuple[ToolSpec, ...] = ()
    """`tools`: the client's frontend tools, offered beside the agent's own (issue 25, item 9)."""
    parts: tuple[ContentPart, ...] = ()
    """The user message's images and documents (issue 20), checked, not stored yet."""


# -- authentication --------------------------------------------------------------------------


def _authenticate_sync(request: HttpRequest) -> Any:
    """DRF's bearer-token, then session authentication (which enforces CSRF); None when
    the request carries neither."""
    wrapped = Request(request)
    for authenticator in (BearerTokenAuthentication(), SessionAuthentication()):
        found = authenticator.authenticate(wrapped)
        if found is not None:
            return found[0]
    return None


async def authenticate(request: HttpRequest) -> Any:
    """The authenticated user, or raise `AguiRequestError` (401, or 403 for a missing CSRF token)."""
    try:
        user = await sync_to_async(_authenticate_sync, thread_sensitive=False, executor=DB_EXECUTOR)(request)
    except exceptions.AuthenticationFailed as exc:
        raise AguiRequestError(401, "authentication_failed", str(exc.detail)) from None
    except exceptions.PermissionDenied as exc:
        raise AguiRequestError(403, "permission_denied", str(exc.detail)) from None
    if user is None:
        raise AguiRequestError(
            401,
            "not_authenticated",
            "authentication credentials were not provided: send 'Authorization: Bearer <token>'",
        )
    return user


# -- input -------------------------------------------------------------------------------------


def _field_path(loc: Sequence[int | str]) -> str:
    """pydantic's error location as a dotted camelCase path, without union tags
    (`("messages", 0, "tool", "toolCallId")` -> `messages.0.toolCallId`)."""
    parts: list[str] = []
    previous: int | str | None = None
    for item in loc:
        if isinstance(item, int):
            parts.append(str(item))
        elif (
            _FIELD.match(item) and item not in _TYPE_TAGS and not (isinstance(previous, int) and item in _MESSAGE_ROLES)
        ):
            parts.append(item)
        previous = item
    return ".".join(parts)


def _invalid(message: str, field: str | None) -> AguiRequestError:
    return AguiRequestError(422, "invalid_input", message, field)


def _load_json(request: HttpRequest) -> Any:
    try:
        return parse_json(request.body or b"")
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raise AguiRequestError(
            413, "body_too_large", f"request body is larger than the limit of {limit} bytes"
        ) from None
    except InputError as exc:
        message = f"the body is {exc.problem}" if exc.code == "malformed_json" else exc.message()
        raise AguiRequestError(400, exc.code, message, exc.field()) from None


def parse_run_input(body: Any) -> AguiTurn:
    """Validate a RunAgentInput and find the run's input in it (SPEC 12.1 input parsing)."""
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object (a RunAgentInput)", None)
    try:
        run_input = RunAgentInput.model_validate(_roles_normalized(body))
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = _field_path(first["loc"])
        raise _invalid(f"{field or 'input'}: {first['msg']}", field or None) from None
    output = _output_schema(run_input.forwarded_props)
    client_tools = _frontend_tools(run_input.tools)
    thread_id = run_input.thread_id
    if not thread_id.strip() or len(thread_id) > _SESSION_ID_MAX:
        raise _invalid(f"threadId must be 1 to {_SESSION_ID_MAX} characters, got {thread_id!r}", "threadId")
    messages = run_input.messages
    if not messages:
        raise _invalid("messages must not be empty", "messages")
    last_index = len(messages) - 1
    last = messages[last_index]
    if isinstance(last, UserMessage):
        parts = _media_parts(last.content, last_index)
        text = _text([p for p in last.content if p.type == "text"] if parts else last.content, last_index)
        if not text.strip() and not parts:
            raise _invalid("the last user message is empty", f"messages.{last_index}.content")
        limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
        if len(text) > limit:
            raise _invalid(
                f"the message is {len(text)} characters; the limit is {limit}", f"messages.{last_index}.content"
            )
        return AguiTurn(
            thread_id=thread_id,
            client_run_id=run_input.run_id,
            text=text,
            history=history_messages(messages[:last_index]),
            output=output,
            client_tools=client_tools,
            parts=parts,
        )
    if isinstance(last, ToolMessage):
        start = last_index
        while start > 0 and isinstance(messages[start - 1], ToolMessage):
            start -= 1
        tools: list[ToolMessage] = []
        for index in range(start, last_index + 1):
            tool = messages[index]
            assert isinstance(tool, ToolMessage)
            if not tool.tool_call_id.strip():
                raise _invalid("a tool message needs its toolCallId", f"messages.{index}.toolCallId")
            _text(tool.content, index)
            tools.append(tool)
        return AguiTurn(
            thread_id=thread_id,
            client_run_id=run_input.run_id,
            tool_messages=tuple(tools),
            tool_indexes=tuple(range(start, last_index + 1)),
            history=history_messages(messages[:start]),
            output=output,
            client_tools=client_tools,
        )
    raise _invalid(
        f"the last message must have role 'user' or 'tool', got {last.role!r}", f"messages.{last_index}.role"
    )


def _roles_normalized(body: dict[str, Any]) -> dict[str, Any]:
    """The body with SPEC 1.2.1 applied: a message whose role is empty (or missing) and that
    has a payload (content) is a user message, as the runner takes it. Done before the
    schema check, whose messages are a union chosen by role; a message without a payload
    keeps its role and is refused there, naming it."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    normalized = []
    for index, item in enumerate(messages):
        if isinstance(item, dict) and item.get("role") in ("", None) and item.get("content"):
            logger.warning("messages.%d has no role: taken as a user message (SPEC 1.2.1)", index)
            item = {**item, "role": "user"}
        normalized.append(item)
    return {**body, "messages": normalized}


def _output_schema(props: Any) -> OutputSpec | None:
    """`forwardedProps.outputSchema` as an output spec; 400 naming the problem when it is not
    a valid JSON Schema."""
    schema = props.get("outputSchema") if isinstance(props, dict) else None
    if schema is None:
        return None
    try:
        return OutputSpec.of(schema)
    except SchemaError as exc:
        raise AguiRequestError(400, "invalid_output_schema", str(exc), "forwardedProps.outputSchema") from None


def _frontend_tools(tools: Sequence[Tool]) -> tuple[ToolSpec, ...]:
    """`RunAgentInput.tools` as tool specs; 400 naming the field of a definition that is not
    valid (a bad name, parameters that are not a JSON Schema of an object) or a duplicate."""
    try:
        specs = tuple(
            client_tool_spec(tool.name, tool.description, tool.parameters, at=f"tools.{index}")
            for index, tool in enumerate(tools)
        )
        check_unique(specs, lambda index: f"tools.{index}.name")
    except ClientToolError as exc:
        raise AguiRequestError(400, exc.code, str(exc), exc.param) from None
    return specs


def _media_parts(content: Any, index: int) -> tuple[ContentPart, ...]:
    try:
        return agui_parts(content, field=f"messages.{index}.content")
    except AttachmentError as exc:
        raise AguiRequestError(exc.status, exc.code, exc.message, exc.field) from None


def _text(content: Any, index: int) -> str:
    if isinstance(content, list) and any(getattr(part, "type", None) != "text" for part in content):
        raise _invalid("only text content is supported", f"messages.{index}.content")
    return text_of(content)
