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

from ag_ui.encoder import EventEncoder
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from agentsite.errors import envelope
from agentsite.runtime import run_manager
from runs.core.errors import DuplicateRequestError, TooManyRunsError, UsageError
from runs.core.invocation import RunOptions
from runs.core.protocols.agui import text_of
from runs.core.runner import Runner
from runs.fanout import request_cancel
from runs.surfaces.agui.input import AguiRequestError, AguiTurn, _invalid, _load_json, authenticate, parse_run_input
from runs.surfaces.agui.steering import (
    STEER_CONSUMED_EVENT,
    STEER_DROPPED_EVENT,
    STEER_QUEUED_EVENT,
    _steer,
    wants_steering,
)
from runs.surfaces.agui.stream import (
    _check_agent,
    _check_thread,
    _Deadline,
    _Started,
    _stop_at_deadline,
    _stream,
    active_run,
)
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import Message
from sessions_app.core.session import SessionNotFoundError

__all__ = [
    "STEER_CONSUMED_EVENT",
    "STEER_DROPPED_EVENT",
    "STEER_QUEUED_EVENT",
    "AguiRequestError",
    "AguiTurn",
    "active_run",
    "agui_cancel",
    "agui_run",
    "authenticate",
    "parse_run_input",
    "wants_steering",
]

# Threads whose run is being started right now, on the run loop (one loop, no lock needed):
# closes the gap between "no active run in the database" and the new run's row.
_starting: set[str] = set()


# -- views --------------------------------------------------------------------------------------


def _method_not_allowed(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(
        envelope("method_not_allowed", f"method {request.method!r} not allowed; use POST"), status=405
    )
    response["Allow"] = "POST"
    return response


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
