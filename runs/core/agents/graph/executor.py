"""The executor: supersteps over a compiled graph (SPEC 10.2, 10.3).

Each superstep runs its tasks (the nodes triggered by the previous one) concurrently, each
on its own copy of the state. As a task finishes its node's finish event goes out; when
all have finished, their updates are folded into the state in declaration order (never
in finishing order), the edges are followed on the new state to plan the next superstep,
and a checkpoint is written. The run ends when a superstep triggers nothing, fails after
`max_steps` supersteps, or pauses when a node calls `ctx.interrupt(...)`.

A pause lets the step's other tasks finish and keeps their writes in the checkpoint with
the pending interrupt; a resume re-runs only the paused node (its `interrupt` call now
returns the answer) and then completes the step as if nothing had happened.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runs.core.agents.composite import EventMux, Finished
from runs.core.agents.graph.builder import CompiledGraph
from runs.core.agents.graph.checkpoint import Checkpoint, CheckpointStore, PendingInterrupt
from runs.core.agents.graph.errors import GraphInterrupt, GraphRunError
from runs.core.agents.graph.events import (
    GRAPH_EXTENSION,
    OBJECT_EXECUTION,
    OBJECT_INTERRUPT,
    OBJECT_NODE_COMPLETE,
    OBJECT_NODE_START,
    OBJECT_STATE_UPDATE,
    GraphEventInfo,
)
from runs.core.agents.graph.nodes import NodeContext
from runs.core.invocation import Invocation
from sessions_app.core.events import NO_MODEL_CALL, Event, Message, new_id

DEFAULT_INTERRUPT_TEXT = "The run is waiting for your input."


@dataclass(kw_only=True)
class _Position:
    """Where the run stands: the next superstep and what it inherits."""

    step: int
    state: dict[str, Any]
    tasks: tuple[str, ...]
    barriers: dict[str, tuple[str, ...]] = field(default_factory=dict)
    writes: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    resume_values: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    parent_id: str | None = None


def interrupt_text(payload: Any) -> str:
    """The question a pause shows as its message."""
    if isinstance(payload, str) and payload.strip():
        return payload
    if isinstance(payload, Mapping):
        for key in ("question", "prompt", "message", "title"):
            value = payload.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return DEFAULT_INTERRUPT_TEXT


def _check_update(graph: CompiledGraph, node: str, update: Any) -> Mapping[str, Any]:
    if update is None:
        return {}
    if not isinstance(update, Mapping):
        raise GraphRunError(
            f"node {node!r} returned {type(update).__name__}; a node returns a mapping of state fields or None",
            node=node,
        )
    for key, value in update.items():
        if key not in graph.schema.fields:
            raise GraphRunError(
                f"node {node!r} wrote {key!r}, which is not a field of the state; fields: {sorted(graph.schema.fields)!r}",
                code="graph_unknown_field",
                node=node,
            )
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise GraphRunError(f"node {node!r} wrote a value for {key!r} that is not JSON: {exc}", node=node) from None
    return update


class Executor:
    """Runs one graph for one invocation; checkpoints into `store` when given."""

    def __init__(self, graph: CompiledGraph, *, invocation: Invocation, store: CheckpointStore | None = None) -> None:
        self.graph = graph
        self.invocation = invocation
        self.store = store
        self.last_checkpoint: Checkpoint | None = None

    # -- events --------------------------------------------------------------------------

    def _event(self, object_: str, info: GraphEventInfo, *, no_model_call: bool = False, **fields: Any) -> Event:
        extensions: dict[str, Any] = {GRAPH_EXTENSION: info.to_dict()}
        if no_model_call:
            extensions[NO_MODEL_CALL] = True
        return self.invocation.stamp(
            Event(author=self.invocation.agent_name, object=object_, extensions=extensions, **fields)
        )

    def _info(self, step: int, **fields: Any) -> GraphEventInfo:
        return GraphEventInfo(graph=self.graph.name, step=step, **fields)

    # -- checkpoints ---------------------------------------------------------------------

    async def _save(self, checkpoint: Checkpoint) -> Checkpoint:
        if self.store is not None:
            checkpoint = await self.store.put(checkpoint)
        self.last_checkpoint = checkpoint
        return checkpoint

    def _checkpoint(self, position: _Position, **fields: Any) -> Checkpoint:
        return Checkpoint(
            run_id=self.invocation.run_id,
            graph=self.graph.name,
            step=position.step,
            state=position.state,
            next_nodes=position.tasks,
            barriers=dict(position.barriers),
            parent_id=position.parent_id,
            **fields,
        )

    # -- the loop ------------------------------------------------------------------------

    async def start(self, state: Mapping[str, Any]) -> AsyncGenerator[Event, None]:
        """Run from the entry point on `state` (a full state: see `StateSchema.initial`)."""
        position = _Position(step=0, state=dict(state), tasks=self.graph.entry)
        # The input checkpoint: a run that dies in its first step can still be resumed.
        saved = await self._save(self._checkpoint(position))
        position.parent_id = saved.id or None
        async with contextlib.aclosing(self._loop(position)) as events:
            async for event in events:
                yield event

    async def resume(
        self, checkpoint: Checkpoint, *, value: Any = None, has_value: bool = True
    ) -> AsyncGenerator[Event, None]:
        """Continue from `checkpoint`; a pending interrupt gets `value` as its answer."""
        resume_values = {k: tuple(v) for k, v in checkpoint.resume_values.items()}
        pending = checkpoint.interrupt
        if pending is not None and has_value:
            answers = list(resume_values.get(pending.node, ()))[: pending.index]
            resume_values[pending.node] = (*answers, value)
        position = _Position(
            step=checkpoint.step,
            state=dict(checkpoint.state),
            tasks=tuple(checkpoint.next_nodes),
            barriers={k: tuple(v) for k, v in checkpoint.barriers.items()},
            writes=dict(checkpoint.writes),
            resume_values=resume_values,
            parent_id=checkpoint.id or None,
        )
        async with contextlib.aclosing(self._loop(position)) as events:
            async for event in events:
                yield event

    async def _loop(self, position: _Position) -> AsyncGenerator[Event, None]:
        graph = self.graph
        while position.tasks:
            if self.invocation.cancel_event.is_set():
                return
            if position.step >= graph.max_steps:
                raise GraphRunError(
                    f"graph {graph.name!r} ran {graph.max_steps} supersteps without reaching the end "
                    f"(next: {list(position.tasks)!r})",
                    code="graph_max_steps",
                )
            interrupt: GraphInterrupt | None = None
            async with contextlib.aclosing(self._superstep(position)) as items:
                async for item in items:
                    if isinstance(item, GraphInterrupt):
                        interrupt = item
                    else:
                        yield item
            if interrupt is not None:
                async for event in self._pause(position, interrupt):
                    yield event
                return
            updates = [(f"node {n!r}", position.writes[n]) for n in position.tasks if position.writes.get(n)]
            state, delta = graph.schema.apply(position.state, updates)
            if delta:
                yield self._event(OBJECT_STATE_UPDATE, self._info(position.step, state_delta=delta))
            tasks, barriers = await self._plan(position, state)
            position = _Position(
                step=position.step + 1, state=state, tasks=tasks, barriers=barriers, parent_id=position.parent_id
            )
            saved = await self._save(self._checkpoint(position))
            position.parent_id = saved.id or None
        yield self._event(
            OBJECT_EXECUTION, self._info(position.step, status="completed", checkpoint_id=position.parent_id), done=True
        )

    async def _superstep(self, position: _Position) -> AsyncGenerator[Event | GraphInterrupt, None]:
        """Run the step's tasks at once; yield their events, then the first interrupt."""
        graph = self.graph
        mux = EventMux()
        interrupts: dict[str, GraphInterrupt] = {}
        for node in position.tasks:
            if node in position.writes:
                continue  # finished before the pause this step resumes from
            spec = graph.nodes[node]
            yield self._event(OBJECT_NODE_START, self._info(position.step, node=node, kind=spec.kind))
            ctx = NodeContext(
                node=node,
                step=position.step,
                invocation=self.invocation,
                emit_event=mux.emit,
                resume_values=position.resume_values.get(node, ()),
            )
            # Each task gets its own deep copy: a node mutating its state changes nothing.
            mux.start(node, _bind(spec.run, copy.deepcopy(position.state), ctx))
        async with contextlib.aclosing(mux.drain()) as items:
            async for item in items:
                if not isinstance(item, Finished):
                    yield item
                    continue
                node, spec = item.key, graph.nodes[item.key]
                if isinstance(item.error, GraphInterrupt):
                    interrupts[node] = item.error
                    continue
                if isinstance(item.error, GraphRunError):
                    raise item.error
                if item.error is not None:
                    raise GraphRunError(
                        f"node {node!r} failed: {type(item.error).__name__}: {item.error}",
                        code="graph_node_error",
                        node=node,
                    ) from item.error
                position.writes[node] = _check_update(graph, node, item.value)
                yield self._event(OBJECT_NODE_COMPLETE, self._info(position.step, node=node, kind=spec.kind))
        first = next((interrupts[n] for n in position.tasks if n in interrupts), None)
        if first is not None:
            yield first

    async def _pause(self, position: _Position, signal: GraphInterrupt) -> AsyncGenerator[Event, None]:
        try:
            json.dumps(signal.payload)
        except (TypeError, ValueError) as exc:
            raise GraphRunError(
                f"node {signal.node!r} asked with a payload that is not JSON: {exc}", node=signal.node
            ) from None
        pending = PendingInterrupt(id=new_id(), node=signal.node, payload=signal.payload, index=signal.index)
        checkpoint = await self._save(
            self._checkpoint(
                position,
                writes=dict(position.writes),
                resume_values=dict(position.resume_values),
                interrupt=pending,
            )
        )
        info = self._info(
            position.step,
            node=signal.node,
            kind=self.graph.nodes[signal.node].kind,
            interrupt=pending.to_dict(),
            checkpoint_id=checkpoint.id or None,
        )
        # Saved first, announced second: whoever sees the question can answer it.
        yield self._event(
            OBJECT_INTERRUPT,
            info,
            message=Message(role="assistant", content=interrupt_text(signal.payload)),
            done=True,
            no_model_call=True,
        )
        yield self._event(
            OBJECT_EXECUTION,
            self._info(position.step, status="interrupted", checkpoint_id=checkpoint.id or None),
            done=True,
        )

    async def _plan(
        self, position: _Position, state: Mapping[str, Any]
    ) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
        """The next superstep's tasks: edges, filled joins and routers of the finished nodes."""
        graph = self.graph
        nxt: set[str] = set()
        barriers = {k: set(v) for k, v in position.barriers.items()}
        for node in position.tasks:
            nxt.update(graph.edges.get(node, ()))
            for join in graph.joins:
                if node in join.sources:
                    seen = barriers.setdefault(join.key, set())
                    seen.add(node)
                    if seen >= set(join.sources):
                        nxt.add(join.target)
                        del barriers[join.key]
            nxt.update(await graph.route(node, state))
        nxt.discard("__end__")
        return graph.sort(nxt), {k: tuple(sorted(v)) for k, v in barriers.items() if v}


def _bind(run: Any, state: Mapping[str, Any], ctx: NodeContext) -> Any:
    async def work() -> Any:
        return await run(state, ctx)

    return work
