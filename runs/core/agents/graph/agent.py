"""GraphAgent: a compiled graph as an Agent, with checkpoints, pauses and resumes.

A new run starts the graph on a state built from the conversation: `messages` (when the
schema has that field) gets the same projection an LLMAgent's request would show (summary
block, then the events after the summary boundary, with the current user message last:
SPEC 4.3), `user_input` the user's message.

A paused run ends normally, with the question in the ledger and a checkpoint that waits.
`resume_graph_run` answers it: it claims the checkpoint (one answer per pause), then starts
a *new run* on the same session whose user message is the answer; that run continues the
graph from the checkpoint, in whatever process serves it.

With `await_user_reply=True` the pause also records an await-user-reply route to the
graph (`runs.core.routing`), so the user's next message on the session answers it: that
run follows the route to this graph, which resumes its checkpoint with the message as the
value, as `resume_graph_run` would.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from runs.core.agents.graph.builder import CompiledGraph, StateGraph
from runs.core.agents.graph.checkpoint import Checkpoint, CheckpointStore, PendingInterrupt
from runs.core.agents.graph.errors import GraphRunError, NotWaitingError
from runs.core.agents.graph.events import OBJECT_INTERRUPT, graph_info
from runs.core.agents.graph.executor import Executor
from runs.core.context.governance import ContextGovernance
from runs.core.context.request import build_for_invocation
from runs.core.errors import UsageError
from runs.core.invocation import Invocation, RunOptions
from runs.core.llm.base import Model
from runs.core.routing import Route, is_route_target, route_delta
from runs.core.runner import EventListener, RunHandle, Runner
from sessions_app.core.events import OBJECT_ERROR, Event, EventError, new_id

logger = logging.getLogger(__name__)

RESUME_OPTION = "graph_resume"
"""`RunOptions.metadata` key of a resuming run: `{"checkpoint_id": str, "value": Any}`."""
DEFAULT_WINDOW = 8192
# How far back a routed reply looks for the question it answers when the loaded window
# does not hold it.
ROUTE_LOOKBACK_EVENTS = 100


class RunNotFoundError(UsageError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} not found")
        self.run_id = run_id


class GraphAgent:
    """Runs a compiled graph (SPEC 11.3 "GraphAgent runs a compiled graph")."""

    kind = "graph"

    def __init__(
        self,
        *,
        name: str,
        graph: CompiledGraph | StateGraph,
        description: str = "",
        checkpoints: CheckpointStore | None = None,
        messages_key: str = "messages",
        input_key: str = "user_input",
        governance: ContextGovernance | None = None,
        model: Model | None = None,
        await_user_reply: bool = False,
    ) -> None:
        self.name = name
        # A pause routes the session's next user message back here (runs.core.routing).
        self.await_user_reply = await_user_reply
        self.graph = graph.compile() if isinstance(graph, StateGraph) else graph
        self.description = description
        self.checkpoints = checkpoints
        self.messages_key = messages_key
        self.input_key = input_key
        self.governance = governance
        # Only for display (`/api/agents/`): the model its model nodes call, if any.
        self.model = model

    @property
    def model_name(self) -> str | None:
        return self.model.info().name if self.model is not None else None

    @property
    def context_window(self) -> int:
        if self.governance is not None and self.governance.context_window:
            return self.governance.context_window
        return self.model.info().context_window if self.model is not None else DEFAULT_WINDOW

    def initial_state(self, invocation: Invocation) -> dict[str, Any]:
        """The state a new run starts from: the schema's defaults, the projected history
        and the user's message (for the fields the schema declares)."""
        fields = self.graph.schema.fields
        values: dict[str, Any] = {}
        if self.messages_key in fields:
            built = build_for_invocation(
                invocation, instruction="", tools=(), governance=self.governance, window=self.context_window
            )
            values[self.messages_key] = [m.to_dict() for m in built.request.messages]
        if self.input_key in fields:
            values[self.input_key] = invocation.message.content
        return self.graph.schema.initial(values)

    async def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        executor = Executor(self.graph, invocation=invocation, store=self.checkpoints)
        try:
            resume = invocation.options.metadata.get(RESUME_OPTION)
            routed = is_route_target(invocation)
            if not isinstance(resume, Mapping) and routed is not None and routed.checkpoint_id:
                # The user's reply to this graph's question answers it.
                resume = await self._routed_resume(invocation, routed.checkpoint_id)
            if isinstance(resume, Mapping):
                checkpoint = await self._claimed_checkpoint(invocation, resume)
                events = executor.resume(checkpoint, value=resume.get("value"), has_value="value" in resume)
            else:
                events = executor.start(self.initial_state(invocation))
            async with contextlib.aclosing(events) as stream:
                async for event in stream:
                    yield self._routed(invocation, event)
        except GraphRunError as exc:
            yield invocation.stamp(
                Event(
                    author=self.name,
                    object=OBJECT_ERROR,
                    done=True,
                    error=EventError(type=exc.code, message=str(exc)),
                    extensions={"graph": {"graph": self.graph.name, "node": exc.node}} if exc.node else {},
                )
            )

    def _routed(self, invocation: Invocation, event: Event) -> Event:
        """`event`, recording a route back to this graph when it is the graph's own pause
        (not a nested graph's) and routing is on."""
        if not self.await_user_reply or event.object != OBJECT_INTERRUPT or event.branch != invocation.branch:
            return event
        info = graph_info(event)
        if info is None or not info.checkpoint_id:
            return event  # no checkpoint to resume: the reply could not answer it
        route = Route(
            path=invocation.branch,
            kind="graph_interrupt",
            run_id=invocation.run_id,
            question=event.text,
            checkpoint_id=info.checkpoint_id,
        )
        return event.replace(state_delta={**event.state_delta, **route_delta(route)})

    async def _routed_resume(self, invocation: Invocation, checkpoint_id: str) -> dict[str, Any] | None:
        """The resume a route asks for, or None (the graph starts afresh) when the route
        cannot be trusted or is spent: session state is the client's to write too, so the
        checkpoint must be one this graph's own question in this session's ledger names,
        and still waiting."""

        def asks(e: Event) -> bool:
            info = graph_info(e)
            return (
                e.object == OBJECT_INTERRUPT
                and e.branch == invocation.branch
                and info is not None
                and info.checkpoint_id == checkpoint_id
            )

        asked = any(asks(e) for e in invocation.session.events)
        if not asked:
            # Not in the loaded window (a summary boundary past it): the question is among
            # the newest events of the ledger, as the pause ended the turn before this one.
            session = invocation.session
            tail = await invocation.session_service.list_events(
                session.key,
                after_seq=max(0, session.last_seq - ROUTE_LOOKBACK_EVENTS),
                limit=ROUTE_LOOKBACK_EVENTS,
            )
            asked = any(asks(e) for e in tail)
        checkpoint = await self.checkpoints.get(checkpoint_id) if asked and self.checkpoints is not None else None
        if checkpoint is None or not checkpoint.waiting or checkpoint.graph != self.graph.name:
            logger.warning(
                "graph %r: route to checkpoint %r is not a waiting question of this session; starting afresh",
                self.name,
                checkpoint_id,
            )
            return None
        return {"checkpoint_id": checkpoint_id, "value": invocation.message.content}

    async def _claimed_checkpoint(self, invocation: Invocation, resume: Mapping[str, Any]) -> Checkpoint:
        if self.checkpoints is None:
            raise GraphRunError(
                f"graph agent {self.name!r} keeps no checkpoints; it cannot resume", code="graph_resume_failed"
            )
        checkpoint_id = str(resume.get("checkpoint_id") or "")
        checkpoint = await self.checkpoints.get(checkpoint_id)
        if checkpoint is None or checkpoint.graph != self.graph.name:
            raise GraphRunError(
                f"no checkpoint {checkpoint_id!r} of graph {self.graph.name!r}", code="graph_resume_failed"
            )
        if checkpoint.resumed_by != invocation.request_id and not await self.checkpoints.claim(
            checkpoint.id, by=invocation.request_id
        ):
            raise GraphRunError(f"checkpoint {checkpoint_id!r} was already resumed", code="graph_not_waiting")
        return checkpoint


# -- resuming -------------------------------------------------------------------------------


async def resumable_checkpoint(runner: Runner, *, user_id: str, run_id: str) -> tuple[GraphAgent, Checkpoint]:
    """The checkpoint a resume of `run_id` would continue from, and its agent.

    A run is resumable when its newest checkpoint waits for an answer, or when the run was
    `interrupted` (its process died) with supersteps left. Raises `RunNotFoundError` (not
    this user's run) and `NotWaitingError`.
    """
    record = await runner.status(run_id)
    if record is None or record.user_id != user_id or record.app != runner.app:
        raise RunNotFoundError(run_id)
    agent = runner.agents.get(record.agent)
    if not isinstance(agent, GraphAgent) or agent.checkpoints is None:
        raise NotWaitingError(f"run {run_id!r} of agent {record.agent!r} is not a graph run with checkpoints")
    if not record.finished:
        raise NotWaitingError(f"run {run_id!r} is still {record.status}")
    checkpoint = await agent.checkpoints.latest(run_id)
    if checkpoint is None:
        raise NotWaitingError(f"run {run_id!r} has no checkpoint")
    if checkpoint.resumed_by:
        raise NotWaitingError(f"run {run_id!r} was already resumed")
    died_mid_graph = record.status == "interrupted" and bool(checkpoint.next_nodes)
    if checkpoint.interrupt is None and not died_mid_graph:
        raise NotWaitingError(f"run {run_id!r} is not waiting for input (it ended {record.status})")
    return agent, checkpoint


async def pending_interrupt(store: CheckpointStore, run_id: str) -> PendingInterrupt | None:
    """What a run waits for, if it waits."""
    checkpoint = await store.latest(run_id)
    return checkpoint.interrupt if checkpoint is not None and checkpoint.waiting else None


def resume_message(value: Any) -> str:
    """The user turn a resume adds to the conversation, when the caller gives none."""
    if isinstance(value, str) and value.strip():
        return value
    return json.dumps(value, ensure_ascii=False)


async def resume_graph_run(
    runner: Runner,
    *,
    user_id: str,
    run_id: str,
    value: Any,
    message: str | None = None,
    stream: bool = False,
    listeners: Sequence[EventListener] = (),
) -> RunHandle:
    """Answer a paused graph run: a new run on its session continues from the checkpoint.

    The checkpoint is claimed before the new run starts, so of two concurrent resumes one
    starts and the other gets `NotWaitingError`; a run that cannot start gives the claim
    back.
    """
    agent, checkpoint = await resumable_checkpoint(runner, user_id=user_id, run_id=run_id)
    assert agent.checkpoints is not None
    record = await runner.status(run_id)
    assert record is not None
    request_id = new_id()
    if not await agent.checkpoints.claim(checkpoint.id, by=request_id):
        raise NotWaitingError(f"run {run_id!r} was already resumed")
    try:
        return await runner.start(
            user_id=user_id,
            message=message if message and message.strip() else resume_message(value),
            session_id=record.session_id,
            agent=agent.name,
            request_id=request_id,
            options=RunOptions(
                metadata={RESUME_OPTION: {"checkpoint_id": checkpoint.id, "value": value, "run_id": run_id}}
            ),
            stream=stream,
            listeners=listeners,
        )
    except BaseException:
        await agent.checkpoints.release(checkpoint.id, by=request_id)
        raise
