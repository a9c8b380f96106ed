"""The OpenAI Responses API: `POST /v1/responses` and `GET /v1/responses/<id>` (issue 25,
item 2), as the official `openai` client and the OpenAI Agents SDK (its default model)
call them.

A response is a run of the agent `model` names, as on `/v1/chat/completions`
(runs.surfaces.openai_compat, whose checks, headers and errors this surface shares): `input` is the
chat (runs.core.responses translates it), its last user message the run's input, or its
trailing `function_call_output` items the client's results for the calls a previous
response returned. `previous_response_id` continues that response's session (so does
`X-Session-Id`, and a resent history the session holds, as on chat completions);
`instructions` are added to the agent's own instruction for this run only; `tools`
(functions) and `tool_choice` are the client's tools; `text.format` the answer's JSON
shape. `metadata`, `instructions`, the tools and the format are stored with the run's
turn and come back with the response; `store: false` makes `GET` answer 404 (the run and
its session stay in the ledger, as every run does). A failed run answers 422 (streamed:
`response.failed`), which clients do not retry. Sampling and transport parameters
(`temperature`, `top_p`, `max_output_tokens`, `reasoning`, `truncation`, `include`, ...)
are accepted and ignored, as on chat completions: they are settings of the agent; so is any
parameter this module does not name, so that a newer client is not refused.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agentsite.runtime import run_manager
from runs import selectors as run_selectors
from runs.core.invocation import RunOptions
from runs.core.records import RunRecord
from runs.core.responses import (
    ECHO_EXTENSION,
    ResponseEcho,
    ResponsesInputError,
    ResponseStream,
    input_messages,
    message_item_id,
    output_items,
    response_object,
    response_status,
    responses_metadata,
    responses_output,
    responses_tool_choice,
    responses_tools,
    run_id_of,
    tool_wire,
    usage,
)
from runs.core.tools.client import ClientToolError
from runs.surfaces.openai_compat import (
    PART_SEPARATOR,
    SESSION_HEADER,
    ChatRequest,
    OpenAIError,
    Remember,
    RunFields,
    StartedRun,
    answer_part,
    answer_text,
    api_user,
    event_stream,
    idempotency_key,
    open_session,
    parse_messages,
    replayed_run,
    request_body,
    requested_session,
    run_answer,
    run_failure,
    start_run,
    waiting_calls,
)
from sessions_app.backends import db_call
from sessions_app.core.events import OBJECT_CHUNK, Event, ToolCall

_UNSUPPORTED = {
    "background": "background responses",
    "conversation": "conversations (use previous_response_id)",
    "prompt": "stored prompts",
}
# A run that waits for its client's tool results has answered (OpenAI: `completed` with
# function_call items); "requires_action" is its status while it waits (issue 20).
_ANSWERED = {"completed", "requires_action"}


@dataclass(frozen=True, kw_only=True)
class ResponsesRequest:
    """A checked create request: the chat it amounts to, and what the response repeats."""

    chat: ChatRequest
    echo: ResponseEcho


def parse_responses_request(body: Any) -> ResponsesRequest:
    """Validate a create body the way OpenAI would, refusing what we cannot honour;
    `OpenAIError` (400) naming the parameter."""
    if not isinstance(body, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError(400, "you must provide a model parameter (the agent's name)", param="model")
    for name, what in _UNSUPPORTED.items():
        if body.get(name):
            raise OpenAIError(400, f"{what} are not supported", param=name, code="unsupported_parameter")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise OpenAIError(400, "instructions must be a string", param="instructions")
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or run_id_of(previous) is None):
        raise OpenAIError(
            400,
            f"previous_response_id must be a response id ('resp_...'), got {previous!r}",
            param="previous_response_id",
        )
    stream, store = body.get("stream", False), body.get("store", True)
    if not isinstance(stream, bool):
        raise OpenAIError(400, "stream must be a boolean", param="stream")
    if not isinstance(store, bool | None):
        raise OpenAIError(400, "store must be a boolean", param="store")
    try:
        translated = input_messages(body.get("input"))
        tools = responses_tools(body.get("tools"))
        tool_choice = responses_tool_choice(body.get("tool_choice"))
        output, text_format = responses_output(body.get("text"))
        metadata = responses_metadata(body.get("metadata"))
    except ResponsesInputError as exc:
        raise OpenAIError(400, str(exc), param=exc.param, code=exc.code) from None
    try:
        parsed = parse_messages(list(translated.messages))
    except OpenAIError as exc:  # it names chat fields: name the input item instead
        raise OpenAIError(
            exc.status,
            _input_names(exc.message, translated.origins),
            param=_input_names(exc.param, translated.origins) if exc.param else None,
            code=exc.code,
        ) from None
    echo = ResponseEcho(
        instructions=instructions,
        previous_response_id=previous,
        metadata=metadata,
        tools=tuple(tool_wire(t) for t in tools),
        tool_choice=body.get("tool_choice") or "auto",
        text_format=text_format,
        store=store is not False,
    )
    last = parsed[-1]
    common: dict[str, Any] = {
        "agent": model,
        "stream": stream,
        "include_usage": True,
        "output": output,
        "final_only": echo.json_output,
        "client_tools": tools,
        "tool_choice": tool_choice,
    }
    if last.role == "tool":  # the client's results for calls of its tools
        start = len(parsed)
        while start > 0 and parsed[start - 1].role == "tool":
            start -= 1
        chat = ChatRequest(
            message=None,
            seed=tuple(m for m in parsed[:start] if m.has_payload),
            tool_results=tuple(parsed[start:]),
            tool_result_indexes=tuple(translated.origins[start:]),
            **common,
        )
    else:
        if last.role != "user" or not (last.content.strip() or last.attachments):
            raise OpenAIError(
                400,
                "the last input item must be a non-empty user message or function_call_output",
                param=f"input[{translated.origins[-1]}]",
            )
        limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
        if len(last.content) > limit:  # the same limit as every other surface
            raise OpenAIError(
                413,
                f"the message is {len(last.content)} characters; the limit is {limit}",
                param=f"input[{translated.origins[-1]}].content",
                code="message_too_large",
            )
        chat = ChatRequest(message=last, seed=tuple(m for m in parsed[:-1] if m.has_payload), **common)
    if previous is not None and chat.seed:
        # The previous response's session holds the chat so far; earlier items would be dropped.
        raise OpenAIError(
            400,
            "with previous_response_id, input is only the new turn: a user message, or the "
            "function_call_output items answering the previous response's calls",
            param="input",
        )
    return ResponsesRequest(chat=chat, echo=echo)


def _input_names(text: str, origins: Sequence[int]) -> str:
    """A chat field name (`messages[3].tool_call_id`) as the input item it came from."""

    def item(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return f"input[{origins[index]}]" if index < len(origins) else match.group(0)

    named = re.sub(r"messages\[(\d+)\]", item, text)
    for chat_field, field in (
        (".tool_call_id", ".call_id"),
        (".image_url.url", ".image_url"),
        (".file.file_data", ".file_data"),
    ):
        named = named.replace(chat_field, field)
    return named


@csrf_exempt
@require_POST
async def create_response(request: HttpRequest) -> HttpResponseBase:
    """`POST /v1/responses`."""
    try:
        user = await api_user(request)
        asked = parse_responses_request(request_body(request))
        chat, echo = asked.chat, asked.echo
        session_header = requested_session(request)
        key = idempotency_key(request)
        manager = run_manager()

        async def replay(record: RunRecord) -> HttpResponseBase:
            return await _replay(manager, record, asked, session_header)

        started = await start_run(
            manager,
            user,
            chat,
            key=key,
            find_session=lambda: _session_of(user, echo.previous_response_id, session_header),
            match_history=True,
            replay=replay,
            # Beside the agent's own instruction (RunOptions.added_instruction): OpenAI does not
            # carry instructions over to the next response, nor does this run.
            options=RunOptions(
                output=chat.output,
                client_tools=chat.client_tools,
                tool_choice=chat.tool_choice,
                added_instruction=echo.instructions or None,
            ),
            fields=RunFields(
                tool_name=lambda i: f"tools[{i}].name",
                tool_error=_tool_error,
                session=SESSION_HEADER,
                tool_result=lambda problem: _result_param(chat, problem),
            ),
            turn_extensions={ECHO_EXTENSION: echo.to_dict()},
        )
    except OpenAIError as exc:
        return exc.response()
    if not isinstance(started, StartedRun):  # a replay, streamed or not
        return started
    remember = Remember(
        user=user,
        chat=chat,
        session_id=started.record.session_id,
        fresh=session_header is None and echo.previous_response_id is None,
    )
    if chat.stream:
        return event_stream(_stream(manager, started.record, asked, started.events, remember), started.headers)
    done = await run_answer(manager, started, chat, remember)
    if isinstance(done, HttpResponse):
        return done
    return JsonResponse(_response(done.record, echo, done.text, done.calls), headers=done.headers)


def _tool_error(exc: ClientToolError) -> OpenAIError:
    """A refused client tool, its field named as the Responses API spells `tool_choice`."""
    param = exc.param.replace("tool_choice.function.name", "tool_choice.name")
    return OpenAIError(
        400, str(exc).replace("tool_choice.function.name", "tool_choice.name"), param=param, code=exc.code
    )


async def _session_of(user: Any, previous: str | None, header: str | None) -> str | None:
    """The session to continue: the previous response's, or `X-Session-Id`'s (the user's
    own, or a new one of that id), or None for a new one."""
    if previous is None:
        return await open_session(user, header)
    record = await db_call(run_selectors.run_get)(user=user, run_id=run_id_of(previous) or "")
    if record is None:  # another user's response is not found either
        raise OpenAIError(
            404,
            f"previous response {previous!r} not found",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if header is not None and header != record.session_id:
        raise OpenAIError(
            400,
            f"{SESSION_HEADER} {header!r} is not the session of previous_response_id {previous!r}",
            param=SESSION_HEADER,
            code="session_mismatch",
        )
    return record.session_id


def _result_param(chat: ChatRequest, problem: str) -> str | None:
    """The input item of the tool result the runner refused (it names the call id)."""
    for index, result in zip(chat.tool_result_indexes, chat.tool_results, strict=True):
        if repr(result.tool_call_id) in problem:
            return f"input[{index}].call_id"
    return None


def _response(record: RunRecord, echo: ResponseEcho, text: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    status = "completed" if record.status in _ANSWERED else response_status(record.status)
    error = None
    if status == "failed":
        failure = run_failure(record)
        error = {"code": failure.code, "message": failure.message}
    output = output_items(message_item_id(record.id, record.request_id), text, calls) if status == "completed" else []
    return response_object(
        run_id=record.id,
        model=record.agent,
        created_at=record.created_at.timestamp(),
        status=status,
        echo=echo,
        output=output,
        usage=usage(record.prompt_tokens, record.completion_tokens),
        error=error,
    )


async def _stream(
    manager: Any, record: RunRecord, asked: ResponsesRequest, events: AsyncIterator[Event], remember: Remember
) -> AsyncIterator[str]:
    """The run's events as Responses stream events: the text as chat completions streams it
    (each assistant message's text, separated by a blank line; a JSON answer whole at the
    end), then the client calls, then `response.completed` (or `response.failed`)."""
    echo = asked.echo
    out = ResponseStream(message_item_id(record.id, record.request_id))
    begun = response_object(
        run_id=record.id, model=record.agent, created_at=record.created_at.timestamp(), status="in_progress", echo=echo
    )
    for line in out.start(begun):
        yield line
    streamed: set[str] = set()
    current: str | None = None
    calls: list[ToolCall] = []
    async for event in events:
        if event.message is not None and event.message.role == "assistant" and not event.partial:
            calls = waiting_calls([event])
        if echo.json_output:
            continue  # sent whole once the run has ended
        message_id = str(event.extensions.get("message_id", event.id))
        text = None
        if event.object == OBJECT_CHUNK and event.text:
            streamed.add(message_id)
            text = event.text
        elif message_id not in streamed and (part := answer_part(event)) is not None:
            text = part  # a model that does not stream: its text once, whole
        if text is None:
            continue
        if current is not None and message_id != current:
            text = PART_SEPARATOR + text
        current = message_id
        for line in out.text(text):
            yield line
    final = await manager.await_run(record.id, 5.0) or record
    if final.status not in _ANSWERED:
        for line in out.fail(_response(final, echo, "", ())):
            yield line
        return
    if echo.json_output and final.answer:
        for line in out.text(final.answer):
            yield line
    text = "".join(out.text_so_far)
    await remember(text, calls)
    for line in out.finish(_response(final, echo, text, calls), calls):
        yield line


async def _stream_done(
    record: RunRecord, echo: ResponseEcho, text: str, calls: Sequence[ToolCall]
) -> AsyncIterator[str]:
    """A response that already ended, as a stream: its whole text in one delta."""
    out = ResponseStream(message_item_id(record.id, record.request_id))
    for line in out.start(
        response_object(
            run_id=record.id,
            model=record.agent,
            status="in_progress",
            echo=echo,
            created_at=record.created_at.timestamp(),
        )
    ):
        yield line
    if text:
        for line in out.text(text):
            yield line
    for line in out.finish(_response(record, echo, text, calls), calls):
        yield line


async def _replay(
    manager: Any, record: RunRecord, asked: ResponsesRequest, session_header: str | None
) -> HttpResponseBase:
    """A request whose `Idempotency-Key` already made a run: that run's response (as on
    chat completions, runs.surfaces.openai_compat.replayed_run)."""
    done = await replayed_run(manager, record, asked.chat, session_header, input_name="input")
    if isinstance(done, HttpResponse):
        return done
    if asked.chat.stream:
        return event_stream(_stream_done(done.record, asked.echo, done.text, done.calls), done.headers)
    return JsonResponse(_response(done.record, asked.echo, done.text, done.calls), headers=done.headers)


@require_GET
async def retrieve_response(request: HttpRequest, response_id: str) -> HttpResponse:
    """`GET /v1/responses/<id>`: the user's own response (another user's is not found)."""
    try:
        user = await api_user(request)
        run_id = run_id_of(response_id)
        record = await db_call(run_selectors.run_get)(user=user, run_id=run_id) if run_id else None
        turn = await db_call(run_selectors.run_turn)(record=record) if record is not None else []
        echo = _echo_of(turn)
        if record is None or not echo.store:
            raise OpenAIError(
                404, f"response {response_id!r} not found", param="response_id", code="response_not_found"
            )
    except OpenAIError as exc:
        return exc.response()
    text = record.answer if echo.json_output else answer_text(turn)
    calls = waiting_calls(turn) if record.status in _ANSWERED else []
    return JsonResponse(_response(record, echo, text, calls))


def _echo_of(turn: Sequence[Event]) -> ResponseEcho:
    """What the create request said, from its run's turn (the first event that holds it)."""
    for event in turn:
        if ECHO_EXTENSION in event.extensions:
            return ResponseEcho.from_value(event.extensions[ECHO_EXTENSION])
    return ResponseEcho()
