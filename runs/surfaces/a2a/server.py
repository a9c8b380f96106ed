"""The A2A server: every agent of the runner at `/a2a/<agent>`, through the `a2a-sdk`.

`a2a_application` is the ASGI app `agentsite.asgi` hands every HTTP path under `/a2a/`. It
finds the agent (unknown: 404), authenticates the caller with a bearer token (every call but
the agent card; missing or wrong: 401), and passes the request to that agent's Starlette
app, built once from the SDK's own routes:

- `GET /a2a/<agent>/.well-known/agent-card.json`: the card (name, description, url, one
  skill for the agent and one per tool, streaming, the bearer security scheme), in the
  shape of the caller's `A2A-Version`: `0.3` a 0.3 card, anything else (no header too) a
  pure 1.0 card;
- `GET /.well-known/agent-card.json`: the card of `AGENTSITE_A2A_ROOT_AGENT` (default: the
  default agent), where clients look for an agent first; `GET /a2a/` lists every agent
  with its card URL (both public, like the cards); the pre-0.3 path
  `/.well-known/agent.json`, at the root and under each agent, serves the same cards (a
  0.3 card unless the caller asks for another version);
- `POST /a2a/<agent>`: JSON-RPC over `DefaultRequestHandler` (`SendMessage`,
  `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`; the
  A2A 0.3 names `message/send`, `message/stream`, `tasks/get`, `tasks/cancel` without an
  `A2A-Version` header or with `A2A-Version: 0.3`). 1.0 callers send `A2A-Version: 1.0`,
  as the SDK's client does. Params are checked strictly before the SDK parses them
  (`validation.py`); message `metadata.outputSchema` asks for a structured answer
  (`output_spec`).

`AgentsiteAgentExecutor` turns a message into a run of our Runner: `contextId` is the
session id (the caller's own, or a new one; someone else's is refused before a task
exists), request and message metadata become session state through a state-delta event in
the ledger, and the run's events become the task's updates:

| our event | A2A |
| --- | --- |
| run started | status `working` (metadata: run id, session id) |
| text delta | status `working`, no message; `metadata.agentsite_progress` `{kind: text_delta, messageId, text}` (batched) |
| assistant tool calls | status `working`, no message; `agentsite_progress` `{kind: tool_calls, messageId, text, calls, summary}` |
| tool result | status `working`, no message; `agentsite_progress` `{kind: tool_result, id, name, response, summary}` |
| completion `completed` | the answer as the task's one artifact (`name: answer`; a data part when the message asked for `metadata.outputSchema`), then status `completed` without a message |
| completion `completed` after a pause (`ask_user`, a graph interrupt) | status `input-required`, message: the question; `metadata.agentsite_pause` `{kind, question}`; no artifact. The next message on the task (same `taskId`) answers it and the task goes on |
| completion `failed` | status `failed`, message: the error (metadata: error type, message); no artifact |
| completion `cancelled` | status `canceled` |

A message on a `working` task (its `taskId`, or only its `contextId`) does not start a
second run: it is queued into the task's run (SPEC 1.5, `request_enqueue`, across
processes), taken before the run's next model step, and the answer is the same task, still
working (`message/stream` follows it to its end). Past the queue limit: -32600 with
`queue_full`; the run's process silent: -32603 with `run_unreachable`.

Progress is never a message: a client that stores status messages as the agent's words
(ADK's `RemoteA2aAgent` keeps `working` ones as thoughts) stores none of it, and the answer
is stored once, the same whether the task was sent or streamed. `agentsite_progress` merges
into the task's metadata as the SDK merges every update's; the end sets it to null.

Tasks live in our database (`DjangoTaskStore`). `CancelTask` stops the run, in this process
or, through the channel layer, in the one that runs it. With
`AGENTSITE_A2A_CONFORMANCE_AGENT` on, `/a2a/conformance` serves the conformance test agent
(`conformance.py`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import inspect
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from a2a.compat.v0_3.conversions import to_compat_agent_card
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext, RequestContextBuilder
from a2a.server.agent_execution.simple_request_context_builder import SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError
from a2a.server.request_handlers import DefaultRequestHandler, RequestHandler, build_error_response
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    CancelTaskRequest,
    HTTPAuthSecurityScheme,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_1_0,
    VERSION_HEADER,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from google.protobuf.json_format import MessageToDict, ParseDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentsite.api.json_input import InputError, parse_json
from agentsite.runtime import run_manager
from runs.attachment_input import a2a_file_part, attachment_limits
from runs.auth import AuthenticationError
from runs.core.agents.base import Agent
from runs.core.agents.graph import NotWaitingError, RunNotFoundError, resume_graph_run
from runs.core.agents.graph.events import OBJECT_INTERRUPT
from runs.core.attachments import AttachmentError, check_count
from runs.core.errors import UsageError
from runs.core.invocation import RunOptions
from runs.core.manager import RunManager
from runs.core.output import OUTPUT_EXTENSION, OutputSpec, SchemaError
from runs.core.routing import ROUTE_STATE_KEY
from runs.core.runner import Runner
from runs.core.steering import QueueFullError, RunNotActiveError
from runs.fanout import RunUnreachableError, request_cancel, request_enqueue
from runs.surfaces.a2a.agent import PROGRESS_KEY
from runs.surfaces.a2a.auth import SCOPE_USER, AgentsiteCallContextBuilder, authenticate, request_user
from runs.surfaces.a2a.conformance import CONFORMANCE_AGENT, ConformanceAgent, ConformanceExecutor
from runs.surfaces.a2a.task_store import PAUSE_KEY, DjangoTaskStore, close_answered_pauses
from runs.surfaces.a2a.validation import check_request, protocol_major
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import (
    OBJECT_CHUNK,
    OBJECT_STATE_UPDATE,
    ContentPart,
    Event,
    EventError,
    new_id,
)
from sessions_app.core.events import Message as LedgerMessage
from sessions_app.core.session import APP_PREFIX, SessionKey, SessionNotFoundError

logger = logging.getLogger(__name__)

A2A_PREFIX = "/a2a/"
A2A_DIRECTORY = "/a2a"
BEARER_SCHEME = "bearer"
CARD_VERSION = "1.0.0"
TEXT_MODES = ["text/plain", "application/json"]
# Text deltas are sent at most this often (each update rewrites the stored task).
FLUSH_INTERVAL_S = 0.1
# Task metadata keys: where the task ran, so a cancel can find the run from any process.
META_RUN_ID = "agentsite_run_id"
META_SESSION_ID = "agentsite_session_id"
META_AGENT = "agentsite_agent"
# Status-update metadata key of a working task's progress (null once the task ends).
META_PROGRESS = PROGRESS_KEY
# Metadata key of what an `input-required` task waits for: {kind, question}.
META_PAUSE = PAUSE_KEY
# Message (or request) metadata key of a JSON Schema the answer must follow.
META_OUTPUT_SCHEMA = "outputSchema"
# The card path of A2A before 0.3 (`/.well-known/agent.json`): served too, never a 401.
LEGACY_CARD_PATH = "/.well-known/agent.json"
_CARD_PATHS = (AGENT_CARD_WELL_KNOWN_PATH, LEGACY_CARD_PATH)
_MAX_CONTEXT_ID = 64
_RESULT_PREVIEW_CHARS = 2000

# The base URL of the request being served, for the agent card's interface URLs.
_base_url: contextvars.ContextVar[str] = contextvars.ContextVar("a2a_base_url", default="http://localhost")


# -- the agent card --------------------------------------------------------------------------


def _tools_of(agent: Agent) -> list[Any]:
    tools = getattr(agent, "tools", None) or ()
    return list(tools.values()) if isinstance(tools, Mapping) else list(tools)


def build_agent_card(agent: Agent, *, url: str) -> AgentCard:
    """The agent's card: one default skill and one skill per tool (SPEC 12.2)."""
    description = agent.description or f"The Agentsite agent {agent.name!r}."
    skills = [AgentSkill(id=agent.name, name=agent.name, description=description, tags=["default"])]
    for tool in _tools_of(agent):
        skills.append(AgentSkill(id=tool.name, name=tool.name, description=tool.description or tool.name, tags=["tool"]))
    return AgentCard(
        name=agent.name,
        description=description,
        version=CARD_VERSION,
        provider=AgentProvider(organization="Agentsite", url=url.split(A2A_PREFIX, 1)[0] or url),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_0_3),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={BEARER_SCHEME: SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
            scheme="Bearer",
            description="An Agentsite API token (`manage.py create_api_token USER`), sent as 'Authorization: Bearer <token>'.",
        ))},
        security_requirements=[SecurityRequirement(schemes={BEARER_SCHEME: StringList()})],
        default_input_modes=TEXT_MODES,
        default_output_modes=TEXT_MODES,
        skills=skills,
    )


def _agent_url(name: str) -> str:
    return f"{_base_url.get().rstrip('/')}{A2A_PREFIX}{name}"


def card_json(card: AgentCard, version: str | None) -> dict[str, Any]:
    """The card as a client of `version` (an `A2A-Version` header) reads it: 0.x a pure 0.3
    card (top-level `url`, `preferredTransport`, `protocolVersion`, schemes as `type`/
    `scheme`); anything else, no header included, a pure 1.0 card. A card is fetched before
    a client knows which versions the agent speaks, so without a header it is the current
    protocol's; its `supportedInterfaces` still list the 0.3 endpoint."""
    if (version or "").strip() and protocol_major(version) == 0:
        return to_compat_agent_card(card).model_dump(mode="json", exclude_none=True)
    return MessageToDict(card)


def _card_response(card: AgentCard, request: Request, *, legacy: bool = False) -> Response:
    """The card; at the legacy path a 0.3 card unless the caller asks for another version
    (only pre-1.0 clients read that path)."""
    version = request.headers.get(VERSION_HEADER) or (PROTOCOL_VERSION_0_3 if legacy else None)
    body = json.dumps(card_json(card, version), sort_keys=True)
    etag = f'W/"{hashlib.sha256(body.encode()).hexdigest()}"'
    headers = {"ETag": etag, "Vary": VERSION_HEADER}
    if etag.removeprefix("W/") in [tag.strip().removeprefix("W/") for tag in
                                   request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


# -- messages in and out ---------------------------------------------------------------------


def message_text(message: Message) -> str:
    """The text a message carries: its text parts, and its data parts as JSON (SPEC 12.2)."""
    texts: list[str] = []
    for part in message.parts:
        if part.HasField("text"):
            texts.append(part.text)
        elif part.HasField("data"):
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
        elif not part.HasField("raw") and not part.HasField("url"):  # files: message_files
            raise ContentTypeNotSupportedError(message="a part must carry text, data, raw or url")
    return "\n".join(t for t in texts if t)


def message_files(message: Message) -> tuple[ContentPart, ...]:
    """A message's file parts (`raw`, `url`) as attachments, checked as on every surface
    (issue 20): a type outside the allow list is -32005, any other refusal -32602 naming
    the part; nothing is stored from a refused message."""
    limits = attachment_limits()
    files: list[ContentPart] = []
    try:
        for index, part in enumerate(message.parts):
            if part.HasField("raw") or part.HasField("url"):
                files.append(a2a_file_part(
                    raw=part.raw if part.HasField("raw") else None, url=part.url if part.HasField("url") else None,
                    filename=part.filename, media_type=part.media_type, field=f"params.message.parts[{index}]",
                    limits=limits,
                ))
        check_count(files, limits=limits, field="params.message.parts")
    except AttachmentError as exc:
        if exc.status == 415:
            raise ContentTypeNotSupportedError(message=exc.message) from None
        raise InvalidParamsError(message=exc.message, data={"field": exc.field, "code": exc.code}) from None
    return tuple(files)


def _metadata_state(context: RequestContext) -> dict[str, Any]:
    """Request metadata, overlaid by message metadata: what becomes session state."""
    state = dict(context.metadata)
    if context.message is not None and context.message.HasField("metadata"):
        state.update(MessageToDict(context.message.metadata))
    # A client writes its session's and its own user's state, never the app's: every user sees
    # that. The output schema is a request about this answer, not state.
    return {k: v for k, v in state.items() if not k.startswith(APP_PREFIX) and k != META_OUTPUT_SCHEMA}


def output_spec(message: Message, request_metadata: Mapping[str, Any] | None = None) -> OutputSpec | None:
    """`metadata.outputSchema` of the message (else of the request): the JSON Schema the
    answer must follow, as on REST's `output_schema`; `InvalidParamsError` (-32602) naming
    the field and the problem when it is not a valid schema."""
    where, schema = "params.message.metadata.outputSchema", None
    if message.HasField("metadata") and META_OUTPUT_SCHEMA in message.metadata.fields:
        schema = MessageToDict(message.metadata)[META_OUTPUT_SCHEMA]
    elif request_metadata and META_OUTPUT_SCHEMA in request_metadata:
        where, schema = "params.metadata.outputSchema", request_metadata[META_OUTPUT_SCHEMA]
    else:
        return None
    try:
        return OutputSpec.of(schema)
    except SchemaError as exc:
        raise InvalidParamsError(message=f"{where}: {exc}", data={"field": where}) from None


def _value_part(value: Any) -> Part:
    """A structured answer as a data part (`application/json`)."""
    part = Part(media_type="application/json")
    ParseDict(value, part.data)
    return part


def _agent_message(updater: TaskUpdater, text: str, *extra: Part) -> Message:
    parts = [Part(text=text)] if text else []
    return updater.new_agent_message([*parts, *extra])


def _preview(text: str) -> str:
    return text if len(text) <= _RESULT_PREVIEW_CHARS else text[:_RESULT_PREVIEW_CHARS] + "…"


# -- the request context: checks made before a task exists -----------------------------------


def _session_owner(session_id: str) -> int | None:
    return session_selectors.session_owner_id(session_id=session_id)


class AgentsiteRequestContextBuilder(RequestContextBuilder):
    """Refuses what cannot run before the SDK creates a task for it: an anonymous caller, a
    message without text, files, an over-long message, someone else's context."""

    def __init__(self) -> None:
        self._inner = SimpleRequestContextBuilder()

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        user = request_user(context)
        if user is None:
            raise InvalidRequestError(message="authentication required: send 'Authorization: Bearer <token>'")
        if params is not None:
            if params.message.role not in (Role.ROLE_USER, Role.ROLE_UNSPECIFIED):
                raise InvalidParamsError(message="the message must have the user role")
            text = message_text(params.message)
            if not text.strip() and not message_files(params.message):
                raise InvalidParamsError(message="the message has no text")
            output_spec(params.message, MessageToDict(params.metadata) if params.HasField("metadata") else None)
            if len(text) > settings.AGENTSITE_MAX_MESSAGE_CHARS:
                raise InvalidParamsError(
                    message=f"the message is longer than {settings.AGENTSITE_MAX_MESSAGE_CHARS} characters")
            if context_id:
                if len(context_id) > _MAX_CONTEXT_ID:
                    raise InvalidParamsError(message=f"contextId is longer than {_MAX_CONTEXT_ID} characters")
                owner = await db_call(_session_owner)(context_id)
                if owner is not None and owner != user.pk:
                    # Another user's session: indistinguishable from one that does not exist.
                    raise InvalidParamsError(message=f"context {context_id!r} not found", data={"contextId": context_id})
        return await self._inner.build(
            context=context, params=params, task_id=task_id, context_id=context_id, task=task
        )


# -- the executor: a message in, a run of our Runner, its events out as task updates --------


@dataclass(frozen=True, kw_only=True)
class _Pause:
    """What a paused run waits for: the question its last event asked (SPEC 1.2 step 6)."""

    kind: str
    question: str
    routed: bool  # the session's next message answers it; else only a resume of the run does

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "question": self.question, "routed": self.routed}


def _pause_of(event: Event) -> _Pause | None:
    """The pause an event records: an `ask_user` question or a graph interrupt (routed or
    not), whose text is the question, not an answer."""
    route = event.state_delta.get(ROUTE_STATE_KEY)
    if isinstance(route, Mapping) and route.get("path"):
        return _Pause(kind=str(route.get("kind") or "ask_user"), question=event.text, routed=True)
    if event.object == OBJECT_INTERRUPT:
        return _Pause(kind="graph_interrupt", question=event.text, routed=False)
    return None


def _progress(kind: str, **fields: Any) -> dict[str, Any]:
    return {META_PROGRESS: {"kind": kind, **fields}}


@dataclass(kw_only=True)
class _TaskTranslator:
    """Turns the events of one run into the updates of one task.

    Everything before the end is progress: `working` status updates with no message and
    the progress under `metadata.agentsite_progress` (text deltas, tool calls, tool
    results), so that a client which stores status messages as the agent's words (ADK's
    RemoteA2aAgent keeps them as thoughts) stores none of it. The answer is sent once, at
    the end, as the task's one artifact; a pause ends the task `input-required` with the
    question as its status message; a failure ends it `failed` with the error."""

    updater: TaskUpdater
    pending_id: str = ""
    pending: list[str] = field(default_factory=list)
    last_flush: float = 0.0
    answer: str = ""
    answer_id: str = ""
    output: Any = None
    pause: _Pause | None = None
    error: EventError | None = None

    async def feed(self, event: Event) -> str | None:
        """Translate one event; returns the run's final status at its completion event."""
        if event.object == OBJECT_CHUNK and event.partial:
            if event.text:
                await self._delta(_message_id(event), event.text)
            return None
        await self.flush()
        if event.is_runner_completion:
            self.error = event.error or self.error
            if OUTPUT_EXTENSION in event.extensions:
                self.output = event.extensions[OUTPUT_EXTENSION]
            return str(event.extensions.get("status") or "failed")
        if event.is_error:
            self.error = event.error or self.error
            return None
        message = event.message
        if message is None or event.partial:
            return None
        if message.role == "assistant" and message.tool_calls:
            calls = [{"id": call.id, "name": call.name, "arguments": call.arguments} for call in message.tool_calls]
            summary = "\n".join(f"Calling {call.name}({call.arguments})" for call in message.tool_calls)
            await self._working(_progress("tool_calls", messageId=_message_id(event), text=message.content,
                                          calls=calls, summary=summary))
        elif message.role == "assistant" and message.content:
            pause = _pause_of(event)
            if pause is not None:
                self.pause = pause
            else:  # a later answer (a chain's next agent) is what the run ends on
                self.pause, self.answer, self.answer_id = None, message.content, _message_id(event)
        elif message.role == "tool":
            name = message.tool_name or "tool"
            await self._working(_progress("tool_result", id=message.tool_call_id or "", name=name,
                                          response=_preview(message.content), summary=f"{name} returned."))
        return None

    async def _working(self, metadata: dict[str, Any]) -> None:
        await self.updater.update_status(TaskState.TASK_STATE_WORKING, metadata=metadata)

    async def _delta(self, message_id: str, text: str) -> None:
        if self.pending and message_id != self.pending_id:
            await self.flush()
        self.pending_id = message_id
        self.pending.append(text)
        if time.monotonic() - self.last_flush >= FLUSH_INTERVAL_S:
            await self.flush()

    async def flush(self) -> None:
        """Send the text deltas gathered so far as one progress update."""
        if not self.pending:
            return
        text, message_id = "".join(self.pending), self.pending_id
        self.pending = []
        self.last_flush = time.monotonic()
        await self._working(_progress("text_delta", messageId=message_id, text=text))

    async def finish(self, status: str) -> None:
        """The task's end, from the run's final status."""
        updater, done = self.updater, {META_PROGRESS: None}
        if status == "completed" and self.pause is not None:
            await updater.update_status(
                TaskState.TASK_STATE_INPUT_REQUIRED, message=_agent_message(updater, self.pause.question),
                metadata={**done, META_PAUSE: self.pause.to_dict()},
            )
        elif status == "completed":
            parts = [_value_part(self.output)] if self.output is not None else (
                [Part(text=self.answer)] if self.answer else [])
            if parts:
                await updater.add_artifact(parts, artifact_id=self.answer_id or new_id(), name="answer",
                                           metadata={"final": True}, last_chunk=True)
            await updater.update_status(TaskState.TASK_STATE_COMPLETED, metadata=done)
        elif status == "cancelled":
            await updater.update_status(TaskState.TASK_STATE_CANCELED,
                                        message=_agent_message(updater, "The run was cancelled."), metadata=done)
        else:
            error = self.error or EventError(type=status, message=f"the run ended {status}")
            await updater.update_status(
                TaskState.TASK_STATE_FAILED,
                message=_agent_message(updater, f"{error.type}: {error.message}"),
                metadata={**done, "error_type": error.type, "error_message": error.message},
            )


def _unrouted_pause(task: Task | None) -> str | None:
    """The run to resume when `task` waits on a graph interrupt that no route answers (the
    graph was built without `await_user_reply`); None otherwise (a routed pause is answered
    by the session's next message, whatever its task)."""
    if task is None or task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        return None
    info = MessageToDict(task.metadata)
    pause, run_id = info.get(META_PAUSE), info.get(META_RUN_ID)
    if isinstance(pause, Mapping) and pause.get("routed") is False and isinstance(run_id, str) and run_id:
        return run_id
    return None


def _message_id(event: Event) -> str:
    return str(event.extensions.get("message_id") or event.id)


@dataclass(kw_only=True)
class _Execution:
    """A task this process is executing: its run, and whether it has been told to stop."""

    manager: RunManager
    run_id: str | None = None
    cancelled: bool = False  # by a CancelTask, which reports the task's end itself
    stop_requested: bool = False
    stop_sent: bool = False

    def attach(self, run_id: str) -> None:
        self.run_id = run_id
        if self.stop_requested:  # the stop came while the run was starting
            self._send_stop()

    def stop(self) -> None:
        self.stop_requested = True
        self._send_stop()

    def _send_stop(self) -> None:
        # Once only: a second cancel of a run could cut its completion short.
        if self.run_id is not None and not self.stop_sent:
            self.stop_sent = True
            self.manager.cancel(self.run_id)


class AgentsiteAgentExecutor(AgentExecutor):
    """Runs one of our agents for each A2A message (see the module docstring)."""

    def __init__(self, *, agent_name: str, manager: Callable[[], RunManager] = run_manager) -> None:
        self.agent_name = agent_name
        self._manager = manager
        self._executions: dict[str, _Execution] = {}

    @property
    def manager(self) -> RunManager:
        return self._manager()

    def is_running(self, task_id: str) -> bool:
        """Whether this process is executing the task now."""
        return task_id in self._executions

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        user = request_user(context.call_context)
        message = context.message
        if user is None or message is None or not context.task_id or not context.context_id:
            raise InvalidRequestError(message="an authenticated message is required")
        task_id, session_id = context.task_id, context.context_id
        updater = TaskUpdater(event_queue, task_id, session_id)
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        text = message_text(message)
        turn = LedgerMessage(role="user", content=text, parts=message_files(message))
        state = _metadata_state(context)
        output = output_spec(message, context.metadata)
        manager = self.manager
        execution = self._executions[task_id] = _Execution(manager=manager)
        listener, events = manager.bridge()
        request_id = new_id()

        paused_run = _unrouted_pause(context.current_task)

        async def start(runner: Runner) -> str:
            if paused_run is not None:
                # A graph that pauses without routing: only resuming its run answers it.
                handle = await resume_graph_run(runner, user_id=str(user.pk), run_id=paused_run, value=text,
                                                message=text, listeners=[listener])
                execution.attach(handle.run_id)
                return handle.run_id
            if state:
                await _record_state(runner, user_id=str(user.pk), session_id=session_id, agent=self.agent_name,
                                    delta=state, request_id=request_id, task_id=task_id)
            handle = await runner.start(
                user_id=str(user.pk), message=turn, session_id=session_id, agent=self.agent_name,
                request_id=request_id, listeners=[listener],
                options=RunOptions(metadata={"a2a_task_id": task_id}, output=output),
            )
            execution.attach(handle.run_id)
            return handle.run_id

        translator = _TaskTranslator(updater=updater)
        try:
            try:
                # Shielded: a run half-started by a cancelled request would be nobody's.
                run_id = await asyncio.shield(manager.acall(start))
            except SessionNotFoundError:
                raise InvalidParamsError(message=f"context {session_id!r} not found") from None
            except (NotWaitingError, RunNotFoundError) as exc:
                raise InvalidParamsError(message=f"task {task_id!r} cannot be answered: {exc}") from None
            except UsageError as exc:
                raise InvalidParamsError(message=str(exc)) from None
            if paused_run is None:
                # The run took the session's next message: a routed question another task asked is answered.
                await db_call(close_answered_pauses)(user.pk, session_id, answered_in=task_id)
            await updater.update_status(TaskState.TASK_STATE_WORKING, metadata={
                META_RUN_ID: run_id, META_SESSION_ID: session_id, META_AGENT: self.agent_name,
            })
            final = "failed"
            async for event in events:
                outcome = await translator.feed(event)
                if outcome is not None:
                    final = outcome
            if not execution.cancelled:
                await translator.finish(final)
        except BaseException:
            # The SDK cancels execute() after a CancelTask and when it shuts down; a failure
            # here fails the task. Either way the run must not outlive its task.
            execution.stop()
            raise
        finally:
            self._executions.pop(task_id, None)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        execution = self._executions.get(context.task_id or "")
        if execution is not None:
            execution.cancelled = True
            execution.stop()
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        await updater.update_status(TaskState.TASK_STATE_CANCELED, metadata={META_PROGRESS: None},
                                    message=_agent_message(updater, "Cancelled at the caller's request."))


async def _record_state(runner: Runner, *, user_id: str, session_id: str, agent: str, delta: Mapping[str, Any],
                        request_id: str, task_id: str) -> None:
    """Metadata becomes session state the only way state changes: an event in the ledger."""
    service = runner.session_service
    session = await service.get_session(SessionKey(app=runner.app, user_id=user_id, session_id=session_id),
                                        event_limit=0)
    if session is None:
        try:
            session = await service.create_session(app=runner.app, user_id=user_id, session_id=session_id, agent=agent)
        except ValueError:
            raise SessionNotFoundError(f"session {session_id!r} not found") from None
    await service.append_event(session, Event(
        author="user", object=OBJECT_STATE_UPDATE, request_id=request_id, branch=agent, filter_key=runner.app,
        state_delta=dict(delta), extensions={"source": "a2a", "a2a_task_id": task_id},
    ))


INTERNAL_ERROR = "internal error; it has been logged"


def _internal(exc: Exception) -> InternalError:
    """What a caller learns of a failure that is not about its request: that it happened.
    (The SDK answers with `str(exc)`: a database error and its SQL, for one.)"""
    logger.error("A2A request failed", exc_info=exc)
    return InternalError(message=INTERNAL_ERROR)


async def _guarded(result: Awaitable[Any]) -> Any:
    try:
        return await result
    except A2AError:
        raise
    except Exception as exc:
        raise _internal(exc) from None


async def _guarded_stream(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
    try:
        async for item in stream:
            yield item
    except A2AError:
        raise
    except Exception as exc:
        raise _internal(exc) from None


def _hide_internals(method: Callable[..., Any]) -> Callable[..., Any]:
    """A request handler method whose unexpected errors reach the caller as a bare
    internal error (its streaming methods return async generators, the rest coroutines)."""

    @functools.wraps(method)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = method(self, *args, **kwargs)
        except A2AError:
            raise
        except Exception as exc:
            raise _internal(exc) from None
        return _guarded_stream(result) if inspect.isasyncgen(result) else _guarded(result)

    return wrapped


def _hiding_internals(cls: type[RequestHandler]) -> type[RequestHandler]:
    for name in dir(RequestHandler):
        if name.startswith("on_"):
            setattr(cls, name, _hide_internals(getattr(cls, name)))
    return cls


@_hiding_internals
class AgentsiteRequestHandler(DefaultRequestHandler):
    """The SDK's handler; a message on a working task steers its run (`_steer`); a cancel
    of a task that runs in another process reaches its run; an unexpected error answers
    "internal error", never its text (see `_hide_internals`)."""

    def __init__(self, *, executor: AgentsiteAgentExecutor, **kwargs: Any) -> None:
        super().__init__(agent_executor=executor, **kwargs)
        self.executor = executor

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        steered = await self._steer(params, context)
        if steered is not None:
            return steered
        return await super().on_message_send(params, context)

    async def on_message_send_stream(self, params: SendMessageRequest, context: ServerCallContext) -> AsyncIterator[Any]:
        steered = await self._steer(params, context)
        if steered is None:
            async for event in super().on_message_send_stream(params, context):
                yield event
            return
        # The steered run's own updates, from the task as it stands to its end.
        sent = False
        try:
            async for event in super().on_subscribe_to_task(SubscribeToTaskRequest(id=steered.id), context):
                sent = True
                yield event
        except (TaskNotFoundError, UnsupportedOperationError):
            # Run by another process (no queue here to follow), or ended meanwhile: the
            # task as it stands; the caller follows it with GetTask.
            if not sent:
                yield await self.task_store.get(steered.id, context) or steered

    async def _steer(self, params: SendMessageRequest, context: ServerCallContext) -> Task | None:
        """Queue a message on a working task (its `taskId`, else its `contextId`) into the
        task's run (SPEC 1.5), consumed before the run's next model step; the task, still
        working, is the answer. None when no run of the caller's is working there: the
        SDK goes on as for any message (a new task, an ended task refused, an
        `input-required` one resumed)."""
        message = params.message
        store = self.task_store
        if message.task_id:
            task = await store.get(message.task_id, context)
        elif message.context_id and isinstance(store, DjangoTaskStore):
            task = await store.working_in(message.context_id, context)
        else:
            return None
        if task is None or task.status.state != TaskState.TASK_STATE_WORKING:
            return None
        run_field = task.metadata.fields.get(META_RUN_ID)
        run_id = run_field.string_value if run_field is not None else ""
        if not run_id:
            return None  # still starting its run: nothing to queue into yet
        if message.context_id and message.context_id != task.context_id:
            raise InvalidParamsError(
                message=f"task {task.id!r} belongs to context {task.context_id!r}, not {message.context_id!r}",
                data={"taskId": task.id, "contextId": message.context_id})
        # The checks every message passes (role, text, length, the caller's context).
        await self._request_context_builder.build(
            context=context, params=params, task_id=task.id, context_id=task.context_id, task=task)
        if message_files(message):
            raise InvalidParamsError(
                message=f"task {task.id!r} is working: a message queued into its run carries text only; "
                        "send files once the task has ended", data={"taskId": task.id})
        text = message_text(message)
        try:
            await self.executor.manager.acall(lambda runner: request_enqueue(runner, run_id, text))
        except RunNotActiveError:
            return None  # the run ended meanwhile: as for any message on the task
        except QueueFullError as exc:
            raise InvalidRequestError(
                message=f"task {task.id!r}: its run already holds {exc.limit} queued messages, the limit; "
                        "wait for it to take them",
                data={"code": "queue_full", "taskId": task.id, "limit": exc.limit}) from None
        except RunUnreachableError:
            raise InternalError(
                message=f"task {task.id!r}: its run did not answer (its process may be gone); try again",
                data={"code": "run_unreachable", "taskId": task.id}) from None
        except UsageError as exc:
            raise InvalidParamsError(message=f"task {task.id!r}: {exc}", data={"taskId": task.id}) from None
        logger.info("A2A message queued into run %s of working task %s", run_id, task.id)
        return await store.get(task.id, context) or task

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        local = self.executor.is_running(params.id)
        task = await super().on_cancel_task(params, context)
        run_id = task.metadata.fields.get(META_RUN_ID) if task is not None else None
        if not local and run_id is not None and run_id.string_value:
            # Running elsewhere (or nowhere): the SDK marked the task; the run's owner stops it.
            logger.info("A2A task %s is not running here: cancelling run %s across processes", params.id,
                        run_id.string_value)
            await self.executor.manager.acall(lambda runner: request_cancel(runner, run_id.string_value))
        return task


# -- the ASGI application --------------------------------------------------------------------


def _allowed_host(host: str) -> bool:
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]  # as Django does
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


async def _read_body(receive: Any, limit: int | None) -> bytes | None:
    """The whole request body, or None once it passes `limit` bytes (sent without a length)."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away: the SDK sees an empty body
        chunk = message.get("body", b"")
        seen += len(chunk)
        if limit is not None and seen > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Any) -> Any:
    """`receive` that hands the SDK the body already read, then the client's later messages."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _body_error(body: bytes) -> tuple[int, A2AError | JSONRPCError] | None:
    """What `parse_json` refuses in a JSON-RPC body, as the JSON-RPC error to answer (the SDK
    would parse deep JSON into a RecursionError, and pass NUL or a lone surrogate on to the
    database)."""
    try:
        parse_json(body)
    except InputError as exc:
        if exc.code == "invalid_text":
            kind = InvalidParamsError if exc.path[:1] == ("params",) else InvalidRequestError
            return 400, kind(message=exc.message("brackets"))
        if exc.code == "json_too_deep":
            return 400, JSONParseError(message=exc.message())
        return None  # not JSON at all: the SDK answers that itself
    return None


def _request_error(body: bytes, version: str | None) -> JSONResponse | None:
    """A method of another protocol version, or params that do not parse strictly: the
    JSON-RPC error, with the request's id and status 200, as the SDK answers errors."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None  # the SDK answers a parse error itself
    error = check_request(parsed, version)
    if error is None:
        return None
    request_id = parsed.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None
    return JSONResponse(build_error_response(request_id, error), status_code=200)


def _error(status: int, error: A2AError | JSONRPCError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(build_error_response(None, error), status_code=status, headers=dict(headers or {}))


@dataclass(kw_only=True)
class _Served:
    agent: Agent
    app: Starlette


class A2AApplication:
    """ASGI app for `/a2a/<agent>/...`: agent lookup, authentication, then the SDK's routes."""

    def __init__(self, *, manager: Callable[[], RunManager] = run_manager) -> None:
        self._manager = manager
        self._served: dict[str, _Served] = {}

    def _app_for(self, agent: Agent) -> Starlette:
        served = self._served.get(agent.name)
        if served is None or served.agent is not agent:
            served = _Served(agent=agent, app=self._build(agent))
            self._served[agent.name] = served
        return served.app

    def _build(self, agent: Agent) -> Starlette:
        path = f"{A2A_PREFIX}{agent.name}"
        card = build_agent_card(agent, url=f"http://localhost{path}")
        handler: RequestHandler
        if isinstance(agent, ConformanceAgent):
            handler = DefaultRequestHandler(
                agent_executor=ConformanceExecutor(), task_store=DjangoTaskStore(agent=agent.name), agent_card=card,
                request_context_builder=AgentsiteRequestContextBuilder(),
            )
        else:
            handler = AgentsiteRequestHandler(
                executor=AgentsiteAgentExecutor(agent_name=agent.name, manager=self._manager),
                task_store=DjangoTaskStore(agent=agent.name), agent_card=card,
                request_context_builder=AgentsiteRequestContextBuilder(),
            )
        return Starlette(routes=create_jsonrpc_routes(
            handler, rpc_url=path, context_builder=AgentsiteCallContextBuilder(), enable_v0_3_compat=True))

    def agents(self) -> dict[str, Agent]:
        """The agents served: the runner's, and the conformance agent when it is on."""
        served: dict[str, Agent] = dict(self._manager().runner.agents)
        if settings.AGENTSITE_A2A_CONFORMANCE_AGENT:
            served.setdefault(CONFORMANCE_AGENT, _CONFORMANCE)
        return served

    def root_agent(self) -> Agent | None:
        name = settings.AGENTSITE_A2A_ROOT_AGENT or self._manager().runner.default_agent
        return self.agents().get(name)

    def _directory(self) -> JSONResponse:
        agents = [{
            "name": agent.name,
            "description": agent.description or f"The Agentsite agent {agent.name!r}.",
            "url": _agent_url(agent.name),
            "agentCard": f"{_agent_url(agent.name)}{AGENT_CARD_WELL_KNOWN_PATH}",
        } for agent in self.agents().values()]
        root = self.root_agent()
        return JSONResponse({
            "agents": agents,
            "rootAgent": root.name if root is not None else None,
            "rootAgentCard": f"{_base_url.get().rstrip('/')}{AGENT_CARD_WELL_KNOWN_PATH}",
        })

    @staticmethod
    def _card(agent: Agent) -> AgentCard:
        url = _agent_url(agent.name)
        return build_agent_card(agent, url=url)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope)
        if not _allowed_host(request.headers.get("host", "")):
            # Django refuses these for its own views; the card's URLs are built from it.
            await _error(400, InvalidRequestError(message="invalid Host header"))(scope, receive, send)
            return
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        declared = request.headers.get("content-length", "")
        if limit is not None and declared.isdigit() and int(declared) > limit:
            await _error(413, InvalidRequestError(message=f"the body is larger than {limit} bytes"))(
                scope, receive, send)
            return
        token = _base_url.set(str(request.base_url))
        try:
            await self._dispatch(scope, receive, send, request, limit)
        finally:
            _base_url.reset(token)

    async def _dispatch(self, scope: dict[str, Any], receive: Any, send: Any, request: Request,
                        limit: int | None) -> None:
        path = scope["path"]
        if path in (A2A_DIRECTORY, A2A_PREFIX) and scope["method"] in ("GET", "HEAD"):
            await self._directory()(scope, receive, send)
            return
        reading = scope["method"] in ("GET", "HEAD")
        if path in _CARD_PATHS and reading:
            root = self.root_agent()
            if root is None:
                name = settings.AGENTSITE_A2A_ROOT_AGENT
                await _error(404, InvalidRequestError(message=f"root agent {name!r} not found",
                                                      data={"agent": name}))(scope, receive, send)
                return
            await _card_response(self._card(root), request, legacy=path == LEGACY_CARD_PATH)(scope, receive, send)
            return
        name, _, rest = path[len(A2A_PREFIX):].partition("/")
        agent = self.agents().get(name)
        if agent is None:
            message = f"agent {name!r} not found; see {A2A_PREFIX} for the agents served"
            await _error(404, InvalidRequestError(message=message, data={"agent": name}))(scope, receive, send)
            return
        if f"/{rest}" in _CARD_PATHS and reading:
            legacy = f"/{rest}" == LEGACY_CARD_PATH
            await _card_response(self._card(agent), request, legacy=legacy)(scope, receive, send)
            return
        try:
            user = await authenticate(request.headers.get("authorization"))
        except AuthenticationError as exc:
            user, problem = None, str(exc)
        else:
            problem = "authentication required: send 'Authorization: Bearer <token>'"
        if user is None:
            await _error(401, InvalidRequestError(message=problem), {"WWW-Authenticate": "Bearer"})(
                scope, receive, send)
            return
        scope = {**scope, SCOPE_USER: user}
        if scope["method"] == "POST":
            body = await _read_body(receive, limit)
            if body is None:
                await _error(413, InvalidRequestError(message=f"the body is larger than {limit} bytes"))(
                    scope, receive, send)
                return
            refused = _body_error(body)
            if refused is not None:
                await _error(*refused)(scope, receive, send)
                return
            answer = _request_error(body, request.headers.get(VERSION_HEADER))
            if answer is not None:
                await answer(scope, receive, send)
                return
            receive = _replay(body, receive)
        await self._app_for(agent)(scope, receive, send)


def serves(path: str) -> bool:
    """Whether an HTTP path is A2A's: the agents, their directory, the root agent card (at
    its current path and at the 0.2-era `/.well-known/agent.json`, which clients built on
    older SDKs, ADK's among them, still read)."""
    return path.startswith(A2A_PREFIX) or path == A2A_DIRECTORY or path in _CARD_PATHS


_CONFORMANCE = ConformanceAgent()
a2a_application = A2AApplication()
