"""The Invocation: everything one agent run needs, built by the Runner."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sessions_app.core.events import Event, Message
from sessions_app.core.session import Session, SessionService

if TYPE_CHECKING:
    from runs.core.context.request import BuiltRequest
    from runs.core.llm.base import ToolChoice, ToolSpec
    from runs.core.output import OutputSpec

SPAWN_SERVICE = "spawn"
"""`Invocation.services[SPAWN_SERVICE]`: `spawn(coroutine, name=...)` starts a task the Runner
owns, for work that may outlive the run (a background summary); `Runner.close` cancels it."""


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Per-run knobs a caller may set."""

    max_steps: int | None = None
    instruction: str | None = None
    # Issue 25: the caller's instructions for this run (the Responses API's `instructions`),
    # added after each LLM agent's own instruction, never in place of it.
    added_instruction: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # Issue 20: the final answer must be JSON of this spec (overrides the agent's own).
    output: OutputSpec | None = None
    # Issue 20: tools the caller declares and runs itself, offered beside the agent's own
    # (runs.core.tools.client); a call of one pauses the run for the caller's result.
    client_tools: tuple[ToolSpec, ...] = ()
    # Issue 20: the caller's tool choice, for the run's first model step.
    tool_choice: ToolChoice | None = None
    # SPEC 1.10: keep a cancelled streaming answer as a marked message; None: the runner's default.
    persist_interrupted_assistant: bool | None = None


@dataclass
class AgentRunState:
    """What an agent keeps between the model calls of one run."""

    last_request: BuiltRequest | None = None
    """The last request it built: the parent an async summary forks from (SPEC 1.8, 3.6)."""
    precall: dict[str, Any] | None = None
    """What the pre-call compaction of that request did, for the answer's context stats."""


@dataclass(kw_only=True)
class Invocation:
    """One agent's view of a run: session, message, services and identity.

    `session.events` is the window of the ledger the runner loaded, kept up to date as the
    runner persists each event, so an agent building its next request sees its own steps.
    """

    invocation_id: str
    run_id: str
    request_id: str
    app: str
    agent_name: str
    branch: str
    filter_key: str
    session: Session
    session_service: SessionService
    message: Message
    options: RunOptions
    cancel_event: asyncio.Event
    services: Mapping[str, Any] = field(default_factory=dict)
    # By agent name, for every agent of the run: child invocations share this map
    # (`dataclasses.replace` passes it on), so the Runner reads the root agent's state from
    # the root invocation, and an agent object holds no per-run state of its own.
    agent_state: dict[str, AgentRunState] = field(default_factory=dict)

    def state_of(self, agent_name: str) -> AgentRunState:
        """`agent_name`'s state in this run, made on first use."""
        return self.agent_state.setdefault(agent_name, AgentRunState())

    def stamp(self, event: Event) -> Event:
        """Inject the invocation's identity into an event (SPEC 11.1 `InjectIntoEvent`).

        An event that carries it already (an agent stamps what it yields, and the runner
        stamps every event again) is returned as it is: events are immutable, and the copy
        would equal it (issue 23: a copy per streamed delta)."""
        branch = event.branch or self.branch
        filter_key = event.filter_key or self.filter_key
        if (
            event.invocation_id == self.invocation_id
            and event.request_id == self.request_id
            and event.branch == branch
            and event.filter_key == filter_key
        ):
            return event
        return event.replace(
            invocation_id=self.invocation_id, request_id=self.request_id, branch=branch, filter_key=filter_key
        )
