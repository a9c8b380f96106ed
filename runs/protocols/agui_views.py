"""AG-UI over HTTP: `POST /agui/<agent>` streams a run as AG-UI events (SPEC 12.1, DESIGN 5).

In: a `RunAgentInput` (camelCase JSON). `threadId` is the session id: the caller's own
session, or a new one with that id. The last message is the run's input: a `user` message
(its text), or a trailing run of `tool` messages, the results of client-side tools, which
answer tool calls of the thread that have no result yet; they go into the ledger and the
agent continues with them. `tools` are the client's frontend tools (issue 25, item 9):
offered to the model beside the agent's own (a name the agent's tools already use, or an
invalid definition, answers 400 naming `tools.<i>.<field>`); when the model calls one, the
stream shows the call (TOOL_CALL_START/ARGS/END) and ends with RUN_FINISHED, the run
waiting for the client, whose next input on the thread carries the `tool` message with the
result and continues (runs.core.tools.client). `state` and `context` are accepted and not
used. `forwardedProps.outputSchema`, a JSON Schema, makes
the final answer structured output (issue 20, docs/extensions.md): validated, retried with
feedback, its JSON the last text message; an invalid schema answers 400 before anything is
stored. Other `forwardedProps` are ignored.

Out: `text/event-stream` of AG-UI events, encoded with `ag_ui.encoder.EventEncoder`:
RUN_STARTED, TOOL_CALL_RESULT for each tool message sent in, then the run translated by
`AguiTranslator`, ending with RUN_FINISHED (completed or cancelled) or RUN_ERROR (failed,
or stopped after `AGENTSITE_AGUI_RUN_TIMEOUT_S`). The run is detached from the request: a
client that goes away does not stop it. One active run per thread: a second POST while one
runs answers 409.

Steering (SPEC 1.5): a client that sets `forwardedProps.agentsite.steer` to true asks that
its user message go into the thread's active run instead of a 409: the message is queued for
that run's next model step (in whichever process runs it) and the answer streams that run
from now on: RUN_STARTED with its runId, CUSTOM `agentsite.message.queued` `{"id", "runId",
"message"}`, the run's events (the message itself as a user TEXT_MESSAGE once the run takes
it, then CUSTOM `agentsite.message.consumed` `{"id", "messageId", "state": "consumed"}`),
RUN_FINISHED. A message the run had no model step left for opens the next run of the
thread (`agentsite.message.consumed` with `state: "carried"` before RUN_FINISHED); a cancel
drops it (`agentsite.message.dropped`). With no active run, the input starts a run as usual.
429 `queue_full` when the run holds as many queued messages as it may.

`POST /agui/<agent>/cancel` `{"threadId", "runId"?}` cancels the thread's active run (in
whichever process runs it); its stream then ends with RUN_FINISHED.

Errors before the stream starts use the API envelope `{"error": {"code", "message",
"field"?}}`: 401 without credentials, 403 for a cookie without CSRF token, 404 for an
unknown agent or someone else's thread, 409 for a second active run, 422 for an input that
is not a valid `RunAgentInput` (the field is named, dotted and camelCase).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic
from ag_ui.core import CustomEvent, RunAgentInput, Tool, ToolMessage, UserMessage
from ag_ui.encoder import EventEncoder
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.request import Request

from agentsite.api.json_input import InputError, parse_json
from agentsite.errors import envelope
from agentsite.runtime import run_manager
from agentsite.threads import DB_EXECUTOR
from runs import models as run_orm
from runs.attachment_input import agui_parts
from runs.auth import BearerTokenAuthentication, SessionAuthentication
from runs.core.attachments import AttachmentError
from runs.core.context.seeding import own_tool_names
from runs.core.errors import AgentNotFoundError, DuplicateRequestError, TooManyRunsError, UsageError
from runs.core.invocation import RunOptions
from runs.core.llm.base import ToolSpec
from runs.core.manager import RunManager
from runs.core.output import OutputSpec, SchemaError
from runs.core.protocols.agui import AguiTranslator, history_messages, text_of
from runs.core.records import RunRecord
from runs.core.runner import RunHandle, Runner
from runs.core.steering import (
    CARRIED,
    CARRIED_IDS,
    DROPPED,
    QUEUED,
    QUEUED_ID,
    QueuedMessage,
    QueueFullError,
    RunNotActiveError,
)
from runs.core.tools.client import (
    ClientToolError,
    check_clashes,
    check_unique,
    client_tool_spec,
    takes_client_tools,
)
from runs.fanout import RunUnreachableError, request_cancel, request_enqueue
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import ContentPart, Event, EventError, Message
from sessions_app.core.session import SessionNotFoundError

logger = logging.getLogger(__name__)

_LIVE = ("queued", "running")
_SESSION_ID_MAX = 64
_MESSAGE_ROLES = {"developer", "system", "assistant", "user", "tool", "activity", "reasoning"}
_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Threads whose run is being started right now, on the run loop (one loop, no lock needed):
# closes the gap between "no active run in the database" and the new run's row.
_starting: set[str] = set()


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


# -- the thread and its runs ----------------------------------------------------------------


def _active_run_sync(user_id: int, thread_id: str, run_id: str | None) -> RunRecord | None:
    from runs.backends import record_from_row

    rows = run_orm.Run.objects.filter(session_id=thread_id, user_id=user_id, status__in=_LIVE)
    if run_id:
        rows = rows.filter(pk=run_id)
    row = rows.order_by("-created_at").first()
    return record_from_row(row) if row is not None else None


async def active_run(user: Any, thread_id: str, run_id: str | None = None) -> RunRecord | None:
    """The thread's run that is queued or running (in any process), if any."""
    return await db_call(_active_run_sync)(user.pk, thread_id, run_id)


async def _check_thread(user: Any, thread_id: str) -> None:
    """404 when the thread belongs to someone else; a new id is fine (the run creates it)."""
    if await db_call(session_selectors.session_of_another)(user=user, session_id=thread_id):
        raise AguiRequestError(404, "not_found", f"thread {thread_id!r} not found", "threadId")


async def _check_agent(manager: RunManager, agent: str, client_tools: Sequence[ToolSpec] = ()) -> tuple[ToolSpec, ...]:
    """404 for an unknown agent; 400 for a frontend tool named like one of its own. The
    frontend tools the run offers: none for an agent that is not an LLM agent (a graph or a
    composite cannot pause for them; AG-UI clients send their tools with every input)."""

    async def check(runner: Runner) -> tuple[frozenset[str], bool]:
        chosen = runner.agent(agent)
        return own_tool_names(chosen), takes_client_tools(chosen)

    try:
        server_tools, takes = await manager.acall(check)
    except AgentNotFoundError:
        raise AguiRequestError(404, "unknown_agent", f"agent {agent!r} not found", "agent") from None
    if not takes:
        return ()
    try:
        check_clashes(client_tools, server_tools, lambda index: f"tools.{index}.name", agent=agent)
    except ClientToolError as exc:
        raise AguiRequestError(400, exc.code, str(exc), exc.param) from None
    return tuple(client_tools)


@dataclass(kw_only=True)
class _Deadline:
    expired: bool = False


async def _stop_at_deadline(runner: Runner, handle: RunHandle, timeout_s: float, deadline: _Deadline) -> None:
    """SPEC 12.1: an AG-UI run has a deadline (1 h by default) even with nobody watching."""
    try:
        await asyncio.wait_for(handle.wait(), timeout_s)
    except TimeoutError:
        deadline.expired = True
        runner.cancel(handle.run_id)


# -- views --------------------------------------------------------------------------------------


def _method_not_allowed(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(
        envelope("method_not_allowed", f"method {request.method!r} not allowed; use POST"), status=405
    )
    response["Allow"] = "POST"
    return response


@dataclass(kw_only=True)
class _Started:
    """A run this view started, and where to reach it (the run loop may be another's)."""

    record: RunRecord
    runner: Runner
    loop: asyncio.AbstractEventLoop
    state: dict[str, Any]


async def _finish_from_record(
    manager: RunManager, translator: AguiTranslator, run_id: str, record: RunRecord
) -> list[Any]:
    """The closing events of a stream whose completion event never reached it, from the
    run's stored record (its error, when it did not complete or get cancelled)."""
    final = await manager.await_run(run_id, 5.0) or record
    error = None
    if final.status not in ("completed", "cancelled"):
        details = final.error or {}
        error = (
            str(details.get("type") or final.status),
            str(details.get("message") or f"the run ended as {final.status!r}"),
        )
    return list(translator.finish(run_id, error=error))


@csrf_exempt  # bearer tokens need no CSRF; session authentication enforces it (DRF)
async def agui_run(request: HttpRequest, agent: str) -> HttpResponse:
    """`POST /agui/<agent>`: run the agent and stream the run as AG-UI server-sent events."""
    if request.method != "POST":
        return _method_not_allowed(request)
    manager = run_manager()
    try:
        user = await authenticate(request)
        body = _load_json(request)
        turn = parse_run_input(body)
        steer = wants_steering(body)
        client_tools = await _check_agent(manager, agent, turn.client_tools)
        await _check_thread(user, turn.thread_id)
        if steer and turn.text is not None and (steered := await _steer(request, manager, user, turn)) is not None:
            return steered
        listener, events = manager.bridge()
        deadline = _Deadline()
        timeout_s = float(settings.AGENTSITE_AGUI_RUN_TIMEOUT_S)
        tool_results = [
            Message(role="tool", content=text_of(t.content), tool_call_id=t.tool_call_id) for t in turn.tool_messages
        ]

        async def start(runner: Runner) -> _Started:
            # Claimed before the first await, so a concurrent start of this thread sees it.
            busy = AguiRequestError(
                409, "run_active", f"thread {turn.thread_id!r} already has an active run", "threadId"
            )
            if turn.thread_id in _starting:
                raise busy
            _starting.add(turn.thread_id)
            try:
                if await active_run(user, turn.thread_id) is not None:
                    raise busy
                handle = await runner.start(
                    user_id=str(user.pk),
                    message=Message(role="user", content=turn.text, parts=turn.parts) if turn.parts else turn.text,
                    tool_results=tool_results,
                    session_id=turn.thread_id,
                    agent=agent,
                    seed=turn.history,  # stored only when the thread is new
                    options=RunOptions(
                        metadata={"agui_run_id": turn.client_run_id}, output=turn.output, client_tools=client_tools
                    ),
                    listeners=[listener],
                )
            finally:
                _starting.discard(turn.thread_id)
            runner.spawn(_stop_at_deadline(runner, handle, timeout_s, deadline), name=f"agui-deadline-{handle.run_id}")
            return _Started(
                record=handle.record,
                runner=runner,
                loop=asyncio.get_running_loop(),
                state=dict(handle.invocation.session.state),
            )

        try:
            started = await manager.acall(start)
        except SessionNotFoundError as exc:
            raise AguiRequestError(404, "not_found", str(exc), "threadId") from None
        except DuplicateRequestError as exc:
            raise AguiRequestError(409, "duplicate_request", str(exc)) from None
        except TooManyRunsError as exc:
            raise AguiRequestError(429, "too_many_runs", str(exc)) from None
        except UsageError as exc:
            raise _invalid(str(exc), _tool_field(turn, str(exc))) from None
    except AguiRequestError as exc:
        return exc.response()
    encoder = EventEncoder(accept=request.headers.get("Accept", ""))
    response = StreamingHttpResponse(
        _stream(manager, started, turn, events, listener, deadline, encoder), content_type=encoder.get_content_type()
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must pass each event on at once
    return response


def _tool_field(turn: AguiTurn, message: str) -> str | None:
    """The input field a refused tool result is about (the runner names the call id)."""
    for index, tool in zip(turn.tool_indexes, turn.tool_messages, strict=True):
        if repr(tool.tool_call_id) in message:
            return f"messages.{index}.toolCallId"
    return "messages" if turn.tool_messages else None


async def _stream(
    manager: RunManager,
    started: _Started,
    turn: AguiTurn,
    events: AsyncIterator[Event],
    listener: Any,
    deadline: _Deadline,
    encoder: EventEncoder,
) -> AsyncIterator[str]:
    record = started.record
    run_id = record.id
    translator = AguiTranslator(thread_id=record.session_id)
    try:
        for item in translator.run_started(run_id):
            yield encoder.encode(item)
        if started.state:
            # The thread's state as the run starts; the run's STATE_DELTAs apply to it.
            yield encoder.encode(translator.state_snapshot(started.state))
        for tool in turn.tool_messages:
            for item in translator.tool_result(
                run_id=run_id, message_id=tool.id, tool_call_id=tool.tool_call_id, content=text_of(tool.content)
            ):
                yield encoder.encode(item)
        async for event in events:
            if event.is_runner_completion and deadline.expired and event.extensions.get("status") == "cancelled":
                event = event.replace(
                    extensions={**event.extensions, "status": "failed"},
                    error=EventError(
                        type="timeout", message=f"the run exceeded {settings.AGENTSITE_AGUI_RUN_TIMEOUT_S}s"
                    ),
                )
            for item in translator.translate(event, run_id=run_id):
                yield encoder.encode(item)
        if not translator.is_finished(run_id):
            # The completion event never reached us (it could not be emitted in time).
            for item in await _finish_from_record(manager, translator, run_id, record):
                yield encoder.encode(item)
    finally:
        # A client that went away stops listening; the run itself goes on (detached).
        with contextlib.suppress(RuntimeError):  # the run loop is closed (shutting down)
            started.loop.call_soon_threadsafe(started.runner.remove_listener, run_id, listener)


@csrf_exempt
async def agui_cancel(request: HttpRequest, agent: str) -> HttpResponse:
    """`POST /agui/<agent>/cancel` `{"threadId", "runId"?}`: cancel the thread's active run."""
    if request.method != "POST":
        return _method_not_allowed(request)
    manager = run_manager()
    try:
        user = await authenticate(request)
        body = _load_json(request)
        if not isinstance(body, dict):
            raise _invalid("the body must be a JSON object", None)
        thread_id = body.get("threadId")
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise _invalid("threadId must be a non-empty string", "threadId")
        run_id = body.get("runId")
        if run_id is not None and not isinstance(run_id, str):
            raise _invalid("runId must be a string", "runId")
        await _check_agent(manager, agent)
        owned = await db_call(session_selectors.session_get)(user=user, session_id=thread_id)
        if owned is None:
            raise AguiRequestError(404, "not_found", f"thread {thread_id!r} not found", "threadId")
        record = await active_run(user, thread_id, run_id or None)
        if record is None:
            what = f"run {run_id!r} of thread {thread_id!r}" if run_id else f"thread {thread_id!r}"
            raise AguiRequestError(404, "run_not_found", f"no active run on {what}", "runId" if run_id else "threadId")
    except AguiRequestError as exc:
        return exc.response()
    target = record.id
    await manager.acall(lambda runner: request_cancel(runner, target))
    return JsonResponse({"threadId": thread_id, "runId": target, "status": "cancelling"}, status=202)


# -- steering (SPEC 1.5) ----------------------------------------------------------------------

STEER_QUEUED_EVENT = "agentsite.message.queued"
STEER_CONSUMED_EVENT = "agentsite.message.consumed"
STEER_DROPPED_EVENT = "agentsite.message.dropped"
_FOLLOW_POLL_S = 0.5


def wants_steering(body: Any) -> bool:
    """Whether the input opts in to steering: `forwardedProps.agentsite.steer` is true (422
    when it is there and not a boolean)."""
    props = body.get("forwardedProps") if isinstance(body, dict) else None
    ours = props.get("agentsite") if isinstance(props, dict) else None
    if ours is None:
        return False
    if not isinstance(ours, dict):
        raise _invalid("forwardedProps.agentsite must be an object", "forwardedProps.agentsite")
    steer = ours.get("steer", False)
    if not isinstance(steer, bool):
        raise _invalid(
            f"forwardedProps.agentsite.steer must be true or false, got {steer!r}", "forwardedProps.agentsite.steer"
        )
    return steer


@db_call
def _last_seq(session_id: str) -> int:
    return session_selectors.last_seq(session_id=session_id)


@db_call
def _saved_after(session_id: str, request_id: str, after_seq: int) -> list[Event]:
    return session_selectors.events_after(session_id=session_id, request_id=request_id, after_seq=after_seq, limit=500)


async def _steer(request: HttpRequest, manager: RunManager, user: Any, turn: AguiTurn) -> HttpResponse | None:
    """Queue the input's message into the thread's active run and stream that run; None when
    the thread has no active run (the caller starts one)."""
    active = await active_run(user, turn.thread_id)
    if active is None:
        return None
    text = turn.text or ""
    after_seq = await _last_seq(turn.thread_id)
    listener, events = manager.bridge()

    async def enqueue(runner: Runner) -> tuple[QueuedMessage, bool, Runner, asyncio.AbstractEventLoop]:
        queued = await request_enqueue(runner, active.id, text)
        # Nothing awaited since the queueing: the run cannot have taken it before we listen.
        following = runner.add_listener(active.id, listener)
        return queued, following, runner, asyncio.get_running_loop()

    try:
        queued, following, runner, loop = await manager.acall(enqueue)
    except RunNotActiveError:
        return None  # it ended meanwhile: the message starts the next run
    except QueueFullError as exc:
        raise AguiRequestError(429, "queue_full", str(exc), "threadId") from None
    except RunUnreachableError as exc:
        raise AguiRequestError(503, "run_unreachable", str(exc), "threadId") from None
    except UsageError as exc:
        raise _invalid(str(exc), "messages") from None
    encoder = EventEncoder(accept=request.headers.get("Accept", ""))
    live = events if following else _follow_ledger(active, after_seq)
    response = StreamingHttpResponse(
        _steer_stream(
            manager,
            active,
            queued,
            live,
            encoder,
            stop=lambda: loop.call_soon_threadsafe(runner.remove_listener, active.id, listener),
        ),
        content_type=encoder.get_content_type(),
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _follow_ledger(record: RunRecord, after_seq: int) -> AsyncIterator[Event]:
    """The saved events of a run another process runs, as they land (no text deltas)."""
    deadline = asyncio.get_running_loop().time() + float(settings.AGENTSITE_AGUI_RUN_TIMEOUT_S)
    while asyncio.get_running_loop().time() < deadline:
        saved = await _saved_after(record.session_id, record.request_id, after_seq)
        for event in saved:
            after_seq = max(after_seq, event.seq or 0)
            yield event
            if event.is_runner_completion:
                return
        if not saved:
            await asyncio.sleep(_FOLLOW_POLL_S)


async def _steer_stream(
    manager: RunManager,
    record: RunRecord,
    queued: QueuedMessage,
    events: AsyncIterator[Event],
    encoder: EventEncoder,
    *,
    stop: Callable[[], Any],
) -> AsyncIterator[str]:
    run_id = record.id
    translator = AguiTranslator(thread_id=record.session_id, include_user_messages=True)
    joined = False  # deltas of a message that began before we joined are skipped; it comes whole
    try:
        for item in translator.run_started(run_id):
            yield encoder.encode(item)
        yield encoder.encode(
            CustomEvent(
                name=STEER_QUEUED_EVENT,
                value={
                    "id": queued.id,
                    "runId": run_id,
                    "message": queued.message.content,
                },
            )
        )
        async for event in events:
            if event.partial and not joined:
                continue
            joined = True
            if event.is_runner_completion:
                for item in _queued_outcome(event, queued.id):
                    yield encoder.encode(item)
            for item in translator.translate(event, run_id=run_id):
                yield encoder.encode(item)
            if event.extensions.get(QUEUED_ID) == queued.id:
                yield encoder.encode(
                    CustomEvent(
                        name=STEER_CONSUMED_EVENT,
                        value={
                            "id": queued.id,
                            "messageId": event.id,
                            "state": event.extensions.get(QUEUED),
                        },
                    )
                )
        if not translator.is_finished(run_id):
            for item in await _finish_from_record(manager, translator, run_id, record):
                yield encoder.encode(item)
    finally:
        with contextlib.suppress(RuntimeError):
            stop()


def _queued_outcome(completion: Event, queued_id: str) -> list[CustomEvent]:
    """What became of the message when the run ended without taking it."""
    if queued_id in (completion.extensions.get(CARRIED_IDS) or []):
        return [CustomEvent(name=STEER_CONSUMED_EVENT, value={"id": queued_id, "state": CARRIED})]
    if any(isinstance(d, dict) and d.get("id") == queued_id for d in completion.extensions.get(DROPPED) or []):
        return [CustomEvent(name=STEER_DROPPED_EVENT, value={"id": queued_id})]
    return []
