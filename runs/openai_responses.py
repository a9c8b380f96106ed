"""The OpenAI Responses API: `POST /v1/responses` and `GET /v1/responses/<id>` (issue 25,
item 2), as the official `openai` client and the OpenAI Agents SDK (its default model)
call them.

A response is a run of the agent `model` names, as on `/v1/chat/completions`
(runs.openai_compat, whose checks, headers and errors this surface shares): `input` is the
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

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agentsite.api.json_input import InputError, parse_json
from agentsite.runtime import run_manager
from runs import selectors as run_selectors
from runs.core.context.fingerprint import conversation_after, history_fingerprint
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, TooManyRunsError, UsageError
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
from runs.core.runner import Runner
from runs.core.tools.client import ClientToolError, check_choice, check_clashes
from runs.openai_compat import (
    MATCH_HEADER,
    PART_SEPARATOR,
    REPLAYED_HEADER,
    RUN_HEADER,
    SESSION_HEADER,
    ChatRequest,
    OpenAIError,
    answer_part,
    answer_text,
    api_user,
    check_agent,
    event_stream,
    failure_response,
    idempotency_key,
    open_session,
    parse_messages,
    requested_session,
    run_ended,
    run_failure,
    run_of_key,
    same_input,
    waiting_calls,
)
from sessions_app import fingerprints
from sessions_app.backends import db_call
from sessions_app.core.events import OBJECT_CHUNK, Event, ToolCall
from sessions_app.core.session import SessionNotFoundError

_UNSUPPORTED = {"background": "background responses", "conversation": "conversations (use previous_response_id)",
                "prompt": "stored prompts"}
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
        raise OpenAIError(400, f"previous_response_id must be a response id ('resp_...'), got {previous!r}",
                          param="previous_response_id")
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
        raise OpenAIError(exc.status, _input_names(exc.message, translated.origins),
                          param=_input_names(exc.param, translated.origins) if exc.param else None,
                          code=exc.code) from None
    echo = ResponseEcho(instructions=instructions, previous_response_id=previous, metadata=metadata,
                        tools=tuple(tool_wire(t) for t in tools), tool_choice=body.get("tool_choice") or "auto",
                        text_format=text_format, store=store is not False)
    last = parsed[-1]
    common: dict[str, Any] = {"agent": model, "stream": stream, "include_usage": True, "output": output,
                              "final_only": echo.json_output, "client_tools": tools, "tool_choice": tool_choice}
    if last.role == "tool":  # the client's results for calls of its tools
        start = len(parsed)
        while start > 0 and parsed[start - 1].role == "tool":
            start -= 1
        chat = ChatRequest(message=None, seed=tuple(m for m in parsed[:start] if m.has_payload),
                           tool_results=tuple(parsed[start:]),
                           tool_result_indexes=tuple(translated.origins[start:]), **common)
    else:
        if last.role != "user" or not (last.content.strip() or last.attachments):
            raise OpenAIError(400, "the last input item must be a non-empty user message or function_call_output",
                              param=f"input[{translated.origins[-1]}]")
        limit = settings.AGENTSITE_MAX_MESSAGE_CHARS
        if len(last.content) > limit:  # the same limit as every other surface
            raise OpenAIError(413, f"the message is {len(last.content)} characters; the limit is {limit}",
                              param=f"input[{translated.origins[-1]}].content", code="message_too_large")
        chat = ChatRequest(message=last, seed=tuple(m for m in parsed[:-1] if m.has_payload), **common)
    if previous is not None and chat.seed:
        # The previous response's session holds the chat so far; earlier items would be dropped.
        raise OpenAIError(400, "with previous_response_id, input is only the new turn: a user message, or the "
                          "function_call_output items answering the previous response's calls", param="input")
    return ResponsesRequest(chat=chat, echo=echo)


def _input_names(text: str, origins: Sequence[int]) -> str:
    """A chat field name (`messages[3].tool_call_id`) as the input item it came from."""

    def item(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return f"input[{origins[index]}]" if index < len(origins) else match.group(0)

    named = re.sub(r"messages\[(\d+)\]", item, text)
    for chat_field, field in ((".tool_call_id", ".call_id"), (".image_url.url", ".image_url"),
                              (".file.file_data", ".file_data")):
        named = named.replace(chat_field, field)
    return named


def _body(request: HttpRequest) -> Any:
    try:
        return parse_json(request.body or b"")
    except RequestDataTooBig:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raise OpenAIError(413, f"request body is larger than the limit of {limit} bytes", code="body_too_large") from None
    except InputError as exc:
        if exc.code == "malformed_json":
            raise OpenAIError(400, f"the body is {exc.problem}") from None
        raise OpenAIError(400, exc.message("brackets"), param=exc.field("brackets"), code=exc.code) from None


@csrf_exempt
@require_POST
async def create_response(request: HttpRequest) -> HttpResponse:
    """`POST /v1/responses`."""
    try:
        user = await api_user(request)
        asked = parse_responses_request(_body(request))
        chat, echo = asked.chat, asked.echo
        session_header = requested_session(request)
        key = idempotency_key(request)
        manager = run_manager()
        try:
            server_tools, kind = await manager.acall(lambda runner: check_agent(runner, chat.agent))
        except AgentNotFoundError:
            raise OpenAIError(404, f"the model {chat.agent!r} does not exist (models are agent names; see /v1/models)",
                              param="model", code="model_not_found") from None
        if chat.client_tools and kind != "llm":
            raise OpenAIError(400, f"the model {chat.agent!r} is a {kind} agent, which cannot call client tools; "
                              "use an LLM agent", param="tools", code="unsupported_client_tools")
        try:
            check_clashes(chat.client_tools, server_tools, lambda i: f"tools[{i}].name", agent=chat.agent)
            check_choice(chat.tool_choice, {*server_tools, *(t.name for t in chat.client_tools)})
        except ClientToolError as exc:  # refused before anything is stored
            param = exc.param.replace("tool_choice.function.name", "tool_choice.name")
            raise OpenAIError(400, str(exc).replace("tool_choice.function.name", "tool_choice.name"), param=param,
                              code=exc.code) from None
        session_id = await _session_of(user, echo.previous_response_id, session_header)
        match, seed = None, chat.seed
        if session_id is None and chat.seed:
            # A stateless client (the Agents SDK's default) resending its chat: continue the
            # session that holds it, as chat completions do.
            match = await db_call(fingerprints.session_of_history)(
                user=user, fingerprint=history_fingerprint(chat.agent, chat.seed))
            if match is not None:
                session_id, seed = match.session_id, ()
        if key is not None:
            earlier = await db_call(run_selectors.run_by_request)(user=user, request_id=key)
            if earlier is not None:
                return await _replay(manager, earlier, asked, session_header)
        # Beside the agent's own instruction (RunOptions.added_instruction): OpenAI does not
        # carry instructions over to the next response, nor does this run.
        options = RunOptions(output=chat.output, client_tools=chat.client_tools, tool_choice=chat.tool_choice,
                             added_instruction=echo.instructions or None)
        listener, events = manager.bridge()

        async def start(runner: Runner) -> RunRecord:
            handle = await runner.start(user_id=str(user.pk), message=chat.message, session_id=session_id,
                                        agent=chat.agent, seed=seed, listeners=[listener],
                                        tool_results=chat.tool_results, request_id=key, options=options,
                                        turn_extensions={ECHO_EXTENSION: echo.to_dict()})
            return handle.record

        try:
            # Shielded: a client that gives up (its timeout) while the run starts must not
            # cancel the start; the run goes on, and its retry (same Idempotency-Key) joins it.
            record = await asyncio.shield(manager.acall(start))
        except TooManyRunsError as exc:
            raise OpenAIError(429, str(exc), type="rate_limit_error", code="too_many_runs") from None
        except DuplicateRequestError:
            if key is None:
                raise
            return await _replay(manager, await run_of_key(user, key), asked, session_header)
        except SessionNotFoundError as exc:
            raise OpenAIError(400, str(exc), param=SESSION_HEADER) from None
        except UsageError as exc:  # e.g. a result for no call the session waits on: nothing stored
            raise OpenAIError(400, str(exc), param=_result_param(chat, str(exc)),
                              code="unknown_tool_call" if chat.tool_results else None) from None
    except OpenAIError as exc:
        return exc.response()

    headers = {SESSION_HEADER: record.session_id, RUN_HEADER: record.id}
    if match is not None:
        headers[MATCH_HEADER] = "history-ambiguous" if match.ambiguous else "history"
    remember = _Remember(user=user, chat=chat, session_id=record.session_id,
                         fresh=session_header is None and echo.previous_response_id is None)
    if chat.stream:
        return event_stream(_stream(manager, record, asked, events, remember), headers)
    seen = [event async for event in events]  # the run's end ends the iterator
    final = await manager.await_run(record.id, 5.0) or record
    if final.status not in _ANSWERED:
        return failure_response(final, headers)
    text = final.answer if echo.json_output else answer_text(seen)
    calls = waiting_calls(seen)
    await remember(text, calls)
    return JsonResponse(_response(final, echo, text, calls), headers=headers)


@dataclass(frozen=True, kw_only=True)
class _Remember:
    """Records the chat the client now holds, for its next request to find this session
    (runs.core.context.fingerprint); only for a session the request did not name: a named
    one may hold turns the client does not resend."""

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
        await db_call(fingerprints.remember_history)(user=self.user, session_id=self.session_id,
                                                     fingerprint=fingerprint)


async def _session_of(user: Any, previous: str | None, header: str | None) -> str | None:
    """The session to continue: the previous response's, or `X-Session-Id`'s (the user's
    own, or a new one of that id), or None for a new one."""
    if previous is None:
        return await open_session(user, header)
    record = await db_call(run_selectors.run_get)(user=user, run_id=run_id_of(previous) or "")
    if record is None:  # another user's response is not found either
        raise OpenAIError(404, f"previous response {previous!r} not found", param="previous_response_id",
                          code="previous_response_not_found")
    if header is not None and header != record.session_id:
        raise OpenAIError(400, f"{SESSION_HEADER} {header!r} is not the session of previous_response_id {previous!r}",
                          param=SESSION_HEADER, code="session_mismatch")
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
    return response_object(run_id=record.id, model=record.agent, created_at=record.created_at.timestamp(),
                           status=status, echo=echo, output=output,
                           usage=usage(record.prompt_tokens, record.completion_tokens), error=error)


async def _stream(manager: Any, record: RunRecord, asked: ResponsesRequest, events: AsyncIterator[Event],
                  remember: _Remember) -> AsyncIterator[str]:
    """The run's events as Responses stream events: the text as chat completions streams it
    (each assistant message's text, separated by a blank line; a JSON answer whole at the
    end), then the client calls, then `response.completed` (or `response.failed`)."""
    echo = asked.echo
    out = ResponseStream(message_item_id(record.id, record.request_id))
    begun = response_object(run_id=record.id, model=record.agent, created_at=record.created_at.timestamp(),
                            status="in_progress", echo=echo)
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


async def _stream_done(record: RunRecord, echo: ResponseEcho, text: str, calls: Sequence[ToolCall]) -> AsyncIterator[str]:
    """A response that already ended, as a stream: its whole text in one delta."""
    out = ResponseStream(message_item_id(record.id, record.request_id))
    for line in out.start(response_object(run_id=record.id, model=record.agent, status="in_progress", echo=echo,
                                          created_at=record.created_at.timestamp())):
        yield line
    if text:
        for line in out.text(text):
            yield line
    for line in out.finish(_response(record, echo, text, calls), calls):
        yield line


async def _replay(manager: Any, record: RunRecord, asked: ResponsesRequest, session_header: str | None) -> HttpResponse:
    """A request whose `Idempotency-Key` already made a run: that run's response, waiting
    for it while it runs; another request under the same key is refused (as on chat
    completions, runs.openai_compat._replay)."""
    chat = asked.chat
    turn = await db_call(run_selectors.run_turn)(record=record)
    for _ in range(50):  # a concurrent request's run row is written before its turn is
        if turn:
            break
        await asyncio.sleep(0.1)
        turn = await db_call(run_selectors.run_turn)(record=record)
    if (record.agent != chat.agent or (session_header is not None and session_header != record.session_id)
            or not same_input(turn, chat)):
        raise OpenAIError(400, f"Idempotency-Key {record.request_id!r} was used for another request (model, input "
                          "or session differ); use a new key for a new request", param="Idempotency-Key",
                          code="idempotency_key_reused")
    final = await run_ended(manager, record)
    headers = {SESSION_HEADER: record.session_id, RUN_HEADER: record.id, REPLAYED_HEADER: "true"}
    if not final.finished:
        raise OpenAIError(409, f"the run {record.id} of this Idempotency-Key is still in progress; retry later",
                          param="Idempotency-Key", code="run_in_progress")
    if final.status not in _ANSWERED:
        return failure_response(final, headers)
    turn = await db_call(run_selectors.run_turn)(record=final)
    text = final.answer if asked.echo.json_output else answer_text(turn)
    calls = waiting_calls(turn)
    if chat.stream:
        return event_stream(_stream_done(final, asked.echo, text, calls), headers)
    return JsonResponse(_response(final, asked.echo, text, calls), headers=headers)


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
            raise OpenAIError(404, f"response {response_id!r} not found", param="response_id", code="response_not_found")
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
