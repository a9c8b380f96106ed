"""Graph errors, split by audience like the rest of `runs.core.errors`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runs.core.errors import ControlFlowSignal, RunFailure, UsageError


class GraphCompileError(UsageError):
    """The graph cannot run; `problems` lists every reason found, each naming its node."""

    def __init__(self, name: str, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        listing = "\n".join(f"- {p}" for p in self.problems)
        super().__init__(f"graph {name!r} does not compile:\n{listing}")


class GraphRunError(RunFailure):
    """A node failed, routed somewhere it did not declare, or the graph ran too long."""

    def __init__(self, message: str, *, code: str = "graph_error", node: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.node = node


class NotWaitingError(UsageError):
    """A resume for a run that waits for nothing (never paused, or already resumed)."""


class GraphInterrupt(ControlFlowSignal):
    """Raised by `NodeContext.interrupt` to pause the graph for a human; the executor
    catches it, checkpoints the step and ends the run waiting."""

    def __init__(self, payload: Any, *, node: str, index: int) -> None:
        super().__init__(f"node {node!r} waits for input")
        self.payload = payload
        self.node = node
        self.index = index
