"""The Agent contract."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol, runtime_checkable

from runs.core.invocation import Invocation
from sessions_app.core.events import Event


@runtime_checkable
class Agent(Protocol):
    name: str
    description: str

    @property
    def kind(self) -> str:
        """What sort of agent this is: `llm`, `graph`, `chain`, `parallel`, `cycle`."""
        ...

    @property
    def model_name(self) -> str | None:
        """The model the agent talks to, if any (shown in `/api/agents/`)."""
        ...

    def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        """Yield the run's events in order. Complete events are persisted by the runner
        before the generator resumes, so later steps see earlier ones in the session."""
        ...
