"""The run handle and what a run's events go to: listeners, sinks, the hooks around a run.

A `RunHandle` carries one run's in-memory bookkeeping from its start to its end; the
functions below keep it (observe, account, notify) without any I/O.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from runs.core.agents.base import Agent
from runs.core.errors import UsageError
from runs.core.invocation import Invocation
from runs.core.output import OUTPUT_EXTENSION
from runs.core.records import RunRecord
from runs.core.steering import QueuedMessage, SteeringQueue
from runs.core.tools.client import CLIENT_CALLS_EXTENSION
from runs.core.trace import CompletionCapture, TraceRecorder
from sessions_app.core.events import NO_MODEL_CALL, Event, utcnow
from sessions_app.core.summary import SummaryGate

logger = logging.getLogger(__name__)

# SPEC 1.9: the completion event is persisted and delivered within this budget after a cancel.
COMPLETION_BUDGET_S = 1.0
DEFAULT_HISTORY_EVENT_LIMIT = 400
START_FAILURE_MAX_CHARS = 500
# SPEC 1.10: the extension that marks an assistant answer a cancel cut short.
INTERRUPTED_ASSISTANT = "interrupted_assistant"


class EventSink(Protocol):
    """Receives every emitted event of every run (e.g. the channel-layer fan-out)."""

    async def publish(self, record: RunRecord, event: Event) -> None: ...


EventListener = Callable[[Event | None], None]
"""Called on the run's loop with each emitted event, then once with None when the run ends.

It must not block: hand the event on (a queue, `call_soon_threadsafe`) and return."""

Admission = Callable[[str], Awaitable[None]]
"""Called with the user id before a run of theirs is prepared; raises (e.g. `TooManyRunsError`)
to refuse it. The composition root counts the user's live runs in the database, so the
limit holds across processes."""

PostRunHook = Callable[[RunRecord], Awaitable[None]]
"""Called with the final record once a run's completion is saved (SPEC 1.9 step 6, 1.11:
auto memory, evolution review). It should only enqueue work; failures are logged, never raised."""


@dataclass(kw_only=True)
class RunHandle:
    """A started run: its identity, its live events and its outcome."""

    record: RunRecord
    invocation: Invocation
    agent: Agent | None = None
    task: asyncio.Task[RunRecord] | None = None
    listeners: list[EventListener] = field(default_factory=list, repr=False)
    steering: SteeringQueue | None = field(default=None, repr=False)
    # Queued messages a cancel dropped (reported on the completion event), and those still
    # queued at the end that open the next run (SPEC 1.5).
    _dropped: list[QueuedMessage] = field(default_factory=list, repr=False)
    _carried: list[QueuedMessage] = field(default_factory=list, repr=False)
    _queue: asyncio.Queue[Event | None] | None = field(default=None, repr=False)
    _summary_gate: SummaryGate | None = field(default=None, repr=False)
    # What the completion event says of the run (SPEC 1.6.6) and its execution trace (1.9.3).
    _capture: CompletionCapture = field(default_factory=CompletionCapture, repr=False)
    _trace: TraceRecorder | None = field(default=None, repr=False)
    # SPEC 1.10: streamed assistant text per message id, kept only when the run persists
    # interrupted answers; a message's complete event removes its entry.
    _streamed: dict[str, tuple[Event, list[str]]] | None = field(default=None, repr=False)
    # Issue 20: the client-tool calls of the run's last step (the run pauses for them), and
    # the trace of the segments before a pause this run resumed from.
    _client_calls: list[str] = field(default_factory=list, repr=False)
    _earlier_trace: Mapping[str, Any] | None = field(default=None, repr=False)
    # Issue 18: whether the run's final record was written with its last step.
    _record_joined: bool = field(default=False, repr=False)

    @property
    def run_id(self) -> str:
        return self.record.id

    @property
    def session_id(self) -> str:
        return self.record.session_id

    async def events(self) -> AsyncIterator[Event]:
        """Every emitted event, ending with the completion event. Only when started with
        `stream=True`."""
        if self._queue is None:
            raise UsageError("this run was started without stream=True")
        while True:
            item = await self._queue.get()
            if item is None:
                return
            yield item

    async def wait(self) -> RunRecord:
        """The final record once the run has ended."""
        assert self.task is not None
        return await asyncio.shield(self.task)


def observe(handle: RunHandle, event: Event) -> None:
    """Follow an event for the completion capture, the trace and the interrupted
    answers; only in-memory bookkeeping (no I/O per event)."""
    handle._capture.observe(event)
    if handle._trace is not None:
        handle._trace.observe(event)
    if event.message is not None and event.message.role == "assistant" and not event.partial and not event.is_error:
        handle._client_calls = list(event.extensions.get(CLIENT_CALLS_EXTENSION) or ())
    streamed = handle._streamed
    if streamed is None or event.message is None or event.message.role != "assistant":
        return
    if event.partial:
        message_id = event.extensions.get("message_id")
        if isinstance(message_id, str) and event.message.content:
            streamed.setdefault(message_id, (event, []))[1].append(event.message.content)
    else:
        streamed.pop(event.id, None)
        streamed.pop(str(event.extensions.get("message_id") or ""), None)


def account(handle: RunHandle, event: Event) -> None:
    handle.record = accounted(handle.record, event)


def notify(handle: RunHandle, item: Event | None) -> None:
    for listener in list(handle.listeners):
        try:
            listener(item)
        except Exception:
            logger.exception("run %s: listener %r failed", handle.run_id, listener)


def accounted(record: RunRecord, event: Event) -> RunRecord:
    """`record` after `event` was emitted: its counts, answer, output and token usage."""
    changes: dict[str, Any] = {"last_event_at": utcnow()}
    if event.seq is not None:
        # Issue 21: only what the ledger holds (a stored event has its seq); streamed
        # deltas and events whose write failed are not counted.
        changes["event_count"] = record.event_count + 1
    if event.message is not None and event.message.role == "assistant" and not event.partial and not event.is_error:
        if not event.extensions.get(NO_MODEL_CALL):
            changes["model_calls"] = record.model_calls + 1
        changes["tool_calls"] = record.tool_calls + len(event.message.tool_calls)
        if event.message.content and not event.message.tool_calls:
            changes["answer"] = event.message.content
    if OUTPUT_EXTENSION in event.extensions and not event.partial and not event.is_error:
        # Issue 20: the validated value; the answer is its JSON text (a model's markdown
        # fence around it is gone), so that every surface answers something that parses.
        changes["output"] = event.extensions[OUTPUT_EXTENSION]
        changes["answer"] = json.dumps(changes["output"], ensure_ascii=False)
    if event.usage is not None:
        changes["prompt_tokens"] = record.prompt_tokens + event.usage.prompt_tokens
        changes["completion_tokens"] = record.completion_tokens + event.usage.completion_tokens
    return record.replace(**changes)
