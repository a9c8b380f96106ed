"""The A2A executor: a message in, a run of our Runner, its events out as task updates.

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

Progress is never a message: a client that stores status messages as the agent's words
(ADK's `RemoteA2aAgent` keeps `working` ones as thoughts) stores none of it, and the answer
is stored once, the same whether the task was sent or streamed. `agentsite_progress` merges
into the task's metadata as the SDK merges every update's; the end sets it to null.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext, RequestContextBuilder
from a2a.server.agent_execution.simple_request_context_builder import SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Part, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import InvalidParamsError, InvalidRequestError
from django.conf import settings
from google.protobuf.json_format import MessageToDict

from agentsite.runtime import run_manager
from runs.core.agents.graph import NotWaitingError, RunNotFoundError, resume_graph_run
from runs.core.agents.graph.events import OBJECT_INTERRUPT
from runs.core.errors import UsageError
from runs.core.invocation import RunOptions
from runs.core.manager import RunManager
from runs.core.output import OUTPUT_EXTENSION
from runs.core.routing import ROUTE_STATE_KEY
from runs.core.runner import Runner
from runs.surfaces.a2a.agent import PROGRESS_KEY
from runs.surfaces.a2a.auth import request_user
from runs.surfaces.a2a.messages import (
    _agent_message,
    _metadata_state,
    _preview,
    _value_part,
    message_files,
    message_text,
    output_spec,
)
from runs.surfaces.a2a.task_store import PAUSE_KEY, close_answered_pauses
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import OBJECT_CHUNK, OBJECT_STATE_UPDATE, Event, EventError, new_id
from sessions_app.core.events import Message as LedgerMessage
from sessions_app.core.session import SessionKey, SessionNotFoundError

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
_MAX_CONTEXT_ID = 64


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
                    message=f"the message is longer than {settings.AGENTSITE_MAX_MESSAGE_CHARS} characters"
                )
            if context_id:
                if len(context_id) > _MAX_CONTEXT_ID:
                    raise InvalidParamsError(message=f"contextId is longer than {_MAX_CONTEXT_ID} characters")
                owner = await db_call(_session_owner)(context_id)
                if owner is not None and owner != user.pk:
                    # Another user's session: indistinguishable from one that does not exist.
                    raise InvalidParamsError(
                        message=f"context {context_id!r} not found", data={"contextId": context_id}
                    )
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
            await self._working(
                _progress(
                    "tool_calls", messageId=_message_id(event), text=message.content, calls=calls, summary=summary
                )
            )
        elif message.role == "assistant" and message.content:
            pause = _pause_of(event)
            if pause is not None:
                self.pause = pause
            else:  # a later answer (a chain's next agent) is what the run ends on
                self.pause, self.answer, self.answer_id = None, message.content, _message_id(event)
        elif message.role == "tool":
            name = message.tool_name or "tool"
            await self._working(
                _progress(
                    "tool_result",
                    id=message.tool_call_id or "",
                    name=name,
                    response=_preview(message.content),
                    summary=f"{name} returned.",
                )
            )
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
                TaskState.TASK_STATE_INPUT_REQUIRED,
                message=_agent_message(updater, self.pause.question),
                metadata={**done, META_PAUSE: self.pause.to_dict()},
            )
        elif status == "completed":
            parts = (
                [_value_part(self.output)]
                if self.output is not None
                else ([Part(text=self.answer)] if self.answer else [])
            )
            if parts:
                await updater.add_artifact(
                    parts,
                    artifact_id=self.answer_id or new_id(),
                    name="answer",
                    metadata={"final": True},
                    last_chunk=True,
                )
            await updater.update_status(TaskState.TASK_STATE_COMPLETED, metadata=done)
        elif status == "cancelled":
            await updater.update_status(
                TaskState.TASK_STATE_CANCELED, message=_agent_message(updater, "The run was cancelled."), metadata=done
            )
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
                handle = await resume_graph_run(
                    runner, user_id=str(user.pk), run_id=paused_run, value=text, message=text, listeners=[listener]
                )
                execution.attach(handle.run_id)
                return handle.run_id
            if state:
                await _record_state(
                    runner,
                    user_id=str(user.pk),
                    session_id=session_id,
                    agent=self.agent_name,
                    delta=state,
                    request_id=request_id,
                    task_id=task_id,
                )
            handle = await runner.start(
                user_id=str(user.pk),
                message=turn,
                session_id=session_id,
                agent=self.agent_name,
                request_id=request_id,
                listeners=[listener],
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
            await updater.update_status(
                TaskState.TASK_STATE_WORKING,
                metadata={
                    META_RUN_ID: run_id,
                    META_SESSION_ID: session_id,
                    META_AGENT: self.agent_name,
                },
            )
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
        await updater.update_status(
            TaskState.TASK_STATE_CANCELED,
            metadata={META_PROGRESS: None},
            message=_agent_message(updater, "Cancelled at the caller's request."),
        )


async def _record_state(
    runner: Runner,
    *,
    user_id: str,
    session_id: str,
    agent: str,
    delta: Mapping[str, Any],
    request_id: str,
    task_id: str,
) -> None:
    """Metadata becomes session state the only way state changes: an event in the ledger."""
    service = runner.session_service
    session = await service.get_session(
        SessionKey(app=runner.app, user_id=user_id, session_id=session_id), event_limit=0
    )
    if session is None:
        try:
            session = await service.create_session(app=runner.app, user_id=user_id, session_id=session_id, agent=agent)
        except ValueError:
            raise SessionNotFoundError(f"session {session_id!r} not found") from None
    await service.append_event(
        session,
        Event(
            author="user",
            object=OBJECT_STATE_UPDATE,
            request_id=request_id,
            branch=agent,
            filter_key=runner.app,
            state_delta=dict(delta),
            extensions={"source": "a2a", "a2a_task_id": task_id},
        ),
    )
