"""What the runner observes of a run: the completion capture and the execution trace.

`CompletionCapture` (SPEC 1.6 step 6, 1.9 steps 1-2) follows the run's events to say how
it ended on the completion event: the accumulated state delta, the final answer's choices,
and whether a terminal error event was already written (then the completion does not
repeat the error).

`TraceRecorder` (SPEC 1.9.3, issue 21's run trace) builds an execution trace from the same
events: one span per agent branch, model call, tool call, graph node, pre-call summary and
compaction, each with its start, duration, status and parent. It costs no statement per
event: the trace is a JSON value written with the run's record when the run ends.
Timings are the events' own `created_at` (when the agent produced them), so a step the
runner holds for one ledger write is still timed where it happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from sessions_app.core.events import NO_MODEL_CALL, Event

# runs.core.agents.graph.events' objects (not imported: the graph package imports the runner).
OBJECT_NODE_START = "graph.node.start"
OBJECT_NODE_COMPLETE = "graph.node.complete"
OBJECT_INTERRUPT = "graph.interrupt"

TRACE_VERSION = 1
MAX_SPANS = 500
"""A looping run stops adding spans here (the trace says how many it left out)."""

FINAL_STATE_DELTA = "final_state_delta"
FINAL_CHOICES = "final_choices"
STOP_AGENT_ERROR = "stop_agent_error"

SpanKind = Literal["run", "agent", "model", "tool", "node", "summary", "compaction"]
SpanStatus = Literal["ok", "error", "cancelled", "running", "paused"]


@dataclass
class CompletionCapture:
    """SPEC 1.6.6: the run's accumulated state delta, its last answer and its last error."""

    state_delta: dict[str, Any] = field(default_factory=dict)
    answer: Event | None = None
    terminal_error: bool = False

    def observe(self, event: Event) -> None:
        if event.partial or event.is_runner_completion:
            return
        if event.state_delta:
            self.state_delta.update(event.state_delta)
        message = event.message
        if event.is_error:
            # IsTerminalError: an error that ends its response (SPEC 2.2).
            if event.object == "error" or event.done:
                self.terminal_error, self.answer = True, None  # the run's last word is the error
            return
        self.terminal_error = False  # the run went on after it (e.g. a retried step)
        if (
            message is not None
            and message.role == "assistant"
            and event.done
            and not message.tool_calls
            and message.content
        ):
            self.answer = event  # IsFinalResponse (SPEC 2.2)

    def extensions(self, error_type: str | None) -> dict[str, Any]:
        """The completion event's `final_state_delta` and `final_choices` (SPEC 1.9.2).

        Carried as extensions, not as the completion's own `state_delta`: the delta is in
        session state already, and applying it again would undo a client's concurrent
        state change (PATCH .../state/)."""
        out: dict[str, Any] = {}
        if self.state_delta and error_type != STOP_AGENT_ERROR:
            out[FINAL_STATE_DELTA] = dict(self.state_delta)
        if self.answer is not None and self.answer.message is not None:
            out[FINAL_CHOICES] = [
                {
                    "index": 0,
                    "message": self.answer.message.to_dict(),
                    "finish_reason": self.answer.finish_reason or "stop",
                    "event_id": self.answer.id,
                }
            ]
        return out


@dataclass
class Span:
    id: str
    kind: SpanKind
    name: str
    parent: str | None
    start: datetime
    end: datetime | None = None
    status: SpanStatus = "running"
    attrs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self, origin: datetime) -> dict[str, Any]:
        start_ms = _ms(self.start - origin)
        data: dict[str, Any] = {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "parent": self.parent,
            "start_ms": start_ms,
            "duration_ms": None if self.end is None else max(0.0, _ms(self.end - self.start)),
            "status": self.status,
        }
        if self.attrs:
            data["attrs"] = self.attrs
        return data


class TraceRecorder:
    """Builds a run's execution trace from the events the runner sees (no I/O)."""

    def __init__(self, *, run_id: str, agent: str, branch: str, started_at: datetime) -> None:
        self.run_id = run_id
        self.origin = started_at
        self.root = Span(id="run", kind="run", name=agent, parent=None, start=started_at)
        self.spans: list[Span] = [self.root]
        self.dropped = 0
        self._agents: dict[str, Span] = {}
        self._models: dict[str, Span] = {}  # by message id
        self._tools: dict[str, Span] = {}  # by tool call id
        self._nodes: dict[tuple[str, str], Span] = {}  # (graph, node)
        self._first_chunk: dict[str, datetime] = {}  # message id -> first streamed delta
        # Where each branch's last step ended: its next model call starts there.
        self._step_end: dict[str, datetime] = {}
        self._agent_span(branch or agent, started_at)

    def observe(self, event: Event) -> None:
        """Take one event of the run, in the order the agent produced them."""
        at = event.created_at
        branch = event.branch or self.root.name
        agent = self._agent_span(branch, at)
        agent.end = at
        if event.is_runner_completion:
            return
        message_id = event.extensions.get("message_id")
        if event.partial:
            if isinstance(message_id, str):
                self._first_chunk.setdefault(message_id, at)
            return
        info = event.extensions.get("graph")
        if event.object.startswith("graph.") and isinstance(info, Mapping) and info.get("node"):
            graph, node_name, step = str(info.get("graph") or ""), str(info["node"]), info.get("step")
            key = (graph, node_name)
            if event.object == OBJECT_NODE_START and key not in self._nodes:
                self._nodes[key] = self._add(
                    Span(
                        id=f"node:{graph}:{node_name}:{step}",
                        kind="node",
                        name=node_name,
                        parent=agent.id,
                        start=at,
                        attrs={"graph": graph, "step": step, "node_kind": info.get("kind")},
                    )
                )
            elif event.object == OBJECT_NODE_COMPLETE and key in self._nodes:
                node = self._nodes.pop(key)
                node.end, node.status = at, "ok"
            elif event.object == OBJECT_INTERRUPT and key in self._nodes:
                node = self._nodes.pop(key)
                node.end, node.status = at, "paused"
            return
        message = event.message
        if message is None:
            if event.is_error:
                agent.status = "error"
            return
        if message.role == "assistant" and event.object != "error" and not event.extensions.get(NO_MODEL_CALL):
            self._model_span(event, agent, branch)
        elif message.role == "tool" and message.tool_call_id:
            tool = self._tools.pop(message.tool_call_id, None)
            if tool is not None:
                tool.end = at
                failed = bool(event.error) or bool(event.extensions.get("tool_error"))
                tool.status = "error" if failed else "ok"
        if event.is_error:
            agent.status = "error"
            self._add(
                Span(
                    id=f"error:{event.id}",
                    kind="model",
                    name=event.error.type if event.error else "error",
                    parent=agent.id,
                    start=at,
                    end=at,
                    status="error",
                    attrs={"message": event.error.message if event.error else event.text},
                )
            )
        self._step_end[branch] = at

    def finish(self, *, status: str, ended_at: datetime) -> dict[str, Any]:
        """The trace as stored with the run: JSON-safe, spans in start order."""
        final: SpanStatus = "ok" if status == "completed" else "error" if status == "failed" else "cancelled"
        self.root.end, self.root.status = ended_at, final
        for span in self.spans:
            if span.end is None:
                # A span the run's end cut short: a tool or node that never finished.
                span.end, span.status = ended_at, "cancelled" if final != "error" else "error"
            elif span.kind == "agent" and span.status == "running":
                span.status = "ok" if final == "ok" else final
        ordered = sorted(self.spans, key=lambda s: (s.start, s.kind != "agent"))
        return {
            "version": TRACE_VERSION,
            "run_id": self.run_id,
            "status": status,
            "started_at": self.origin.isoformat(),
            "duration_ms": _ms(ended_at - self.origin),
            "spans": [span.to_dict(self.origin) for span in ordered],
            "dropped_spans": self.dropped,
        }

    # -- pieces -----------------------------------------------------------------------------

    def _add(self, span: Span) -> Span:
        if len(self.spans) >= MAX_SPANS:
            self.dropped += 1
            return span  # timed but not kept
        self.spans.append(span)
        return span

    def _agent_span(self, branch: str, at: datetime) -> Span:
        span = self._agents.get(branch)
        if span is None:
            parent_branch = branch.rsplit("/", 1)[0] if "/" in branch else None
            parent = self._agents.get(parent_branch) if parent_branch else None
            span = self._agents[branch] = self._add(
                Span(
                    id=f"agent:{branch}",
                    kind="agent",
                    name=branch.rsplit("/", 1)[-1],
                    parent=(parent or self.root).id,
                    start=at,
                    attrs={"branch": branch},
                )
            )
        return span

    def _model_span(self, event: Event, agent: Span, branch: str) -> None:
        assert event.message is not None
        at = event.created_at
        start = self._step_end.get(branch, agent.start)
        context = event.extensions.get("context")
        context = context if isinstance(context, Mapping) else {}
        precall = context.get("precall") if isinstance(context.get("precall"), Mapping) else None
        attrs: dict[str, Any] = {"model": event.model, "finish_reason": event.finish_reason}
        if event.usage is not None:
            attrs["prompt_tokens"] = event.usage.prompt_tokens
            attrs["completion_tokens"] = event.usage.completion_tokens
        if isinstance(context.get("sent_tokens"), int):
            attrs["sent_tokens"] = context["sent_tokens"]
        first = self._first_chunk.pop(event.id, None)
        if first is not None:
            attrs["first_token_ms"] = _ms(first - start)
        model = self._add(
            Span(
                id=f"model:{event.id}",
                kind="model",
                name=event.model or "model",
                parent=agent.id,
                start=start,
                end=at,
                status="ok",
                attrs=attrs,
            )
        )
        self._models[event.id] = model
        if precall is not None and (precall.get("stall_ms") or precall.get("summary_reason")):
            # The pre-call summary or compaction this request waited for (SPEC 4.8).
            stall = float(precall.get("stall_ms") or 0.0)
            kind: SpanKind = "summary" if precall.get("summary_reason") else "compaction"
            self._add(
                Span(
                    id=f"precall:{event.id}",
                    kind=kind,
                    name=str(precall.get("status") or kind),
                    parent=model.id,
                    start=start,
                    end=start + _delta_ms(stall),
                    status="ok",
                    attrs={
                        k: precall.get(k)
                        for k in ("status", "summary_reason", "tokens_before", "tokens_after", "wait_ms", "fallback")
                        if precall.get(k) is not None
                    },
                )
            )
        compaction = context.get("compaction")
        if isinstance(compaction, Mapping) and any(
            compaction.get(k) for k in ("pass0", "pass1", "pass2", "resume_tail", "fallback")
        ):
            self._add(
                Span(
                    id=f"compaction:{event.id}",
                    kind="compaction",
                    name="tool-result compaction",
                    parent=model.id,
                    start=start,
                    end=start,
                    status="ok",
                    attrs=dict(compaction),
                )
            )
        summary = context.get("summary")
        if isinstance(summary, Mapping):
            model.attrs["summary"] = {k: summary.get(k) for k in ("version", "last_seq", "tokens", "covered_events")}
        for call in event.message.tool_calls:
            self._tools[call.id] = self._add(
                Span(
                    id=f"tool:{call.id}",
                    kind="tool",
                    name=call.name,
                    parent=model.id,
                    start=at,
                    attrs={"call_id": call.id},
                )
            )


def _ms(delta: timedelta) -> float:
    return round(delta.total_seconds() * 1000.0, 3)


def _delta_ms(ms: float) -> timedelta:
    return timedelta(milliseconds=ms)
