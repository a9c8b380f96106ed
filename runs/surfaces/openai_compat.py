"""OpenAI-compatible endpoint: `POST /v1/chat/completions`, `GET /v1/models` and
`GET /v1/models/<id>` (SPEC 12.3).

`model` names an agent; the API token is the SDK's `api_key`. The last message is the
run's input; earlier messages seed a new, empty session, in the whole message grammar
(assistant `tool_calls` and `tool` results too: the client's tool rounds, stored as such and
shown to the agent as context, runs.core.context.seeding); `X-Session-Id` continues a
session and is echoed back. Without it, a resent history that is exactly the chat of one of
the user's sessions (its fingerprint, taken after the session's last /v1 run, the ledger
unchanged since: runs.core.context.fingerprint) continues that session instead, nothing
seeded again, `X-Session-Match` saying so (issue 25, item 5). The content of an answer is the text of each assistant message
of the run, separated by a blank line, the final answer last, whether streamed or not
(`answer_text`); streaming sends `chat.completion.chunk` events (role first, then text
deltas) through tool rounds until the run's final answer, then `finish_reason`, a usage
chunk when asked, and `data: [DONE]`. The request's `tools` are the client's own functions,
offered beside the agent's (issue 20, runs.core.tools.client): a call of one answers
`finish_reason: "tool_calls"` with the call and pauses the run (`requires_action`), the call
waiting in the ledger; the next request's trailing `tool` results continue that same run;
`tool_choice` binds the first model step. `Idempotency-Key` makes a repeated request answer
with the first run's result (joining it while it runs); a run that failed answers 422, which
SDKs do not retry. Errors use OpenAI's error format. Sampling parameters are accepted and
ignored: they are settings of the agent, not of the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agentsite.api.json_input import InputError, check_text, parse_json
from agentsite.runtime import run_manager
from runs import selectors as run_selectors
from runs.attachment_input import openai_parts
from runs.auth import AuthenticationError, authenticate
from runs.core.attachments import AttachmentError
from runs.core.context.fingerprint import conversation_after, history_fingerprint
from runs.core.context.seeding import own_tool_names
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, TooManyRunsError, UsageError
from runs.core.invocation import RunOptions
from runs.core.llm.base import ToolChoice, ToolSpec
from runs.core.output import OutputSpec, SchemaError, output_from_response_format
from runs.core.records import REQUIRES_ACTION, RunRecord
from runs.core.runner import Runner
from runs.core.tools.client import (
    ClientToolError,
    check_choice,
    check_clashes,
    client_calls,
    openai_tool_choice,
    openai_tools,
    takes_client_tools,
)
from sessions_app import fingerprints
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import OBJECT_CHUNK, ContentPart, Event, Message, ToolCall
from sessions_app.core.session import SessionNotFoundError

logger = logging.getLogger(__name__)

SESSION_HEADER = "X-Session-Id"
RUN_HEADER = "X-Run-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
MATCH_HEADER = "X-Session-Match"
"""Issue 25, item 5: `history` when a request without `X-Session-Id` continued the session
holding its resent history; `history-ambiguous` when several of the user's sessions held it
(the most recently updated one was continued)."""
REQUEST_ID_MAX = 64  # Run.request_id's length
# Between the texts of two assistant messages of one answer (a step's text before its tool
# calls, then the final answer): without it they run together ("...first.The certificate...").
PART_SEPARATOR = "\n\n"
SESSION_ID_MAX = 64  # the column's length
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
# A run that answers: it completed, or it paused for the client's tool calls (issue 20).
_ANSWERED = ("completed", REQUIRES_ACTION)


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


def _chunk(
    run_id: str,
    agent: str,
    created: int,
    delta: dict[str, Any],
    finish: str | None = None,
    usage: dict[str, int] | None = None,
) -> str:
    body: dict[str, Any] = {
        "id": f"chatcmpl-{run_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": agent,
        "choices": [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _usage(record: RunRecord) -> dict[str, int]:
    return {
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "total_tokens": record.prompt_tokens + record.completion_tokens,
    }


def run_failure(record: RunRecord) -> OpenAIError:
    """A run that started and ended without an answer: 422, which the OpenAI SDK (and the
    frameworks built on it) does not retry. Retrying would start the run again and write the
    user turn a second time; a 5xx is kept for requests that never reached a run."""
    error = record.error or {}
    return OpenAIError(
        422,
        f"the run {record.status}: {error.get('message', 'no answer')}",
        type="run_error",
        code=str(error.get("type") or record.status),
    )


def failure_response(record: RunRecord, headers: dict[str, str]) -> JsonResponse:
    """A failed run's answer (`run_failure`), with `headers` and `x-should-retry: false`."""
    response = run_failure(record).response()
    for name, value in {**headers, "x-should-retry": "false"}.items():
        response[name] = value
    return response


def answer_part(event: Event) -> str | None:
    """The text an event adds to the answer: an assistant message's text (a model step's,
    also beside its tool calls), never a delta, an error or a tool result."""
    message = event.message
    if message is None or message.role != "assistant" or event.partial or event.is_error or not message.content:
        return None
    return message.content


def answer_text(events: Iterable[Event]) -> str:
    """The content of a completion: the text of each of the run's assistant messages, in
    order, separated by `PART_SEPARATOR` (the streamed content is the same, chunk by chunk)."""
    return PART_SEPARATOR.join(part for event in events if (part := answer_part(event)) is not None)


def requested_session(request: HttpRequest) -> str | None:
    """`X-Session-Id`, refused when no session could have it (too long for the column,
    or text the database cannot store)."""
    return _checked_header(request, SESSION_HEADER, SESSION_ID_MAX, code="invalid_session_id")


def idempotency_key(request: HttpRequest) -> str | None:
    """`Idempotency-Key`: the run's request id, so it is refused as a request id would be."""
    key = _checked_header(request, IDEMPOTENCY_HEADER, REQUEST_ID_MAX, code="invalid_idempotency_key")
    if key is not None and not key.strip():
        raise OpenAIError(
            400, f"{IDEMPOTENCY_HEADER} must not be empty", param=IDEMPOTENCY_HEADER, code="invalid_idempotency_key"
        )
    return key


def _checked_header(request: HttpRequest, name: str, limit: int, *, code: str) -> str | None:
    value = request.headers.get(name)
    if value is None:
        return None
    if len(value) > limit:
        raise OpenAIError(400, f"{name} must be at most {limit} characters, got {len(value)}", param=name, code=code)
    try:
        check_text(value, name)
    except InputError as exc:
        raise OpenAIError(400, exc.message(), param=name, code=code) from None
    return value


async def open_session(user: Any, session_id: str | None) -> str | None:
    """The session to continue: the user's own, a new one with the client's id, or None."""
    if not session_id:
        return None
    if await db_call(session_selectors.session_of_another)(user=user, session_id=session_id):
        raise OpenAIError(404, f"session {session_id!r} not found", param=SESSION_HEADER, code="session_not_found")
    return session_id


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


@dataclass(frozen=True, kw_only=True)
class RunFields:
    """How a surface names the request fields `start_run` refuses (chat completions and
    the Responses API spell them differently)."""

    tool_name: Callable[[int], str]
    """The field of the i-th client tool's name."""
    tool_result: Callable[[str], str | None]
    """The field of the tool result a runner's refusal (its message) names."""
    tool_error: Callable[[ClientToolError], OpenAIError] | None = None
    """The error for a refused client tool or tool_choice; None: as the check words it."""
    session: str | None = None
    """The parameter to name when the runner finds no such session."""


@dataclass(frozen=True, kw_only=True)
class StartedRun:
    """A run a `/v1` request started: its record, its events as they happen, and the
    response headers naming its session and run (and how the session was found)."""

    record: RunRecord
    events: AsyncIterator[Event]
    headers: dict[str, str]


async def start_run(
    manager: Any,
    user: Any,
    chat: ChatRequest,
    *,
    key: str | None,
    find_session: Callable[[], Awaitable[str | None]],
    match_history: bool,
    replay: Callable[[RunRecord], Awaitable[HttpResponseBase]],
    options: RunOptions,
    fields: RunFields,
    turn_extensions: dict[str, Any] | None = None,
) -> StartedRun | HttpResponseBase:
    """The flow chat completions and responses share: the agent and the client's tools
    checked (refused before anything is stored), the session found (`find_session`; else,
    with `match_history`, the one of the user's sessions holding the resent chat), a request
    whose `Idempotency-Key` already made a run answered by `replay`, else the run started.
    Raises `OpenAIError` for what it refuses."""
    try:
        server_tools, kind = await manager.acall(lambda runner: check_agent(runner, chat.agent))
    except AgentNotFoundError:
        raise OpenAIError(
            404,
            f"the model {chat.agent!r} does not exist (models are agent names; see /v1/models)",
            param="model",
            code="model_not_found",
        ) from None
    if chat.client_tools and kind != "llm":
        raise OpenAIError(
            400,
            f"the model {chat.agent!r} is a {kind} agent, which cannot call client tools; use an LLM agent",
            param="tools",
            code="unsupported_client_tools",
        )
    try:
        check_clashes(chat.client_tools, server_tools, fields.tool_name, agent=chat.agent)
        check_choice(chat.tool_choice, {*server_tools, *(t.name for t in chat.client_tools)})
    except ClientToolError as exc:
        if fields.tool_error is not None:
            raise fields.tool_error(exc) from None
        raise OpenAIError(400, str(exc), param=exc.param, code=exc.code) from None
    session_id = await find_session()
    match, seed = None, chat.seed
    if match_history and session_id is None and chat.seed:
        # A stateless client (the Agents SDK's default) resending its chat: continue the
        # session that holds it.
        match = await db_call(fingerprints.session_of_history)(
            user=user, fingerprint=history_fingerprint(chat.agent, chat.seed)
        )
        if match is not None:
            session_id, seed = match.session_id, ()
    if key is not None:
        earlier = await db_call(run_selectors.run_by_request)(user=user, request_id=key)
        if earlier is not None:
            return await replay(earlier)
    listener, events = manager.bridge()

    async def start(runner: Runner) -> RunRecord:
        handle = await runner.start(
            user_id=str(user.pk),
            message=chat.message,
            session_id=session_id,
            agent=chat.agent,
            seed=seed,
            listeners=[listener],
            tool_results=chat.tool_results,
            request_id=key,
            options=options,
            turn_extensions=turn_extensions,
        )
        return handle.record

    try:
        # Shielded: a client that gives up (its timeout) while the run starts must not
        # cancel the start; the run goes on, and its retry (same Idempotency-Key) joins it.
        record = await asyncio.shield(manager.acall(start))
    except TooManyRunsError as exc:
        raise OpenAIError(429, str(exc), type="rate_limit_error", code="too_many_runs") from None
    except DuplicateRequestError:
        if key is None:  # a request id the runner made itself is never a duplicate
            raise
        # The same key arrived twice at once: the other request started the run; join it.
        return await replay(await run_of_key(user, key))
    except SessionNotFoundError as exc:
        raise OpenAIError(400, str(exc), param=fields.session) from None
    except UsageError as exc:  # e.g. a tool result for no call the session waits on: nothing stored
        raise OpenAIError(
            400, str(exc), param=fields.tool_result(str(exc)), code="unknown_tool_call" if chat.tool_results else None
        ) from None
    headers = {SESSION_HEADER: record.session_id, RUN_HEADER: record.id}
    if match is not None:
        headers[MATCH_HEADER] = "history-ambiguous" if match.ambiguous else "history"
    return StartedRun(record=record, events=events, headers=headers)


@dataclass(frozen=True, kw_only=True)
class Remember:
    """Records the chat the client now holds, for its next request to find this session
    (runs.core.context.fingerprint); only when `fresh`, the ledger being that chat (the
    session is new or was found by it): a session the request named may hold turns the
    client does not resend."""

    user: Any
    chat: ChatRequest
    session_id: str
    fresh: bool

    async def __call__(self, text: str, calls: Sequence[ToolCall]) -> None:
        if not self.fresh:
            return
        chat = self.chat
        sent = (*chat.seed, *((chat.message,) if chat.message is not None else chat.tool_results))
        fingerprint = history_fingerprint(chat.agent, conversation_after(sent, text, calls))
        await db_call(fingerprints.remember_history)(
            user=self.user, session_id=self.session_id, fingerprint=fingerprint
        )


@csrf_exempt
@require_POST
async def chat_completions(request: HttpRequest) -> HttpResponseBase:
    try:
        user = await authenticate(request)
        if not user.is_authenticated:
            raise OpenAIError(
                401,
                "missing API key: send 'Authorization: Bearer <token>'",
                type="authentication_error",
                code="invalid_api_key",
            )
        chat = parse_chat_request(request_body(request))
        session_header = requested_session(request)
        key = idempotency_key(request)
        manager = run_manager()

        async def replay(record: RunRecord) -> HttpResponseBase:
            return await _replay(manager, record, chat, session_header)

        started = await start_run(
            manager,
            user,
            chat,
            key=key,
            find_session=lambda: open_session(user, session_header),
            match_history=session_header is None,
            replay=replay,
            options=RunOptions(output=chat.output, client_tools=chat.client_tools, tool_choice=chat.tool_choice),
            fields=RunFields(
                tool_name=lambda i: f"tools[{i}].function.name",
                tool_result=lambda problem: _result_param(chat, problem),
            ),
        )
    except AuthenticationError as exc:
        return OpenAIError(401, str(exc), type="authentication_error", code="invalid_api_key").response()
    except OpenAIError as exc:
        return exc.response()
    if not isinstance(started, StartedRun):  # a replay, streamed or not
        return started
    remember = Remember(user=user, chat=chat, session_id=started.record.session_id, fresh=session_header is None)
    if chat.stream:
        return event_stream(_stream(manager, started.record, chat, started.events, remember), started.headers)
    done = await run_answer(manager, started, chat, remember)
    if isinstance(done, HttpResponse):
        return done
    return _completion(done.record, chat, done.text, done.headers, calls=done.calls)


def event_stream(chunks: AsyncIterator[str], headers: dict[str, str]) -> StreamingHttpResponse:
    """Server-sent events (`chunks`, each a whole event) as the response, never cached."""
    response = StreamingHttpResponse(chunks, content_type="text/event-stream", headers=headers)
    response["Cache-Control"] = "no-cache"
    return response


def waiting_calls(events: Iterable[Event]) -> list[ToolCall]:
    """The calls of the client's tools the run ended waiting for (issue 20): those of its
    last step, when that step called client tools."""
    calls: list[ToolCall] = []
    for event in events:
        if event.message is not None and event.message.role == "assistant" and not event.partial:
            calls = client_calls(event)
    return calls


def _wire_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]


def _completion(
    record: RunRecord, chat: ChatRequest, content: str, headers: dict[str, str], *, calls: Sequence[ToolCall] = ()
) -> JsonResponse:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:  # the run waits for the client's results, as OpenAI's answer to a tool call reads
        message = {"role": "assistant", "content": content or None, "tool_calls": _wire_calls(calls)}
    return JsonResponse(
        {
            "id": f"chatcmpl-{record.id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": chat.agent,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _usage(record),
        },
        headers=headers,
    )


async def run_of_key(user: Any, key: str) -> RunRecord:
    """The run a concurrent request with the same key registered; its row may still be on
    its way to the database (the runner refuses a duplicate before the row is written)."""
    for _ in range(50):
        record = await db_call(run_selectors.run_by_request)(user=user, request_id=key)
        if record is not None:
            return record
        await asyncio.sleep(0.1)
    raise OpenAIError(
        409,
        f"a request with {IDEMPOTENCY_HEADER} {key!r} is starting; retry",
        param=IDEMPOTENCY_HEADER,
        code="idempotency_key_in_use",
    )


@dataclass(frozen=True, kw_only=True)
class Answered:
    """A run that answered: its record, the answer's text (the final answer alone for a
    `final_only` request, else every assistant message's, `answer_text`), the client tool
    calls it waits for, and the response headers."""

    record: RunRecord
    text: str
    calls: list[ToolCall]
    headers: dict[str, str]


async def run_answer(
    manager: Any, started: StartedRun, chat: ChatRequest, remember: Remember
) -> Answered | HttpResponse:
    """A started run's answer once it has ended (the failure response when it failed),
    remembered for the client's next request to find its session."""
    seen = [event async for event in started.events]  # the run's end ends the iterator
    final = await manager.await_run(started.record.id, 5.0) or started.record
    if final.status not in _ANSWERED:
        return failure_response(final, started.headers)
    text = final.answer if chat.final_only else answer_text(seen)
    calls = waiting_calls(seen)
    await remember(text, calls)
    return Answered(record=final, text=text, calls=calls, headers=started.headers)


async def replayed_run(
    manager: Any, record: RunRecord, chat: ChatRequest, session_header: str | None, *, input_name: str
) -> Answered | HttpResponse:
    """The run whose `Idempotency-Key` this request repeats, waited for while in flight;
    its failure response when it failed. A different request under the same key (`input_name`
    says what the request's input is called) is refused, as is one whose run still runs."""
    turn = await db_call(run_selectors.run_turn)(record=record)
    for _ in range(50):  # a concurrent request's run row is written before its turn is
        if turn:
            break
        await asyncio.sleep(0.1)
        turn = await db_call(run_selectors.run_turn)(record=record)
    if (
        record.agent != chat.agent
        or (session_header is not None and session_header != record.session_id)
        or not same_input(turn, chat)
    ):
        raise OpenAIError(
            400,
            f"{IDEMPOTENCY_HEADER} {record.request_id!r} was used for another request (model, "
            f"{input_name} or session differ); use a new key for a new request",
            param=IDEMPOTENCY_HEADER,
            code="idempotency_key_reused",
        )
    final = await run_ended(manager, record)
    headers = {SESSION_HEADER: record.session_id, RUN_HEADER: record.id, REPLAYED_HEADER: "true"}
    if not final.finished:
        raise OpenAIError(
            409,
            f"the run {record.id} of this {IDEMPOTENCY_HEADER} is still in progress; retry later",
            param=IDEMPOTENCY_HEADER,
            code="run_in_progress",
        )
    if final.status not in _ANSWERED:
        return failure_response(final, headers)
    if not record.finished:
        turn = await db_call(run_selectors.run_turn)(record=final)  # what the run wrote since
    text = final.answer if chat.final_only else answer_text(turn)
    return Answered(record=final, text=text, calls=waiting_calls(turn), headers=headers)


async def _replay(manager: Any, record: RunRecord, chat: ChatRequest, session_header: str | None) -> HttpResponseBase:
    """Answer a request whose `Idempotency-Key` already made a run with that run's result."""
    done = await replayed_run(manager, record, chat, session_header, input_name="last message")
    if isinstance(done, HttpResponse):
        return done
    if chat.stream:
        return event_stream(_stream_done(done.record, chat, done.text, done.calls), done.headers)
    return _completion(done.record, chat, done.text, done.headers, calls=done.calls)


def same_input(turn: Sequence[Event], chat: ChatRequest) -> bool:
    """Whether the run's turn began with this request's input: its user message, or its
    tool results (issue 20)."""
    if chat.message is None:
        given = [(m.tool_call_id, m.content) for m in chat.tool_results]
        stored = [
            (e.message.tool_call_id, e.message.content)
            for e in turn
            if e.message is not None and e.message.role == "tool"
        ][: len(given)]
        return stored == given
    said = next((e.message for e in turn if e.message is not None and e.message.role == "user"), None)
    return said is not None and said.content == chat.message.content


async def run_ended(manager: Any, record: RunRecord) -> RunRecord:
    """The run's record once it has ended, or as it stands after the wait limit."""
    deadline = time.monotonic() + settings.AGENTSITE_RUN_WAIT_TIMEOUT_S
    while not record.finished and time.monotonic() < deadline:
        # In this process the wait returns when the run ends; a run of another process is
        # read from the store, so the reads are paced.
        record = await manager.await_run(record.id, 5.0) or record
        if not record.finished:
            await asyncio.sleep(0.5)
    return record


async def check_agent(runner: Runner, name: str) -> tuple[frozenset[str], str]:
    """The agent's own tool names and its kind ("llm" when it takes client tools);
    `AgentNotFoundError` for an unknown agent."""
    agent = runner.agent(name)
    return own_tool_names(agent), "llm" if takes_client_tools(agent) else str(getattr(agent, "kind", "other"))


def _result_param(chat: ChatRequest, problem: str) -> str | None:
    """The field of the tool result the runner refused (it names the call id)."""
    for index, result in zip(chat.tool_result_indexes, chat.tool_results, strict=True):
        if repr(result.tool_call_id) in problem:
            return f"messages[{index}].tool_call_id"
    return None


async def _stream(
    manager: Any,
    record: RunRecord,
    chat: ChatRequest,
    events: AsyncIterator[Event],
    remember: Callable[[str, Sequence[ToolCall]], Awaitable[None]],
) -> AsyncIterator[str]:
    created = int(time.time())
    sent: list[str] = []  # the content as the client receives it, for `remember`
    yield _chunk(record.id, chat.agent, created, {"role": "assistant", "content": ""})
    streamed: set[str] = set()
    current: str | None = None  # the message whose text was sent last
    calls: list[ToolCall] = []
    async for event in events:
        if event.message is not None and event.message.role == "assistant" and not event.partial:
            calls = client_calls(event)  # the last step's, when it waits for the client
        if chat.final_only:
            continue  # the answer is sent whole once the run has ended
        message_id = str(event.extensions.get("message_id", event.id))
        text = None
        if event.object == OBJECT_CHUNK and event.text:
            streamed.add(message_id)
            text = event.text
        elif message_id not in streamed and (part := answer_part(event)) is not None:
            # A model that does not stream still shows its text, once, as one chunk.
            text = part
        if text is None:
            continue
        if current is not None and message_id != current:
            text = PART_SEPARATOR + text  # as answer_text joins the parts
        current = message_id
        sent.append(text)
        yield _chunk(record.id, chat.agent, created, {"content": text})
    final = await manager.await_run(record.id, 5.0) or record
    if final.status == "completed" and chat.final_only and final.answer:
        sent.append(final.answer)
        yield _chunk(record.id, chat.agent, created, {"content": final.answer})
    if final.status in _ANSWERED:
        await remember("".join(sent), calls)
    for line in _stream_end(final, chat, created, calls):
        yield line


async def _stream_done(
    record: RunRecord, chat: ChatRequest, content: str, calls: Sequence[ToolCall] = ()
) -> AsyncIterator[str]:
    """A run that already ended, as a stream: its whole content in one chunk."""
    created = int(time.time())
    yield _chunk(record.id, chat.agent, created, {"role": "assistant", "content": ""})
    if content:
        yield _chunk(record.id, chat.agent, created, {"content": content})
    for line in _stream_end(record, chat, created, calls):
        yield line


def _stream_end(record: RunRecord, chat: ChatRequest, created: int, calls: Sequence[ToolCall] = ()) -> list[str]:
    """The client's tool calls (one chunk, each call whole) and `finish_reason: tool_calls`
    when the run waits for them, else the finish chunk; then (when the client asked for it)
    the usage chunk with no choices, as OpenAI sends them, and `[DONE]`; an error event
    instead for a failed run."""
    if record.status in _ANSWERED and calls:
        wire = [{"index": i, **call} for i, call in enumerate(_wire_calls(calls))]
        lines = [
            _chunk(record.id, chat.agent, created, {"tool_calls": wire}),
            _chunk(record.id, chat.agent, created, {}, finish="tool_calls"),
        ]
        if chat.include_usage:
            lines.append(_chunk(record.id, chat.agent, created, {}, usage=_usage(record)))
    elif record.status == "completed":
        lines = [_chunk(record.id, chat.agent, created, {}, finish="stop")]
        if chat.include_usage:
            lines.append(_chunk(record.id, chat.agent, created, {}, usage=_usage(record)))
    else:
        failure = run_failure(record)
        error = {"message": failure.message, "type": failure.type, "code": failure.code}
        lines = [f"data: {json.dumps({'error': error})}\n\n"]
    return [*lines, "data: [DONE]\n\n"]


async def api_user(request: HttpRequest) -> Any:
    """The authenticated user of a /v1 request; `OpenAIError` 401 otherwise."""
    try:
        user = await authenticate(request)
    except AuthenticationError as exc:
        raise OpenAIError(401, str(exc), type="authentication_error", code="invalid_api_key") from None
    if not user.is_authenticated:
        raise OpenAIError(401, "missing API key", type="authentication_error", code="invalid_api_key")
    return user


def _model_data(agent: Any) -> dict[str, Any]:
    return {
        "id": agent.name,
        "object": "model",
        "created": 0,
        "owned_by": "agentsite",
        "description": agent.description,
        "backing_model": agent.model_name,
    }


@require_GET
async def list_models(request: HttpRequest) -> HttpResponse:
    try:
        await api_user(request)
    except OpenAIError as exc:
        return exc.response()
    runner = run_manager().runner
    return JsonResponse({"object": "list", "data": [_model_data(agent) for agent in runner.agents.values()]})


@require_GET
async def retrieve_model(request: HttpRequest, model_id: str) -> HttpResponse:
    """`GET /v1/models/<id>`: the agent of that name as a model, 404 in OpenAI's format."""
    try:
        await api_user(request)
        agent = run_manager().runner.agents.get(model_id)
        if agent is None:
            raise OpenAIError(
                404,
                f"the model {model_id!r} does not exist (models are agent names; see /v1/models)",
                param="model",
                code="model_not_found",
            )
    except OpenAIError as exc:
        return exc.response()
    return JsonResponse(_model_data(agent))
