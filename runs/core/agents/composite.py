"""Workflow agents that run other agents (SPEC 11.3): chain, parallel, cycle.

Children run on *child invocations*: the same run, session and services, the branch
`<parent branch>/<child name>` and, for the branches of a parallel agent, their own filter
key `<parent key>/<child name>`, so each branch's history projection shows the shared
conversation but not its siblings' steps (SPEC 2.3).

Every child event is handed on as soon as it is made, and the child resumes only after the
runner has processed it: complete events are persisted before a child builds its next
request, also when several children run at once (`EventMux`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runs.core.agents.base import Agent
from runs.core.invocation import Invocation
from runs.core.routing import asks_user, routed_child
from sessions_app.core.events import OBJECT_TOOL_RESPONSE, Event

OBJECT_PARALLEL_RESULTS = "parallel.results"
ESCALATE = "escalate"
"""An event with `extensions["escalate"]` true ends a CycleAgent's loop (a tool sets it
through `ToolContext.extensions`)."""
DEFAULT_MAX_ITERATIONS = 10


def child_invocation(parent: Invocation, agent: Agent, *, filter_key: str | None = None) -> Invocation:
    """The invocation a child agent runs on (SPEC 11.1 `Clone`, 2.3 branches).

    The invocation id stays the parent's: the runner stamps every event of the run with
    it anyway, and the projection shows "the active turn" by that id.
    """
    return dataclasses.replace(
        parent,
        agent_name=agent.name,
        branch=f"{parent.branch}/{agent.name}" if parent.branch else agent.name,
        filter_key=filter_key if filter_key is not None else parent.filter_key,
    )


# -- merging concurrent event streams -------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Finished:
    """A producer of an `EventMux` ended: with a value, an exception or neither."""

    key: str
    value: Any = None
    error: BaseException | None = None


@dataclass(kw_only=True)
class EventMux:
    """Several producers, one ordered stream; each `emit` returns once the consumer has
    taken the event *and come back for the next one* (the runner persisted it)."""

    _queue: asyncio.Queue[tuple[Event, asyncio.Future[None]] | Finished] = field(default_factory=asyncio.Queue)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def emit(self, event: Event) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._queue.put((event, done))
        await done

    def start(self, key: str, work: Callable[[], Any]) -> None:
        """Run the coroutine function `work` as a producer; its result ends up in `Finished`."""

        async def produce() -> None:
            try:
                value = await work()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # reported to the consumer, which decides
                await self._queue.put(Finished(key=key, error=exc))
                return
            await self._queue.put(Finished(key=key, value=value))

        self._tasks.append(asyncio.create_task(produce(), name=f"mux-{key}"))

    async def drain(self) -> AsyncGenerator[Event | Finished, None]:
        """Events and `Finished` markers in arrival order, until every producer finished."""
        pending = len(self._tasks)
        ack: asyncio.Future[None] | None = None
        try:
            while pending:
                item = await self._queue.get()
                if isinstance(item, Finished):
                    pending -= 1
                    yield item
                    continue
                event, ack = item
                yield event
                if not ack.done():
                    ack.set_result(None)
                ack = None
        finally:
            await self.close()

    async def close(self) -> None:
        """Cancel the producers still running and wait until they have stopped."""
        for task in self._tasks:
            if not task.done():
                task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


# -- chain ----------------------------------------------------------------------------------


class ChainAgent:
    """Run the sub-agents one after another; stop at the first error event, or after a
    child that asks the user (it recorded an await-user-reply route).

    A run that follows a route to one of the children (`runs.core.routing`) starts at
    that child: the ones before it already ran in the turn that asked.
    """

    kind = "chain"

    def __init__(self, *, name: str, agents: Sequence[Agent], description: str = "") -> None:
        if not agents:
            raise ValueError(f"chain {name!r} needs at least one agent")
        self.name = name
        self.description = description
        self.agents = list(agents)

    @property
    def model_name(self) -> str | None:
        return next((a.model_name for a in self.agents if a.model_name), None)

    @property
    def sub_agents(self) -> list[Agent]:
        return self.agents

    async def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        start = routed_child(invocation, self.agents) or 0
        for agent in self.agents[start:]:
            if invocation.cancel_event.is_set():
                return
            asked = False
            async with contextlib.aclosing(agent.run(child_invocation(invocation, agent))) as events:
                async for event in events:
                    yield event
                    if event.is_error:
                        return  # SPEC 11.3: the first error ends the chain
                    asked = asked or asks_user(event)
            if asked:
                return  # the child waits for the user: the reply continues the chain there


# -- parallel -------------------------------------------------------------------------------


class ParallelAgent:
    """Run the sub-agents at once, each on its own branch and filter key; their events
    interleave as they come. When all have finished, one `parallel.results` event lists
    each branch's final answer (or error) in the order the agents were given.

    A run that follows a route into one branch runs only that branch (the others
    answered in the turn that asked)."""

    kind = "parallel"

    def __init__(self, *, name: str, agents: Sequence[Agent], description: str = "") -> None:
        names = [a.name for a in agents]
        if not agents:
            raise ValueError(f"parallel agent {name!r} needs at least one agent")
        if len(set(names)) != len(names):
            raise ValueError(f"parallel agent {name!r}: branch names must differ, got {names!r}")
        self.name = name
        self.description = description
        self.agents = list(agents)

    @property
    def model_name(self) -> str | None:
        return next((a.model_name for a in self.agents if a.model_name), None)

    @property
    def sub_agents(self) -> list[Agent]:
        return self.agents

    async def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        mux = EventMux()
        results: dict[str, dict[str, Any]] = {}
        routed = routed_child(invocation, self.agents)
        running = self.agents if routed is None else [self.agents[routed]]
        children = {
            a.name: child_invocation(invocation, a, filter_key=f"{invocation.filter_key or self.name}/{a.name}")
            for a in running
        }

        def branch(agent: Agent) -> Callable[[], Any]:
            async def work() -> dict[str, Any]:
                child = children[agent.name]
                outcome: dict[str, Any] = {
                    "agent": agent.name,
                    "branch": child.branch,
                    "filter_key": child.filter_key,
                    "text": "",
                }
                async for event in agent.run(child):
                    await mux.emit(event)  # resumes once the runner has persisted it
                    if event.is_error and event.error is not None:
                        outcome["error"] = event.error.to_dict()
                    elif event.is_final_response and event.text:
                        outcome["text"] = event.text
                return outcome

            return work

        for agent in running:
            mux.start(agent.name, branch(agent))
        async with contextlib.aclosing(mux.drain()) as items:
            async for item in items:
                if isinstance(item, Finished):
                    if item.error is not None:
                        raise item.error
                    results[item.key] = item.value
                    continue
                yield item
        yield invocation.stamp(
            Event(
                author=self.name,
                object=OBJECT_PARALLEL_RESULTS,
                done=True,
                extensions={"results": [results[a.name] for a in running]},
            )
        )


# -- cycle ----------------------------------------------------------------------------------


def default_escalation(event: Event) -> bool:
    """SPEC 11.3: an error, or an event that says `escalate`."""
    return event.is_error or bool(event.extensions.get(ESCALATE))


class CycleAgent:
    """Run the sub-agents in order, again and again, until one escalates or the
    iterations run out.

    The escalation check (SPEC 11.3) looks only at error events, tool results and final
    responses: `should_stop(event)`, by default an error or `extensions["escalate"]`. A
    child that asks the user ends the loop too; a run that follows a route to a child
    starts its first iteration at that child.
    """

    kind = "cycle"

    def __init__(
        self,
        *,
        name: str,
        agents: Sequence[Agent],
        max_iterations: int = DEFAULT_MAX_ITERATIONS,
        should_stop: Callable[[Event], bool] = default_escalation,
        description: str = "",
    ) -> None:
        if not agents:
            raise ValueError(f"cycle {name!r} needs at least one agent")
        if max_iterations < 1:
            raise ValueError(f"max_iterations must be at least 1, got {max_iterations!r}")
        self.name = name
        self.description = description
        self.agents = list(agents)
        self.max_iterations = max_iterations
        self.should_stop = should_stop

    @property
    def model_name(self) -> str | None:
        return next((a.model_name for a in self.agents if a.model_name), None)

    @property
    def sub_agents(self) -> list[Agent]:
        return self.agents

    async def run(self, invocation: Invocation) -> AsyncGenerator[Event, None]:
        start = routed_child(invocation, self.agents) or 0
        for iteration in range(self.max_iterations):
            for agent in self.agents[start if iteration == 0 else 0 :]:
                if invocation.cancel_event.is_set():
                    return
                asked = False
                async with contextlib.aclosing(agent.run(child_invocation(invocation, agent))) as events:
                    async for event in events:
                        yield event
                        checked = event.is_error or event.object == OBJECT_TOOL_RESPONSE or event.is_final_response
                        if checked and self.should_stop(event):
                            return
                        asked = asked or asks_user(event)
                if asked:
                    return
