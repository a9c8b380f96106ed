"""AG-UI over HTTP, steering (SPEC 1.5; runs/surfaces/agui/views.py): an input that opts in
goes into the thread's active run, queued for its next model step, and the answer streams that
run from then on, from the run's own events or, when another process runs it, from the ledger."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from ag_ui.core import CustomEvent
from ag_ui.encoder import EventEncoder
from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from runs.core.errors import UsageError
from runs.core.manager import RunManager
from runs.core.protocols.agui import AguiTranslator
from runs.core.records import RunRecord
from runs.core.runner import Runner
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
from runs.fanout import RunUnreachableError, request_enqueue
from runs.surfaces.agui.input import AguiRequestError, AguiTurn, _invalid
from runs.surfaces.agui.stream import _finish_from_record, active_run
from sessions_app import selectors as session_selectors
from sessions_app.backends import db_call
from sessions_app.core.events import Event

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
