"""AG-UI over HTTP, the run (runs/surfaces/agui/views.py): the thread's active run and the
checks before a run starts, the run's deadline, and the `text/event-stream` of its AG-UI
events (RUN_STARTED, the tool results sent in, the run translated, its end)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from ag_ui.encoder import EventEncoder
from django.conf import settings

from runs import models as run_orm
from runs.core.context.seeding import own_tool_names
from runs.core.errors import AgentNotFoundError
from runs.core.llm.base import ToolSpec
from runs.core.manager import RunManager
from runs.core.protocols.agui import AguiTranslator, text_of
from runs.core.records import RunRecord
from runs.core.runner import RunHandle, Runner
from runs.core.tools.client import (
    ClientToolError,
    check_clashes,
    takes_client_tools,
)
from runs.surfaces.agui.input import AguiRequestError, AguiTurn
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import Event, EventError

_LIVE = ("queued", "running")


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


# -- the stream -------------------------------------------------------------------------------


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
