"""OpenAI-compatible endpoint: `POST /v1/chat/completions` and `GET /v1/models` (SPEC 12.3).

`model` names an agent; the API token is the SDK's `api_key`. The last message is the
run's input; earlier messages seed a new, empty session; `X-Session-Id` continues a session
and is echoed back. Streaming sends `chat.completion.chunk` events (role first, then text
deltas) and, unlike the reference, keeps streaming through tool rounds until the run's final
answer, then `finish_reason` and `data: [DONE]`. Errors use OpenAI's error format. Sampling
parameters are accepted and ignored: they are settings of the agent, not of the request.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agentsite.api.auth import AuthenticationError, authenticate
from agentsite.api.json_input import InputError, check_text, parse_json
from agentsite.composition import run_manager
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, TooManyRunsError, UsageError
from runs.core.invocation import RunOptions
from runs.core.output import OutputSpec, SchemaError, output_from_response_format
from runs.core.records import RunRecord
from runs.core.runner import Runner
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import OBJECT_CHUNK, Event, Message
from sessions_app.core.session import SessionNotFoundError

SESSION_HEADER = "X-Session-Id"
SESSION_ID_MAX = 64  # the column's length
_ROLES = {"system", "developer", "user", "assistant"}
# Accepted and ignored: sampling is configured on the agent.
_IGNORED = {"temperature", "top_p", "max_tokens", "max_completion_tokens", "presence_penalty", "frequency_penalty",
            "seed", "stop", "user", "metadata", "store", "parallel_tool_calls", "service_tier", "reasoning_effort"}


class OpenAIError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def response(self) -> JsonResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JsonResponse(body, status=self.status)


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    agent: str
    message: Message
    seed: tuple[Message, ...]
    stream: bool
    include_usage: bool
    output: OutputSpec | None = None
    """The answer's required shape, from `response_format` (issue 20): validated, retried."""


def _content_text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise OpenAIError(400, "only text content parts are supported", param=f"messages[{index}].content",
                                  code="unsupported_content")
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise OpenAIError(400, "content must be a string or a list of text parts", param=f"messages[{index}].content")


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
    tool_choice = body.get("tool_choice")
    if tool_choice not in (None, "auto", "none"):
        raise OpenAIError(400, "tool_choice other than 'auto' or 'none' is not supported: the agent chooses its tools",
                          param="tool_choice", code="unsupported_parameter")
    if body.get("tools") or body.get("functions"):
        raise OpenAIError(400, "client-side tools are not supported: the agent brings its own", param="tools",
                          code="unsupported_parameter")
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

    parsed: list[Message] = []
    for index, item in enumerate(messages):
        if not isinstance(item, dict) or item.get("role") not in _ROLES:
            raise OpenAIError(400, f"messages[{index}].role must be one of {sorted(_ROLES)}",
                              param=f"messages[{index}].role")
        role = "system" if item["role"] == "developer" else item["role"]
        parsed.append(Message(role=role, content=_content_text(item.get("content"), index)))
    last = parsed[-1]
    if last.role != "user" or not last.content.strip():
        raise OpenAIError(400, "the last message must be a non-empty user message", param=f"messages[{len(parsed) - 1}]")
    limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
    if len(last.content) > limit:
        # The same limit as every other surface (REST, websocket, AG-UI).
        raise OpenAIError(413, f"the message is {len(last.content)} characters; the limit is {limit}",
                          param=f"messages[{len(parsed) - 1}].content", code="message_too_large")
    return ChatRequest(agent=model, message=last, seed=tuple(m for m in parsed[:-1] if m.content),
                       stream=stream, include_usage=bool(options.get("include_usage")), output=output)


def _chunk(run_id: str, agent: str, created: int, delta: dict[str, Any], finish: str | None = None,
           usage: dict[str, int] | None = None) -> str:
    body: dict[str, Any] = {
        "id": f"chatcmpl-{run_id}", "object": "chat.completion.chunk", "created": created, "model": agent,
        "choices": [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _usage(record: RunRecord) -> dict[str, int]:
    return {"prompt_tokens": record.prompt_tokens, "completion_tokens": record.completion_tokens,
            "total_tokens": record.prompt_tokens + record.completion_tokens}


def _failure(record: RunRecord) -> OpenAIError:
    error = record.error or {}
    return OpenAIError(502, f"the run {record.status}: {error.get('message', 'no answer')}", type="server_error",
                       code=str(error.get("type") or record.status))


def _session_header(request: HttpRequest) -> str | None:
    """`X-Session-Id`, refused when no session could have it (too long for the column,
    or text the database cannot store)."""
    value = request.headers.get(SESSION_HEADER)
    if value is None:
        return None
    if len(value) > SESSION_ID_MAX:
        raise OpenAIError(400, f"{SESSION_HEADER} must be at most {SESSION_ID_MAX} characters, got {len(value)}",
                          param=SESSION_HEADER, code="invalid_session_id")
    try:
        check_text(value, SESSION_HEADER)
    except InputError as exc:
        raise OpenAIError(400, exc.message(), param=SESSION_HEADER, code="invalid_session_id") from None
    return value


async def _open_session(user: Any, session_id: str | None) -> str | None:
    """The session to continue: the user's own, a new one with the client's id, or None."""
    if not session_id:
        return None
    owned = await db_call(session_selectors.session_get)(user=user, session_id=session_id)
    if owned is not None:
        return session_id
    exists = await db_call(session_selectors.session_exists)(session_id=session_id)
    if exists:
        raise OpenAIError(404, f"session {session_id!r} not found", param=SESSION_HEADER, code="session_not_found")
    return session_id


@csrf_exempt
@require_POST
async def chat_completions(request: HttpRequest) -> HttpResponse:
    try:
        user = await authenticate(request)
        if not user.is_authenticated:
            raise OpenAIError(401, "missing API key: send 'Authorization: Bearer <token>'", type="authentication_error",
                              code="invalid_api_key")
        try:
            body = parse_json(request.body or b"")
        except RequestDataTooBig:
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            raise OpenAIError(413, f"request body is larger than the limit of {limit} bytes", code="body_too_large") from None
        except InputError as exc:
            if exc.code == "malformed_json":
                raise OpenAIError(400, f"the body is {exc.problem}") from None
            raise OpenAIError(400, exc.message("brackets"), param=exc.field("brackets"), code=exc.code) from None
        chat = parse_chat_request(body)
        session_header = _session_header(request)
        manager = run_manager()
        try:
            await manager.acall(lambda runner: _check_agent(runner, chat.agent))
        except AgentNotFoundError:
            raise OpenAIError(404, f"the model {chat.agent!r} does not exist (models are agent names; see /v1/models)",
                              param="model", code="model_not_found") from None
        session_id = await _open_session(user, session_header)
        listener, events = manager.bridge()

        async def start(runner: Runner) -> RunRecord:
            handle = await runner.start(user_id=str(user.pk), message=chat.message, session_id=session_id,
                                        agent=chat.agent, seed=chat.seed, listeners=[listener],
                                        options=RunOptions(output=chat.output))
            return handle.record

        try:
            record = await manager.acall(start)
        except TooManyRunsError as exc:
            raise OpenAIError(429, str(exc), type="rate_limit_error", code="too_many_runs") from None
        except (SessionNotFoundError, DuplicateRequestError, UsageError) as exc:
            raise OpenAIError(400, str(exc)) from None
    except AuthenticationError as exc:
        return OpenAIError(401, str(exc), type="authentication_error", code="invalid_api_key").response()
    except OpenAIError as exc:
        return exc.response()

    headers = {SESSION_HEADER: record.session_id}
    if chat.stream:
        response = StreamingHttpResponse(
            _stream(manager, record, chat, events), content_type="text/event-stream", headers=headers
        )
        response["Cache-Control"] = "no-cache"
        return response
    async for _ in events:  # drain: the run's completion ends the iterator
        pass
    final = await manager.await_run(record.id, 5.0) or record
    if final.status != "completed":
        error = _failure(final).response()
        error[SESSION_HEADER] = record.session_id
        return error
    return JsonResponse({
        "id": f"chatcmpl-{record.id}", "object": "chat.completion", "created": int(time.time()), "model": chat.agent,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": final.answer}, "finish_reason": "stop"}],
        "usage": _usage(final),
    }, headers=headers)


async def _check_agent(runner: Runner, name: str) -> None:
    runner.agent(name)


async def _stream(manager: Any, record: RunRecord, chat: ChatRequest, events: AsyncIterator[Event]) -> AsyncIterator[str]:
    created = int(time.time())
    yield _chunk(record.id, chat.agent, created, {"role": "assistant", "content": ""})
    streamed: set[str] = set()
    async for event in events:
        message_id = str(event.extensions.get("message_id", event.id))
        if event.object == OBJECT_CHUNK and event.text:
            streamed.add(message_id)
            yield _chunk(record.id, chat.agent, created, {"content": event.text})
        elif (event.message is not None and event.message.role == "assistant" and event.text
              and not event.partial and not event.is_error and message_id not in streamed):
            # A model that does not stream still shows its text, once, as one chunk.
            yield _chunk(record.id, chat.agent, created, {"content": event.text})
    final = await manager.await_run(record.id, 5.0) or record
    if final.status == "completed":
        yield _chunk(record.id, chat.agent, created, {}, finish="stop")
        if chat.include_usage:
            yield _chunk(record.id, chat.agent, created, {}, usage=_usage(final))
    else:
        failure = _failure(final)
        yield f"data: {json.dumps({'error': {'message': failure.message, 'type': failure.type, 'code': failure.code}})}\n\n"
    yield "data: [DONE]\n\n"


@require_GET
async def list_models(request: HttpRequest) -> HttpResponse:
    try:
        user = await authenticate(request)
    except AuthenticationError as exc:
        return OpenAIError(401, str(exc), type="authentication_error", code="invalid_api_key").response()
    if not user.is_authenticated:
        return OpenAIError(401, "missing API key", type="authentication_error", code="invalid_api_key").response()
    runner = run_manager().runner
    data = []
    for agent in runner.agents.values():
        data.append({
            "id": agent.name, "object": "model", "created": 0, "owned_by": "agentsite",
            "description": agent.description, "backing_model": agent.model_name,
        })
    return JsonResponse({"object": "list", "data": data})
