"""OpenAI-compatible `/v1`, the request (runs.surfaces.openai_compat): the caller
authenticated, the JSON body read, and a chat completion body checked the way OpenAI would,
its whole message grammar parsed into `Message`s (`ChatRequest`). What it refuses is an
`OpenAIError`, answered in OpenAI's error format."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse

from agentsite.api.json_input import InputError, parse_json
from runs.attachment_input import openai_parts
from runs.auth import AuthenticationError, authenticate
from runs.core.attachments import AttachmentError
from runs.core.llm.base import ToolChoice, ToolSpec
from runs.core.output import OutputSpec, SchemaError, output_from_response_format
from runs.core.tools.client import (
    ClientToolError,
    openai_tool_choice,
    openai_tools,
)
from sessions_app.core.events import ContentPart, Message, ToolCall

logger = logging.getLogger(__name__)

_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
# Accepted and ignored: sampling is configured on the agent.
_IGNORED = {
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
    "user",
    "metadata",
    "store",
    "parallel_tool_calls",
    "service_tier",
    "reasoning_effort",
}


# Answers that must parse: their content is the final answer alone (ChatRequest.final_only).
_JSON_FORMATS = {"json_object", "json_schema"}


class OpenAIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JsonResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JsonResponse(body, status=self.status)


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    agent: str
    message: Message | None
    """The run's input: the last user message; None when the request answers client tools."""
    seed: tuple[Message, ...]
    stream: bool
    include_usage: bool
    output: OutputSpec | None = None
    """The answer's required shape, from `response_format` (issue 20): validated, retried."""
    final_only: bool = False
    """The content is the run's final answer alone (a JSON `response_format`: other text
    would break the JSON); otherwise every assistant message's text (`answer_text`)."""
    tool_results: tuple[Message, ...] = ()
    """The trailing `tool` messages: the client's results for calls of its own tools (issue
    20), the run's input in place of a user message."""
    tool_result_indexes: tuple[int, ...] = ()
    """Their positions in `messages`, to name the one the runner refuses."""
    client_tools: tuple[ToolSpec, ...] = ()
    """`tools`: the client's functions, offered beside the agent's own (issue 20)."""
    tool_choice: ToolChoice | None = None


def _content_text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("image_url", "file"):
                continue  # images and files: attachment_parts (issue 20)
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise OpenAIError(
                    400,
                    "content parts must be text, image_url or file",
                    param=f"messages[{index}].content",
                    code="unsupported_content",
                )
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise OpenAIError(400, "content must be a string or a list of content parts", param=f"messages[{index}].content")


def _attachment_parts(content: Any, index: int, role: str) -> tuple[ContentPart, ...]:
    """The images and files of a message's content array (issue 20, item 3): checked here,
    so a refused one stores nothing; stored as session artifacts by the runner."""
    try:
        return openai_parts(content, field=f"messages[{index}].content", role=role)
    except AttachmentError as exc:
        raise OpenAIError(exc.status, exc.message, param=exc.field, code=exc.code) from None


def _tool_calls(item: dict[str, Any], index: int) -> tuple[ToolCall, ...]:
    """An assistant message's `tool_calls` (or the legacy `function_call`) as tool calls."""
    where = f"messages[{index}]"
    legacy = item.get("function_call")
    raw = item.get("tool_calls")
    if legacy is not None:
        if raw:
            raise OpenAIError(
                400, f"{where} has both tool_calls and function_call; send one", param=f"{where}.function_call"
            )
        # The legacy grammar has no call ids: a `function` message answers the latest
        # unanswered call of its name, so the call gets an id only this history uses.
        return (_function(legacy, f"{where}.function_call", call_id=f"function_call_{index}"),)
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise OpenAIError(400, f"{where}.tool_calls must be an array", param=f"{where}.tool_calls")
    calls = []
    for number, call in enumerate(raw):
        at = f"{where}.tool_calls[{number}]"
        if not isinstance(call, dict):
            raise OpenAIError(400, f"{at} must be an object", param=at)
        if call.get("type", "function") != "function":
            raise OpenAIError(400, f"{at}.type must be 'function', got {call.get('type')!r}", param=f"{at}.type")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise OpenAIError(400, f"{at}.id must be a non-empty string", param=f"{at}.id")
        calls.append(_function(call.get("function"), f"{at}.function", call_id=call_id))
    return tuple(calls)


def _function(function: Any, at: str, *, call_id: str) -> ToolCall:
    if not isinstance(function, dict):
        raise OpenAIError(400, f"{at} must be an object with name and arguments", param=at)
    name, arguments = function.get("name"), function.get("arguments", "{}")
    if not isinstance(name, str) or not name:
        raise OpenAIError(400, f"{at}.name must be a non-empty string", param=f"{at}.name")
    if not isinstance(arguments, str):
        raise OpenAIError(
            400, f"{at}.arguments must be a string (JSON text), as OpenAI sends it", param=f"{at}.arguments"
        )
    return ToolCall(id=call_id, name=name, arguments=arguments)


def parse_messages(messages: list[Any]) -> list[Message]:
    """The whole chat-completions message grammar as `Message`s, checked as OpenAI checks it.

    Assistant `tool_calls` (and the legacy `function_call`) and the `tool` (legacy
    `function`) results answering them are kept: each result must answer an earlier call
    of this history that has no result yet. The `tool` results at the end are the client
    answering calls of its own tools (issue 20): they may also answer a call the session
    (`X-Session-Id`) is waiting on, which only the runner can check, so an id this history
    does not hold is kept for it (their tool name then comes from the session's call).
    """
    parsed: list[Message] = []
    unanswered: dict[str, str] = {}  # call id -> tool name, in call order
    trailing = len(messages)  # where the final run of tool results starts
    while trailing > 0 and isinstance(messages[trailing - 1], dict) and messages[trailing - 1].get("role") == "tool":
        trailing -= 1
    for index, item in enumerate(messages):
        role = _role(item, index)
        content = _content_text(item.get("content"), index)
        parts = _attachment_parts(item.get("content"), index, role)
        if role == "assistant":
            calls = _tool_calls(item, index)
            for number, call in enumerate(calls):
                if call.id in unanswered:
                    raise OpenAIError(
                        400,
                        f"tool call id {call.id!r} is already used by an unanswered call",
                        param=f"messages[{index}].tool_calls[{number}].id",
                    )
                unanswered[call.id] = call.name
            if not content and isinstance(item.get("refusal"), str):
                content = item["refusal"]
            parsed.append(Message(role="assistant", content=content, tool_calls=calls))
        elif role in ("tool", "function"):
            if index >= trailing and item.get("tool_call_id") not in unanswered:
                # Maybe a call the session waits on: the runner checks it, naming the id.
                parsed.append(Message(role="tool", content=content, tool_call_id=_call_id(item, index)))
                continue
            call_id = _answered_call(item, index, unanswered)
            parsed.append(
                Message(role="tool", content=content, tool_call_id=call_id, tool_name=unanswered.pop(call_id))
            )
        else:
            parsed.append(Message(role="system" if role == "developer" else role, content=content, parts=parts))
    return parsed


def _role(item: Any, index: int) -> str:
    """A message's role; SPEC 1.2.1: an empty (or missing) role on a message with a payload
    (text or attachments) is a user message, as the runner takes it. Without a payload the
    message says nothing, so it is refused naming the role."""
    if not isinstance(item, dict):
        raise OpenAIError(400, f"messages[{index}] must be an object", param=f"messages[{index}]")
    role = item.get("role")
    if role in ("", None):
        if _content_text(item.get("content"), index) or _attachment_parts(item.get("content"), index, "user"):
            logger.warning("messages[%d] has no role: taken as a user message (SPEC 1.2.1)", index)
            return "user"
    if role not in _ROLES:
        raise OpenAIError(
            400, f"messages[{index}].role must be one of {sorted(_ROLES)}", param=f"messages[{index}].role"
        )
    return str(role)


def _answered_call(item: dict[str, Any], index: int, unanswered: dict[str, str]) -> str:
    """The id of the call a `tool` or legacy `function` message answers."""
    if item["role"] == "function":
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise OpenAIError(
                400,
                f"messages[{index}].name must name the function this result is for",
                param=f"messages[{index}].name",
            )
        ids = [i for i, n in unanswered.items() if n == name and i.startswith("function_call_")]
        if not ids:
            raise OpenAIError(
                400,
                f"messages[{index}] answers function {name!r}, but no earlier assistant "
                "function_call of that name is unanswered",
                param=f"messages[{index}].name",
            )
        return ids[-1]
    call_id = _call_id(item, index)
    if call_id not in unanswered:
        raise OpenAIError(
            400,
            f"messages[{index}].tool_call_id {call_id!r} answers no earlier assistant tool call "
            "(or one already answered)",
            param=f"messages[{index}].tool_call_id",
        )
    return call_id


def _call_id(item: dict[str, Any], index: int) -> str:
    call_id = item.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise OpenAIError(
            400, f"messages[{index}].tool_call_id must be a non-empty string", param=f"messages[{index}].tool_call_id"
        )
    return call_id


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate a chat completion body the way OpenAI would, refusing what we cannot honour."""
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError(400, "you must provide a model parameter (the agent's name)", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "messages must be a non-empty array", param="messages")
    if body.get("n", 1) != 1:
        raise OpenAIError(400, "only n=1 is supported", param="n", code="unsupported_parameter")
    if body.get("logprobs") or body.get("top_logprobs"):
        raise OpenAIError(400, "logprobs are not supported", param="logprobs", code="unsupported_parameter")
    if body.get("functions") or body.get("function_call"):
        raise OpenAIError(
            400,
            "the legacy functions parameter is not supported; declare them as tools",
            param="functions" if body.get("functions") else "function_call",
            code="unsupported_parameter",
        )
    try:  # issue 20: the client's tools, offered beside the agent's own
        client_tools = openai_tools(body.get("tools"))
        tool_choice = openai_tool_choice(body.get("tool_choice"))
    except ClientToolError as exc:
        raise OpenAIError(400, str(exc), param=exc.param, code=exc.code) from None
    response_format = body.get("response_format")
    try:
        output = output_from_response_format(response_format)
    except SchemaError as exc:  # refused before anything is stored
        raise OpenAIError(400, str(exc), param=exc.param, code="invalid_response_format") from None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise OpenAIError(400, "stream must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise OpenAIError(400, "stream_options must be an object", param="stream_options")

    parsed = parse_messages(messages)
    last = parsed[-1]
    if last.role == "tool":  # the client answers calls of its tools (issue 20)
        start = len(parsed)
        while start > 0 and parsed[start - 1].role == "tool":
            start -= 1
        return ChatRequest(
            agent=model,
            message=None,
            seed=tuple(m for m in parsed[:start] if m.has_payload),
            tool_results=tuple(parsed[start:]),
            tool_result_indexes=tuple(range(start, len(parsed))),
            stream=stream,
            include_usage=bool(options.get("include_usage")),
            output=output,
            final_only=isinstance(response_format, dict) and response_format.get("type") in _JSON_FORMATS,
            client_tools=client_tools,
            tool_choice=tool_choice,
        )
    if last.role != "user" or not (last.content.strip() or last.attachments):
        raise OpenAIError(
            400, "the last message must be a non-empty user message", param=f"messages[{len(parsed) - 1}]"
        )
    limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
    if len(last.content) > limit:
        # The same limit as every other surface (REST, websocket, AG-UI).
        raise OpenAIError(
            413,
            f"the message is {len(last.content)} characters; the limit is {limit}",
            param=f"messages[{len(parsed) - 1}].content",
            code="message_too_large",
        )
    return ChatRequest(
        agent=model,
        message=last,
        seed=tuple(m for m in parsed[:-1] if m.has_payload),
        stream=stream,
        include_usage=bool(options.get("include_usage")),
        output=output,
        final_only=isinstance(response_format, dict) and response_format.get("type") in _JSON_FORMATS,
        client_tools=client_tools,
        tool_choice=tool_choice,
    )


def request_body(request: HttpRequest) -> Any:
    """The request's JSON body; `OpenAIError` 413 when too large, 400 naming the problem."""
    try:
        return parse_json(request.body or b"")
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raise OpenAIError(
            413, f"request body is larger than the limit of {limit} bytes", code="body_too_large"
        ) from None
    except InputError as exc:
        if exc.code == "malformed_json":
            raise OpenAIError(400, f"the body is {exc.problem}") from None
        raise OpenAIError(400, exc.message("brackets"), param=exc.field("brackets"), code=exc.code) from None


async def api_user(request: HttpRequest) -> Any:
    """The authenticated user of a /v1 request; `OpenAIError` 401 otherwise."""
    try:
        user = await authenticate(request)
    except AuthenticationError as exc:
        raise OpenAIError(401, str(exc), type="authentication_error", code="invalid_api_key") from None
    if not user.is_authenticated:
        raise OpenAIError(401, "missing API key", type="authentication_error", code="invalid_api_key")
    return user
