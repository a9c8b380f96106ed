"""The events a graph run emits besides its nodes' own (SPEC 10.3 "Graph events").

Every graph event carries a `GraphEventInfo` under `extensions["graph"]`. Progress events
(node start and finish, state updates, the end of the execution) have no content, so the
runner emits them live without writing them to the ledger; the interrupt event carries
the question as an assistant message, so it is in the ledger and a reload (or another
process) still knows the run waits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sessions_app.core.events import Event

OBJECT_NODE_START = "graph.node.start"
OBJECT_NODE_COMPLETE = "graph.node.complete"
OBJECT_STATE_UPDATE = "graph.state.update"
OBJECT_INTERRUPT = "graph.interrupt"
OBJECT_EXECUTION = "graph.execution"
GRAPH_OBJECTS = frozenset(
    {OBJECT_NODE_START, OBJECT_NODE_COMPLETE, OBJECT_STATE_UPDATE, OBJECT_INTERRUPT, OBJECT_EXECUTION}
)

GRAPH_EXTENSION = "graph"
NODE_EXTENSION = "graph_node"
"""Set on the events a node emits itself (model text, tool calls): which node it was."""

NodeKind = Literal["function", "model", "tool", "agent"]
ExecutionStatus = Literal["completed", "interrupted"]


@dataclass(frozen=True, kw_only=True)
class GraphEventInfo:
    """What a graph event says, as `extensions["graph"]` holds it."""

    graph: str
    step: int
    node: str | None = None
    kind: NodeKind | None = None
    state_delta: Mapping[str, Any] = field(default_factory=dict)
    interrupt: Mapping[str, Any] | None = None
    status: ExecutionStatus | None = None
    checkpoint_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"graph": self.graph, "step": self.step}
        for key in ("node", "kind", "interrupt", "status", "checkpoint_id"):
            value = getattr(self, key)
            if value is not None:
                data[key] = dict(value) if isinstance(value, Mapping) else value
        if self.state_delta:
            data["state_delta"] = dict(self.state_delta)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphEventInfo:
        return cls(
            graph=str(data.get("graph") or ""),
            step=int(data.get("step") or 0),
            node=data.get("node"),
            kind=data.get("kind"),
            state_delta=dict(data.get("state_delta") or {}),
            interrupt=data.get("interrupt"),
            status=data.get("status"),
            checkpoint_id=data.get("checkpoint_id"),
        )


def graph_info(event: Event) -> GraphEventInfo | None:
    """The graph payload of a graph event, else None."""
    if event.object not in GRAPH_OBJECTS:
        return None
    data = event.extensions.get(GRAPH_EXTENSION)
    return GraphEventInfo.from_dict(data) if isinstance(data, Mapping) else None
