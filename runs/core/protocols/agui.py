"""AG-UI: our events as Agent-User Interaction protocol events (SPEC 12.1).

`AguiTranslator` holds the state of one consumer (an SSE response, one websocket) and
turns each `Event` of a session into `ag_ui.core` events:

| our event | AG-UI |
| --- | --- |
| first event of a run | RUN_STARTED (threadId = session id, runId = run id), once |
| `chat.completion.chunk` delta | STEP_STARTED `model` and TEXT_MESSAGE_START (messageId = the `message_id` extension) on the first delta, then TEXT_MESSAGE_CONTENT |
| `chat.completion` (complete) | closes its text stream with TEXT_MESSAGE_END (sending the text the deltas did not carry), or START+CONTENT+END when nothing was streamed (replay from the ledger); tool calls: close text streams, TOOL_CALL_START/ARGS/END per call (parentMessageId = the message); STEP_FINISHED `model` |
| `tool.response` | STEP_STARTED <tool name>, TOOL_CALL_RESULT (messageId = event id), STATE_DELTA, STEP_FINISHED <tool name> |
| state delta | STATE_DELTA: JSON Patch `add` for a new key, `replace` for a known one |
| `extensions["artifact"]` (or each of `extensions["artifacts"]`) | CUSTOM `agentsite.artifact` |
| `tool.progress` (live only, never in the ledger) | CUSTOM `agentsite.tool.progress` ({toolCallId, toolName, done, total, note}), only between its call's TOOL_CALL_END and its TOOL_CALL_RESULT |
| `error` | close open streams and steps, RUN_ERROR (message, code = error type) |
| `graph.node.start` / `graph.node.complete` | STEP_STARTED / STEP_FINISHED named after the node, `metadata.graph` = {graph, node, kind, step} |
| `graph.state.update` | STATE_DELTA of the graph state's changed fields (JSON Patch `add`/`replace`, as above) |
| `graph.interrupt` | its question as an assistant text message, STEP_FINISHED of the paused node, CUSTOM `agentsite.graph.interrupt` (runId, interruptId, node, payload, checkpointId) |
| `agent.transfer` | its line ("Transferring control to agent: X") as an assistant text message, then CUSTOM `agentsite.agent.transfer` ({from, to, branch, message?}: the branches of the agent handing over and of the target) |
| `runner.completion` | close open streams and steps; RUN_FINISHED (`result`: the run's validated structured answer, when it has an output schema; cancelled: outcome `cancelled`; paused by a graph interrupt: outcome `interrupt` listing it; paused for frontend tools: plain); failed or interrupted: RUN_ERROR unless one was sent |
| a refused structured answer (`output_invalid`) and the agent's feedback on it (`output_feedback`) | nothing: the answer the client sees is the valid one (issue 20) |
| user message (only with `include_user_messages`) | TEXT_MESSAGE_START/CONTENT/END, role `user`, messageId = event id |

Every id goes out once per translator: an event fed twice (a retry, replay overlapping
live), a delta that arrives after its complete message, a tool call or result seen again in
another segment, all translate to nothing new. Nothing follows a run's RUN_FINISHED or
RUN_ERROR. Events derived from a ledger event carry `metadata.seq`, the event's seq, so a
client knows where to resume. Plain Python on purpose: no Django in here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    FunctionCall,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import Interrupt as AguiInterrupt

from runs.core.agents.graph.events import (
    OBJECT_INTERRUPT,
    OBJECT_NODE_COMPLETE,
    OBJECT_NODE_START,
    OBJECT_STATE_UPDATE,
    GraphEventInfo,
    graph_info,
)
from runs.core.agents.graph.executor import interrupt_text
from runs.core.agents.llm import OUTPUT_FEEDBACK_EXTENSION
from runs.core.output import OUTPUT_EXTENSION, OUTPUT_INVALID_EXTENSION
from runs.core.tools.progress import OBJECT_TOOL_PROGRESS, ToolProgress
from runs.core.tools.transfer import OBJECT_TRANSFER, TRANSFER_EXTENSION
from sessions_app.core.events import Event, Message
from sessions_app.core.events import ToolCall as LedgerToolCall

MODEL_STEP = "model"
"""The step name of a model call; a tool result's step is named after its tool."""
ARTIFACT_EVENT = "agentsite.artifact"
"""CUSTOM event name for an event that carries `extensions["artifact"]`."""
GRAPH_INTERRUPT_EVENT = "agentsite.graph.interrupt"
"""CUSTOM event name of a graph run pausing for a human (answer: `POST /api/runs/<id>/resume/`)."""
TRANSFER_EVENT = "agentsite.agent.transfer"
"""CUSTOM event name of an agent handing the turn to a sub-agent (SPEC 11.2 `transfer_to_agent`)."""
TOOL_PROGRESS_EVENT = "agentsite.tool.progress"
"""CUSTOM event name of a running tool's progress report (issue 21). CUSTOM rather than the
draft ACTIVITY_SNAPSHOT: an activity is a message in the thread, which a replay from the
ledger could not rebuild, since progress is never persisted."""


def json_pointer_token(key: str) -> str:
    """RFC 6901: `~` becomes `~0` and `/` becomes `~1` (in that order)."""
    return key.replace("~", "~0").replace("/", "~1")


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@dataclass(kw_only=True)
class _Run:
    run_id: str
    started: bool = False
    ended: bool = False
    open_text: list[str] = field(default_factory=list)
    model_step: str | None = None  # the message id whose model step is open
    node_steps: dict[str, dict[str, Any]] = field(default_factory=dict)  # graph nodes started, not finished -> metadata
    interrupts: list[AguiInterrupt] = field(default_factory=list)  # what a paused graph waits for


class AguiTranslator:
    """Translates the events of one session (one or more runs) for one consumer."""

    def __init__(self, *, thread_id: str, include_user_messages: bool = False) -> None:
        self.thread_id = thread_id
        self.include_user_messages = include_user_messages
        self._runs: dict[str, _Run] = {}
        self._seen_events: set[str] = set()
        self._streamed: dict[str, str] = {}  # message id -> text sent so far, while open
        self._ended_text: set[str] = set()
        self._done_steps: set[str] = set()  # message ids whose model step finished
        self._tool_calls: dict[str, str] = {}  # tool call id -> tool name
        self._results: set[str] = set()  # tool call ids whose result went out
        self._state_keys: set[str] = set()

    # -- public API ---------------------------------------------------------------------

    def run_started(self, run_id: str, *, timestamp: int | None = None) -> list[BaseEvent]:
        """RUN_STARTED for `run_id`, unless this translator already started it."""
        run = self._run(run_id)
        if run.started or run.ended:
            return []
        run.started = True
        stamp = timestamp if timestamp is not None else _millis(datetime.now(UTC))
        return [RunStartedEvent(thread_id=self.thread_id, run_id=run_id, timestamp=stamp)]

    def resume_run(self, run_id: str) -> None:
        """Treat `run_id` as started without sending RUN_STARTED (the client has seen it)."""
        self._run(run_id).started = True

    def is_finished(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        return run is not None and run.ended

    def translate(self, event: Event, *, run_id: str | None = None) -> list[BaseEvent]:
        """The AG-UI events for one of our events (possibly none).

        `run_id` names the run the event belongs to; without it the run is taken from the
        event (`extensions["run_id"]`, else its request id).
        """
        if event.id in self._seen_events:
            return []
        self._seen_events.add(event.id)
        rid = run_id or str(event.extensions.get("run_id") or event.request_id or event.invocation_id or event.id)
        run = self._run(rid)
        if run.ended:
            return []
        stamp = _millis(event.created_at)
        out: list[BaseEvent] = list(self.run_started(rid, timestamp=stamp))
        terminal: list[BaseEvent] = []
        state_done = False
        message = event.message
        info = graph_info(event)
        if info is not None and event.object != OBJECT_INTERRUPT:
            out.extend(self._graph_progress(run, event.object, info))
            state_done = True
        elif event.is_runner_completion:
            terminal = self._completion(run, event)
        elif event.is_error:
            error = event.error
            terminal = [
                RunErrorEvent(
                    message=error.message if error is not None else (event.text or "the run failed"),
                    code=error.type if error is not None else "error",
                )
            ]
        elif event.object == OBJECT_TOOL_PROGRESS:
            out.extend(self._progress(event))
        elif message is None:
            pass
        elif refused_output(event):
            pass  # issue 20: not the answer; the retry's valid one follows (or the run fails)
        elif event.partial:
            if message.role == "assistant":
                out.extend(self._delta(run, event))
        elif message.role == "user":
            if self.include_user_messages and message.content:
                out.extend(
                    [
                        TextMessageStartEvent(message_id=event.id, role="user"),
                        TextMessageContentEvent(message_id=event.id, delta=message.content),
                        TextMessageEndEvent(message_id=event.id),
                    ]
                )
        elif message.role == "tool" and message.tool_call_id:
            out.extend(self._tool_result(run, event))
            state_done = True
        elif message.role == "assistant":
            out.extend(self._assistant(run, event))
        if info is not None and event.object == OBJECT_INTERRUPT:
            out.extend(self._graph_interrupt(run, event, info))
        if event.object == OBJECT_TRANSFER and isinstance(
            transfer := event.extensions.get(TRANSFER_EXTENSION), Mapping
        ):
            out.append(CustomEvent(name=TRANSFER_EVENT, value=dict(transfer)))
        if event.state_delta and not state_done:
            out.extend(self._state_delta(event.state_delta))
        # One CUSTOM event per saved file: `artifacts` when a tool saved several (a workspace
        # export), else the single `artifact`.
        saved = event.extensions.get("artifacts") or [event.extensions.get("artifact")]
        out.extend(CustomEvent(name=ARTIFACT_EVENT, value=item) for item in saved if item is not None)
        if terminal:
            out.extend(self._close(run))
            out.extend(terminal)
            run.ended = True
        return self._stamped(out, stamp=stamp, seq=event.seq)

    def tool_result(self, *, run_id: str, message_id: str, tool_call_id: str, content: str) -> list[BaseEvent]:
        """TOOL_CALL_RESULT for a result the client sent in (client-side tools), once."""
        run = self._run(run_id)
        if run.ended or tool_call_id in self._results:
            return []
        self._results.add(tool_call_id)
        out = list(self.run_started(run_id))
        out.append(ToolCallResultEvent(message_id=message_id, tool_call_id=tool_call_id, content=content, role="tool"))
        return out

    def finish(self, run_id: str, *, error: tuple[str, str] | None = None) -> list[BaseEvent]:
        """End a run whose completion event will not come (a stream cut short): close what is
        open, then RUN_FINISHED, or RUN_ERROR with `error` = (code, message)."""
        run = self._run(run_id)
        if run.ended:
            return []
        out = list(self.run_started(run_id))
        out.extend(self._close(run))
        if error is None:
            out.append(RunFinishedEvent(thread_id=self.thread_id, run_id=run_id))
        else:
            out.append(RunErrorEvent(code=error[0], message=error[1]))
        run.ended = True
        return out

    def state_snapshot(self, state: Mapping[str, Any]) -> StateSnapshotEvent:
        """STATE_SNAPSHOT of the session state; later deltas are relative to it."""
        self._state_keys = set(state)
        return StateSnapshotEvent(snapshot=dict(state))

    # -- pieces -----------------------------------------------------------------------------

    def _run(self, run_id: str) -> _Run:
        run = self._runs.get(run_id)
        if run is None:
            run = self._runs[run_id] = _Run(run_id=run_id)
        return run

    @staticmethod
    def _stamped(events: list[BaseEvent], *, stamp: int, seq: int | None) -> list[BaseEvent]:
        for item in events:
            if item.timestamp is None:
                item.timestamp = stamp
            if seq is not None:
                item.metadata = {**(item.metadata or {}), "seq": seq}
        return events

    def _open_step(self, run: _Run, message_id: str) -> list[BaseEvent]:
        if message_id in self._done_steps or run.model_step == message_id:
            return []
        out = self._close_step(run)
        run.model_step = message_id
        out.append(StepStartedEvent(step_name=MODEL_STEP))
        return out

    def _close_step(self, run: _Run) -> list[BaseEvent]:
        if run.model_step is None:
            return []
        self._done_steps.add(run.model_step)
        run.model_step = None
        return [StepFinishedEvent(step_name=MODEL_STEP)]

    def _close_text(self, run: _Run) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        for message_id in run.open_text:
            self._streamed.pop(message_id, None)
            self._ended_text.add(message_id)
            out.append(TextMessageEndEvent(message_id=message_id))
        run.open_text.clear()
        return out

    def _close(self, run: _Run) -> list[BaseEvent]:
        return self._close_text(run) + self._close_step(run) + self._close_nodes(run)

    def _close_nodes(self, run: _Run, only: str | None = None, status: str = "stopped") -> list[BaseEvent]:
        """STEP_FINISHED for node steps that will not finish on their own: a node that paused
        (`status` "paused") or was cut short by the run's end ("stopped")."""
        closing = [n for n in run.node_steps if only is None or n == only]
        out: list[BaseEvent] = []
        for node in closing:
            meta = run.node_steps.pop(node)
            out.append(StepFinishedEvent(step_name=node, metadata={"graph": {**meta["graph"], "status": status}}))
        return out

    def _graph_progress(self, run: _Run, object_: str, info: GraphEventInfo) -> list[BaseEvent]:
        meta = {"graph": {"graph": info.graph, "node": info.node, "kind": info.kind, "step": info.step}}
        if object_ == OBJECT_NODE_START and info.node and info.node not in run.node_steps:
            run.node_steps[info.node] = meta
            return [StepStartedEvent(step_name=info.node, metadata=dict(meta))]
        if object_ == OBJECT_NODE_COMPLETE and info.node in run.node_steps:
            del run.node_steps[info.node]
            return [StepFinishedEvent(step_name=info.node, metadata=meta)]
        if object_ == OBJECT_STATE_UPDATE:
            return self._state_delta(info.state_delta)
        return []  # the execution marker: its outcome reaches the client with RUN_FINISHED

    def _graph_interrupt(self, run: _Run, event: Event, info: GraphEventInfo) -> list[BaseEvent]:
        pending = dict(info.interrupt or {})
        interrupt_id = str(pending.get("id") or event.id)
        payload = pending.get("payload")
        reason = str(payload.get("kind") or "input") if isinstance(payload, Mapping) else "input"
        value = {
            "runId": run.run_id,
            "interruptId": interrupt_id,
            "graph": info.graph,
            "node": info.node,
            "payload": payload,
            "checkpointId": info.checkpoint_id,
            "message": interrupt_text(payload),
        }
        run.interrupts.append(
            AguiInterrupt(
                id=interrupt_id,
                reason=reason,
                message=interrupt_text(payload),
                metadata={
                    "graph": info.graph,
                    "node": info.node,
                    "checkpointId": info.checkpoint_id,
                    "payload": payload,
                },
            )
        )
        out = self._close_nodes(run, only=info.node, status="paused")
        out.append(CustomEvent(name=GRAPH_INTERRUPT_EVENT, value=value))
        return out

    def _open_text(self, run: _Run, message_id: str) -> list[BaseEvent]:
        self._streamed[message_id] = ""
        run.open_text.append(message_id)
        return [TextMessageStartEvent(message_id=message_id, role="assistant")]

    def _end_text(self, run: _Run, message_id: str) -> list[BaseEvent]:
        self._streamed.pop(message_id, None)
        self._ended_text.add(message_id)
        if message_id in run.open_text:
            run.open_text.remove(message_id)
        return [TextMessageEndEvent(message_id=message_id)]

    @staticmethod
    def _message_id(event: Event) -> str:
        return str(event.extensions.get("message_id") or event.id)

    def _delta(self, run: _Run, event: Event) -> list[BaseEvent]:
        message_id = str(event.extensions.get("message_id") or event.invocation_id or event.id)
        delta = event.text
        if not delta or message_id in self._ended_text:
            return []
        out: list[BaseEvent] = []
        if message_id not in self._streamed:
            out.extend(self._open_step(run, message_id))
            out.extend(self._open_text(run, message_id))
        self._streamed[message_id] += delta
        out.append(TextMessageContentEvent(message_id=message_id, delta=delta))
        return out

    def _assistant(self, run: _Run, event: Event) -> list[BaseEvent]:
        assert event.message is not None
        message = event.message
        message_id = self._message_id(event)
        out: list[BaseEvent] = []
        if message_id not in self._ended_text and (message.content or message_id in self._streamed):
            if message_id not in self._streamed:  # nothing was streamed: the whole message now
                out.extend(self._open_step(run, message_id))
                out.extend(self._open_text(run, message_id))
            streamed = self._streamed[message_id]
            if len(message.content) > len(streamed) and message.content.startswith(streamed):
                out.append(TextMessageContentEvent(message_id=message_id, delta=message.content[len(streamed) :]))
            out.extend(self._end_text(run, message_id))
        calls = [call for call in message.tool_calls if call.id not in self._tool_calls]
        if calls:
            out.extend(self._close_text(run))
            out.extend(self._open_step(run, message_id))
            for call in calls:
                self._tool_calls[call.id] = call.name
                out.append(
                    ToolCallStartEvent(tool_call_id=call.id, tool_call_name=call.name, parent_message_id=message_id)
                )
                if call.arguments:
                    out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=call.arguments))
                out.append(ToolCallEndEvent(tool_call_id=call.id))
        if run.model_step == message_id:
            out.extend(self._close_step(run))
        return out

    def _tool_result(self, run: _Run, event: Event) -> list[BaseEvent]:
        message = event.message
        assert message is not None and message.tool_call_id is not None
        call_id = message.tool_call_id
        if call_id in self._results:
            return []
        self._results.add(call_id)
        name = message.tool_name or self._tool_calls.get(call_id) or "tool"
        # Text and the model step end here; graph nodes end with their own complete event
        # (a tool node's result comes before it: closing nodes here said "stopped", issue 21).
        out = self._close_text(run) + self._close_step(run)
        out.append(StepStartedEvent(step_name=name))
        out.append(ToolCallResultEvent(message_id=event.id, tool_call_id=call_id, content=message.content, role="tool"))
        if event.state_delta:
            out.extend(self._state_delta(event.state_delta))
        out.append(StepFinishedEvent(step_name=name))
        return out

    def _progress(self, event: Event) -> list[BaseEvent]:
        """A progress report, while its call is shown and its result is not: one that
        overtook the call (a tool reporting in its first milliseconds) or trails its result
        says nothing a client could place."""
        progress = ToolProgress.from_event(event)
        if progress is None or progress.tool_call_id not in self._tool_calls or progress.tool_call_id in self._results:
            return []
        return [
            CustomEvent(
                name=TOOL_PROGRESS_EVENT,
                value={
                    "toolCallId": progress.tool_call_id,
                    "toolName": progress.tool_name or self._tool_calls[progress.tool_call_id],
                    "done": progress.done,
                    "total": progress.total,
                    "note": progress.note,
                },
            )
        ]

    def _state_delta(self, delta: Mapping[str, Any]) -> list[BaseEvent]:
        # Plain JSON Patch dicts: the event validates them into ag-ui's operation models,
        # which the package does not export.
        operations: list[Any] = []
        for key, value in delta.items():
            op = "replace" if key in self._state_keys else "add"
            operations.append({"op": op, "path": "/" + json_pointer_token(str(key)), "value": value})
            self._state_keys.add(key)
        return [StateDeltaEvent(delta=operations)] if operations else []

    def _completion(self, run: _Run, event: Event) -> list[BaseEvent]:
        status = str(event.extensions.get("status") or "completed")
        if status == "completed" and run.interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=list(run.interrupts))
            return [RunFinishedEvent(thread_id=self.thread_id, run_id=run.run_id, outcome=outcome)]
        if status in ("completed", "requires_action"):
            # requires_action: the run paused for the client's frontend tools (issue 20);
            # the client's next input with their results continues it.
            return [
                RunFinishedEvent(
                    thread_id=self.thread_id, run_id=run.run_id, result=event.extensions.get(OUTPUT_EXTENSION)
                )
            ]
        if status == "cancelled":
            # SPEC 12.1: an explicit cancel ends the run with RUN_FINISHED, not RUN_ERROR.
            return [
                RunFinishedEvent(thread_id=self.thread_id, run_id=run.run_id, outcome=RunFinishedCancelledOutcome())
            ]
        error = event.error
        return [
            RunErrorEvent(
                message=error.message if error is not None else f"the run ended as {status!r}",
                code=error.type if error is not None else status,
            )
        ]


def messages_snapshot(events: Iterable[Event]) -> MessagesSnapshotEvent:
    """MESSAGES_SNAPSHOT of a ledger (complete events, oldest first), for history reload.

    User messages and tool results keep their event ids; an assistant message takes its
    message id, the id its live TEXT_MESSAGE_* events used, so a client can match both.
    """
    messages: list[Any] = []
    assistants: dict[str, AssistantMessage] = {}
    calls_seen: set[str] = set()
    results_seen: set[str] = set()
    for event in events:
        message = event.message
        if event.partial or event.is_runner_completion or message is None or refused_output(event):
            continue
        if message.role == "user":
            messages.append(UserMessage(id=event.id, content=message.content))
        elif message.role == "tool" and message.tool_call_id:
            if message.tool_call_id in results_seen:
                continue
            results_seen.add(message.tool_call_id)
            messages.append(ToolMessage(id=event.id, content=message.content, tool_call_id=message.tool_call_id))
        elif message.role == "assistant":
            message_id = str(event.extensions.get("message_id") or event.id)
            calls = [
                ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
                for c in message.tool_calls
                if c.id not in calls_seen
            ]
            calls_seen.update(c.id for c in calls)
            known = assistants.get(message_id)
            if known is not None:
                if calls:
                    known.tool_calls = [*(known.tool_calls or []), *calls]
                if message.content and not known.content:
                    known.content = message.content
                continue
            built = AssistantMessage(id=message_id, content=message.content or None, tool_calls=calls or None)
            assistants[message_id] = built
            messages.append(built)
    return MessagesSnapshotEvent(messages=messages)


def refused_output(event: Event) -> bool:
    """Whether `event` is a structured answer the output schema refused, or the agent's
    feedback asking for the corrected one (issue 20): in the ledger, never shown as the
    run's answer."""
    return OUTPUT_INVALID_EXTENSION in event.extensions or OUTPUT_FEEDBACK_EXTENSION in event.extensions


def text_of(content: str | Sequence[Any]) -> str:
    """The text of AG-UI message content: a string, or the text parts of a part list."""
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") or "" for part in content if getattr(part, "type", None) == "text")


def history_messages(messages: Sequence[Any]) -> tuple[Message, ...]:
    """AG-UI messages a client sent before its input, as seeded history (SPEC 1.4): user,
    assistant (with its tool calls) and tool messages; system and developer messages are
    the client's instructions, not history, and are left out, as are empty ones."""
    out: list[Message] = []
    for message in messages:
        role = getattr(message, "role", None)
        content = text_of(getattr(message, "content", None) or "")
        if role == "user" and content:
            out.append(Message(role="user", content=content))
        elif role == "assistant":
            calls = tuple(
                LedgerToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments or "{}")
                for call in getattr(message, "tool_calls", None) or ()
            )
            if content or calls:
                out.append(Message(role="assistant", content=content, tool_calls=calls))
        elif role == "tool":
            out.append(Message(role="tool", content=content, tool_call_id=message.tool_call_id))
    return tuple(out)
