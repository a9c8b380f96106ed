"""The session websocket's run frames (runs/surfaces/websocket/consumers.py): `run` starts a run on the socket's
session, `cancel` cancels one of its runs, `message` steers one (SPEC 1.5) and `withdraw` takes
back the messages still queued for it."""

from __future__ import annotations

import json
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

from agentsite.runtime import run_manager
from runs import models as run_orm
from runs.attachment_input import rest_parts
from runs.core.attachments import AttachmentError
from runs.core.errors import AgentNotFoundError, TooManyRunsError, UsageError
from runs.core.records import RunRecord
from runs.core.runner import RunHandle, Runner
from runs.core.steering import QueueFullError, RunNotActiveError
from runs.fanout import (
    PUBLISHED,
    RunUnreachableError,
    publishes_here,
    request_cancel,
    request_enqueue,
    request_withdraw,
)
from runs.surfaces.websocket.input import FrameError, _checked_text, _frame_message
from sessions_app.backends import db_call
from sessions_app.core.events import Event, Message
from sessions_app.core.session import SessionNotFoundError


@db_call
def _run_of_session(session_id: str, user_id: int, run_id: str) -> RunRecord | None:
    from runs.backends import record_from_row

    row = run_orm.Run.objects.filter(pk=run_id, session_id=session_id, user_id=user_id).first()
    return record_from_row(row) if row is not None else None


def _opening_events(handle: RunHandle) -> list[Event]:
    """The events `Runner.start` saved for the run (its user message, a routing note), in seq
    order, as the session service returned them: the newest saved events of the run's
    request (an earlier run's completion that the start wrote is not among them)."""
    opening: list[Event] = []
    for event in reversed(handle.invocation.session.events):
        if event.seq is None or event.request_id != handle.record.request_id:
            break
        opening.append(event)
    opening.reverse()
    return opening


class RunFrames(AsyncWebsocketConsumer):
    """The frames that act on the session's runs; `SessionConsumer.receive` dispatches to them."""

    session_id: str
    user: Any
    open_runs: set[str]
    runs_by_request: dict[str, str]

    async def _run(self, frame: dict[str, Any]) -> tuple[str, list[Event]]:
        """Start a run on the socket's session: its id, and the events its start saved (its
        user message), as saved, for the socket to show without reading them back."""
        message: str | Message = _frame_message(frame, empty_ok=bool(frame.get("attachments")))
        if frame.get("attachments"):  # images and files, as on REST (issue 20): checked before anything is stored
            try:
                parts = rest_parts(frame["attachments"], field="attachments", lookup=None)
            except AttachmentError as exc:
                raise FrameError(exc.code, exc.message, exc.field) from None
            message = Message(role="user", content=message, parts=parts)
        agent = _checked_text(frame, "agent")
        if agent is not None and (not isinstance(agent, str) or not agent):
            raise FrameError("invalid_frame", "agent must be a non-empty string", "agent")
        user_id, session_id = str(self.user.pk), self.session_id

        async def start(runner: Runner) -> tuple[RunRecord, bool, list[Event]]:
            handle = await runner.start(user_id=user_id, message=message, session_id=session_id, agent=agent)
            return handle.record, publishes_here(runner), _opening_events(handle)

        try:
            record, published_here, opening = await run_manager().acall(start)
        except AgentNotFoundError as exc:
            raise FrameError("unknown_agent", str(exc), "agent") from None
        except TooManyRunsError as exc:
            raise FrameError("too_many_runs", str(exc)) from None
        except (UsageError, SessionNotFoundError) as exc:
            raise FrameError("invalid_request", str(exc)) from None
        self.open_runs.add(record.id)  # open from now on, also before its first event comes
        # Known now: its user message, read from the ledger, needs no lookup of its run.
        self.runs_by_request[record.request_id] = record.id
        if (
            published_here
        ):  # its events go out from this process (issue 23: runs/surfaces/websocket/consumers.py's watch)
            PUBLISHED.run_here(session_id, record.id)
        await self.send(text_data=json.dumps({"type": "run.accepted", "run_id": record.id}))
        return record.id, opening

    async def _cancel(self, frame: dict[str, Any]) -> None:
        run_id = await self._live_run(frame)
        await run_manager().acall(lambda runner: request_cancel(runner, run_id))

    async def _live_run(self, frame: dict[str, Any]) -> str:
        """The frame's run_id, when it names a live run of this session and user."""
        run_id = _checked_text(frame, "run_id")
        if not isinstance(run_id, str) or not run_id:
            raise FrameError("invalid_frame", "run_id must be a non-empty string", "run_id")
        record = await _run_of_session(self.session_id, self.user.pk, run_id)
        if record is None:
            raise FrameError("not_found", f"run {run_id!r} not found in this session", "run_id")
        if record.finished:
            raise FrameError("run_not_active", f"run {run_id!r} already ended ({record.status})", "run_id")
        return run_id

    async def _steer(self, frame: dict[str, Any]) -> None:
        message = _frame_message(frame)
        run_id = await self._live_run(frame)
        try:
            queued = await run_manager().acall(lambda runner: request_enqueue(runner, run_id, message))
        except QueueFullError as exc:
            raise FrameError("queue_full", str(exc), "run_id") from None
        except RunUnreachableError as exc:
            raise FrameError("run_unreachable", str(exc), "run_id") from None
        except RunNotActiveError:
            raise FrameError("run_not_active", f"run {run_id!r} already ended", "run_id") from None
        except UsageError as exc:
            raise FrameError("invalid_frame", str(exc), "message") from None
        await self.send(
            text_data=json.dumps(
                {
                    "type": "message.queued",
                    "run_id": run_id,
                    "id": queued.id,
                    "message": queued.message.content,
                }
            )
        )

    async def _withdraw(self, frame: dict[str, Any]) -> None:
        run_id = await self._live_run(frame)
        try:
            withdrawn = await run_manager().acall(lambda runner: request_withdraw(runner, run_id))
        except RunUnreachableError as exc:
            raise FrameError("run_unreachable", str(exc), "run_id") from None
        except RunNotActiveError:
            raise FrameError("run_not_active", f"run {run_id!r} already ended", "run_id") from None
        await self.send(
            text_data=json.dumps(
                {
                    "type": "message.withdrawn",
                    "run_id": run_id,
                    "ids": [item.id for item in withdrawn],
                }
            )
        )
