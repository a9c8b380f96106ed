"""State graphs: build, compile and run them as agents (SPEC 10, DESIGN 6 "graph")."""

from runs.core.agents.graph.agent import (
    RESUME_OPTION,
    GraphAgent,
    RunNotFoundError,
    pending_interrupt,
    resumable_checkpoint,
    resume_graph_run,
)
from runs.core.agents.graph.builder import END, START, CompiledGraph, StateGraph
from runs.core.agents.graph.checkpoint import Checkpoint, CheckpointStore, InMemoryCheckpointStore, PendingInterrupt
from runs.core.agents.graph.errors import GraphCompileError, GraphInterrupt, GraphRunError, NotWaitingError
from runs.core.agents.graph.events import GraphEventInfo, graph_info
from runs.core.agents.graph.nodes import NodeContext
from runs.core.agents.graph.state import StateField, StateSchema, append, merge, overwrite

__all__ = [
    "END",
    "RESUME_OPTION",
    "START",
    "Checkpoint",
    "CheckpointStore",
    "CompiledGraph",
    "GraphAgent",
    "GraphCompileError",
    "GraphEventInfo",
    "GraphInterrupt",
    "GraphRunError",
    "InMemoryCheckpointStore",
    "NodeContext",
    "NotWaitingError",
    "PendingInterrupt",
    "RunNotFoundError",
    "StateField",
    "StateGraph",
    "StateSchema",
    "append",
    "graph_info",
    "merge",
    "overwrite",
    "pending_interrupt",
    "resumable_checkpoint",
    "resume_graph_run",
]
