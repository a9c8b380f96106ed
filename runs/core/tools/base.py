"""Tools: what an agent can do besides talking."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from runs.core.llm.base import ToolSpec
from runs.core.tools.progress import MAX_NOTE_CHARS, ToolProgress, progress_event, publish_progress
from sessions_app.core.session import Session


class ToolArgumentError(ValueError):
    """The model's arguments do not fit the tool's schema; the message goes back to it."""


@dataclass(kw_only=True)
class ToolContext:
    """What a tool may see and touch while it runs.

    `state_delta` collects state changes the tool wants recorded and `extensions` the
    namespaced metadata (e.g. `artifact`) it wants on its result; both travel inside the
    tool-result event (the ledger is the only write path).
    """

    session: Session
    invocation_id: str
    tool_call_id: str
    agent_name: str
    cancel_event: asyncio.Event
    services: Mapping[str, Any] = field(default_factory=dict)
    state_delta: dict[str, Any] = field(default_factory=dict)
    extensions: dict[str, Any] = field(default_factory=dict)
    tool_name: str = ""

    @property
    def state(self) -> Mapping[str, Any]:
        merged = dict(self.session.state)
        merged.update(self.state_delta)
        return merged

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def report_progress(self, done: float, total: float | None = None, note: str = "") -> bool:
        """Tell the run's live stream how far this call got (issue 21), e.g. `(3, 12,
        "3/12 hosts scanned")`; `total` None when unknown. Never persisted: only the live
        stream sees it (runs.core.tools.progress). Callable from a sync tool's thread;
        returns False when nothing listens (the tool runs outside a runner).

        Raises ValueError unless 0 <= done <= total and total > 0.
        """
        progress = ToolProgress(
            tool_call_id=self.tool_call_id,
            tool_name=self.tool_name,
            done=done,
            total=total,
            note=note[:MAX_NOTE_CHARS],
        )
        return publish_progress(progress_event(progress, author=self.agent_name, invocation_id=self.invocation_id))


@runtime_checkable
class Tool(Protocol):
    name: str

    @property
    def description(self) -> str:
        """What the tool does, as the model reads it (a plain attribute satisfies it too)."""
        ...

    def spec(self) -> ToolSpec:
        """Name, description and JSON schema, as shown to the model."""
        ...

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        """Run the tool. The result is serialised to JSON (strings are passed as they are).

        Raises `ToolArgumentError` for arguments that do not fit; any other exception is
        reported to the model as the tool's error.
        """
        ...
