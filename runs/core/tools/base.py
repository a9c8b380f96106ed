"""Tools: what an agent can do besides talking."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from runs.core.llm.base import ToolSpec
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

    @property
    def state(self) -> Mapping[str, Any]:
        merged = dict(self.session.state)
        merged.update(self.state_delta)
        return merged

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str

    def spec(self) -> ToolSpec:
        """Name, description and JSON schema, as shown to the model."""
        ...

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        """Run the tool. The result is serialised to JSON (strings are passed as they are).

        Raises `ToolArgumentError` for arguments that do not fit; any other exception is
        reported to the model as the tool's error.
        """
        ...
