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
  (`output_spec`, in `messages.py`).

`AgentsiteAgentExecutor` (`executor.py`) turns a message into a run of our Runner and the
run's events into the task's updates; the card is built in `card.py`, messages are read
and written in `messages.py`, and `guard.py` keeps unexpected errors' text from callers.

A message on a `working` task (its `taskId`, or only its `contextId`) does not start a
second run: it is queued into the task's run (SPEC 1.5, `request_enqueue`, across
processes), taken before the run's next model step, and the answer is the same task, still
working (`message/stream` follows it to its end). Past the queue limit: -32600 with
`queue_full`; the run's process silent: -32603 with `run_unreachable`.

Tasks live in our database (`DjangoTaskStore`). `CancelTask` stops the run, in this process
or, through the channel layer, in the one that runs it. With
`AGENTSITE_A2A_CONFORMANCE_AGENT` on, `/a2a/conformance` serves the conformance test agent
(`conformance.py`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import JSONParseError, JSONRPCError
from a2a.server.request_handlers import DefaultRequestHandler, RequestHandler, build_error_response
from a2a.server.routes import create_jsonrpc_routes
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, VERSION_HEADER
from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse

from agentsite.api.json_input import InputError, parse_json
from agentsite.runtime import run_manager
from runs.auth import AuthenticationError
from runs.core.agents.base import Agent
from runs.core.errors import UsageError
from runs.core.manager import RunManager
from runs.core.steering import QueueFullError, RunNotActiveError
from runs.fanout import RunUnreachableError, request_cancel, request_enqueue
from runs.surfaces.a2a.auth import SCOPE_USER, AgentsiteCallContextBuilder, authenticate
from runs.surfaces.a2a.card import A2A_PREFIX, _agent_url, _base_url, _card_response, build_agent_card
from runs.surfaces.a2a.conformance import CONFORMANCE_AGENT, ConformanceAgent, ConformanceExecutor
from runs.surfaces.a2a.executor import META_RUN_ID, AgentsiteAgentExecutor, AgentsiteRequestContextBuilder
from runs.surfaces.a2a.guard import _hiding_internals
from runs.surfaces.a2a.messages import message_files, message_text
from runs.surfaces.a2a.task_store import DjangoTaskStore
from runs.surfaces.a2a.validation import check_request

logger = logging.getLogger(__name__)

A2A_DIRECTORY = "/a2a"
# The card path of A2A before 0.3 (`/.well-known/agent.json`): served too, never a 401.
LEGACY_CARD_PATH = "/.well-known/agent.json"
_CARD_PATHS = (AGENT_CARD_WELL_KNOWN_PATH, LEGACY_CARD_PATH)


# -- the request handler: steering, cross-process cancel -------------------------------------


@_hiding_internals
class AgentsiteRequestHandler(DefaultRequestHandler):
    """The SDK's handler; a message on a working task steers its run (`_steer`); a cancel
    of a task that runs in another process reaches its run; an unexpected error answers
    "internal error", never its text (see `guard._hide_internals`)."""

    def __init__(self, *, executor: AgentsiteAgentExecutor, **kwargs: Any) -> None:
        super().__init__(agent_executor=executor, **kwargs)
        self.executor = executor

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        steered = await self._steer(params, context)
        if steered is not None:
            return steered
        return await super().on_message_send(params, context)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncIterator[Any]:
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
                data={"taskId": task.id, "contextId": message.context_id},
            )
        # The checks every message passes (role, text, length, the caller's context).
        await self._request_context_builder.build(
            context=context, params=params, task_id=task.id, context_id=task.context_id, task=task
        )
        if message_files(message):
            raise InvalidParamsError(
                message=f"task {task.id!r} is working: a message queued into its run carries text only; "
                "send files once the task has ended",
                data={"taskId": task.id},
            )
        text = message_text(message)
        try:
            await self.executor.manager.acall(lambda runner: request_enqueue(runner, run_id, text))
        except RunNotActiveError:
            return None  # the run ended meanwhile: as for any message on the task
        except QueueFullError as exc:
            raise InvalidRequestError(
                message=f"task {task.id!r}: its run already holds {exc.limit} queued messages, the limit; "
                "wait for it to take them",
                data={"code": "queue_full", "taskId": task.id, "limit": exc.limit},
            ) from None
        except RunUnreachableError:
            raise InternalError(
                message=f"task {task.id!r}: its run did not answer (its process may be gone); try again",
                data={"code": "run_unreachable", "taskId": task.id},
            ) from None
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
            logger.info(
                "A2A task %s is not running here: cancelling run %s across processes", params.id, run_id.string_value
            )
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
                agent_executor=ConformanceExecutor(),
                task_store=DjangoTaskStore(agent=agent.name),
                agent_card=card,
                request_context_builder=AgentsiteRequestContextBuilder(),
            )
        else:
            handler = AgentsiteRequestHandler(
                executor=AgentsiteAgentExecutor(agent_name=agent.name, manager=self._manager),
                task_store=DjangoTaskStore(agent=agent.name),
                agent_card=card,
                request_context_builder=AgentsiteRequestContextBuilder(),
            )
        return Starlette(
            routes=create_jsonrpc_routes(
                handler, rpc_url=path, context_builder=AgentsiteCallContextBuilder(), enable_v0_3_compat=True
            )
        )

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
        agents = [
            {
                "name": agent.name,
                "description": agent.description or f"The Agentsite agent {agent.name!r}.",
                "url": _agent_url(agent.name),
                "agentCard": f"{_agent_url(agent.name)}{AGENT_CARD_WELL_KNOWN_PATH}",
            }
            for agent in self.agents().values()
        ]
        root = self.root_agent()
        return JSONResponse(
            {
                "agents": agents,
                "rootAgent": root.name if root is not None else None,
                "rootAgentCard": f"{_base_url.get().rstrip('/')}{AGENT_CARD_WELL_KNOWN_PATH}",
            }
        )

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
                scope, receive, send
            )
            return
        token = _base_url.set(str(request.base_url))
        try:
            await self._dispatch(scope, receive, send, request, limit)
        finally:
            _base_url.reset(token)

    async def _dispatch(
        self, scope: dict[str, Any], receive: Any, send: Any, request: Request, limit: int | None
    ) -> None:
        path = scope["path"]
        if path in (A2A_DIRECTORY, A2A_PREFIX) and scope["method"] in ("GET", "HEAD"):
            await self._directory()(scope, receive, send)
            return
        reading = scope["method"] in ("GET", "HEAD")
        if path in _CARD_PATHS and reading:
            root = self.root_agent()
            if root is None:
                name = settings.AGENTSITE_A2A_ROOT_AGENT
                await _error(404, InvalidRequestError(message=f"root agent {name!r} not found", data={"agent": name}))(
                    scope, receive, send
                )
                return
            await _card_response(self._card(root), request, legacy=path == LEGACY_CARD_PATH)(scope, receive, send)
            return
        name, _, rest = path[len(A2A_PREFIX) :].partition("/")
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
                scope, receive, send
            )
            return
        scope = {**scope, SCOPE_USER: user}
        if scope["method"] == "POST":
            body = await _read_body(receive, limit)
            if body is None:
                await _error(413, InvalidRequestError(message=f"the body is larger than {limit} bytes"))(
                    scope, receive, send
                )
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
