"""Tool progress (issue 21): the sink a run's tools report through, live to the run's
listeners and sinks, never into the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from runs.core.runner.handle import RunHandle, notify
from runs.core.tools.progress import ProgressSink, ToolProgress
from sessions_app.core.events import Event

if TYPE_CHECKING:
    from runs.core.runner.runner import Runner

logger = logging.getLogger(__name__)


def progress_sink(runner: Runner, handle: RunHandle) -> ProgressSink:
    """Issue 21: a sink that emits a tool's progress reports live, in the order they
    were made, to the run's listeners and sinks; never held or persisted (SPEC 1.7 keeps
    partial events out of the ledger). A report never precedes its call: one made before
    the call went out waits for it (the latest only), one after the result is dropped,
    and so is every report after a cancel (a sync tool's thread cannot be stopped, its
    reports can). Safe to call from a sync tool's worker thread."""
    loop = asyncio.get_running_loop()
    last: list[asyncio.Task[None]] = []
    shown: set[str] = set()
    finished: set[str] = set()
    pending: dict[str, Event] = {}

    async def publish(event: Event, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:  # one at a time, so that a sink sees them in order
            with contextlib.suppress(BaseException):
                await previous
        for sink in runner.sinks:
            try:
                await sink.publish(handle.record, event)
            except Exception:
                logger.exception("run %s: sink %r failed", handle.run_id, sink)

    def send(event: Event) -> None:
        notify(handle, event)
        if runner.sinks:
            last[:] = [runner.spawn(publish(event, last[0] if last else None), name=f"progress-{handle.run_id}")]

    def watch(item: Event | None) -> None:
        # Follows what the run emits: which calls are out, which have their result.
        if item is None or item.message is None:
            return
        for call in item.message.tool_calls:
            shown.add(call.id)
            waiting = pending.pop(call.id, None)
            if waiting is not None:
                send(waiting)
        if item.message.tool_call_id is not None:
            finished.add(item.message.tool_call_id)
            pending.pop(item.message.tool_call_id, None)

    handle.listeners.append(watch)

    def emit(event: Event) -> None:
        if handle.invocation.cancel_event.is_set() or (handle.task is not None and handle.task.done()):
            return
        progress = ToolProgress.from_event(event)
        if progress is None or progress.tool_call_id in finished:
            return
        event = handle.invocation.stamp(event)
        if progress.tool_call_id in shown:
            send(event)
        else:
            pending[progress.tool_call_id] = event

    def sink(event: Event) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed under a straggling thread
            loop.call_soon_threadsafe(emit, event)

    return sink
