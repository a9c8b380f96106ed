"""Await-user-reply routing (SPEC 1.2 step 6): the next user message goes to the agent that asked.

An agent that waits for the user (an LLM agent's `ask_user` tool, a graph's `interrupt`)
records a *route* in the session state, inside the event that asks (the ledger is the only
write path): `state["await_user_reply"] = {"path": "<lookup path>", ...}`. The lookup path
is the asking agent's branch, `<root agent>/<child>/...` (SPEC 2.3). Recording is off
unless the agent was built with `await_user_reply=True`.

When the next user message arrives, `resolve_route` decides, before anything is written:

- no route: the usual choice (the request's agent, the session's, the default);
- the request names another root agent: the route is cleared (an explicit choice wins);
- the route is not a mapping with a path (invalid), or its path no longer leads to an
  agent (stale: a root or child renamed or removed): cleared and ignored, logged and noted
  in the ledger;
- otherwise it is consumed (cleared) and the run goes to the route's root agent with the
  route in `RunOptions.metadata[ROUTE_OPTION]`. Composite agents follow it down: a chain
  or cycle starts at the child on the path (the agents before it do not run again), a
  parallel agent runs only that branch, an LLM agent hands the turn to the sub-agent on
  the path, and a graph at the end of the path resumes its waiting checkpoint with the
  message as the answer.

A request that names the route's own root agent keeps the route: the OpenAI-compatible
and AG-UI surfaces name the agent on every request, and the route lives inside it.

Clearing writes `None` under the key (state deltas merge; nothing deletes a key), in one
`state.update` event written with the user's message, whose `extensions["route"]` says what
happened (`consumed`, `cleared`, with the reason).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from runs.core.agents.base import Agent
from runs.core.invocation import Invocation, RunOptions
from sessions_app.core.events import OBJECT_STATE_UPDATE, Event

logger = logging.getLogger(__name__)

ROUTE_STATE_KEY = "await_user_reply"
"""Session-state key of the pending route (None or absent: no route)."""
ROUTE_OPTION = "await_user_reply_route"
"""`RunOptions.metadata` key holding the route a run follows (the `Route.to_dict()`)."""
ROUTE_EXTENSION = "route"
"""`Event.extensions` key of the runner's note on what it did with a route."""
PATH_SEPARATOR = "/"

RouteKind = Literal["ask_user", "graph_interrupt"]
Outcome = Literal["none", "consumed", "cleared"]


@dataclass(frozen=True, kw_only=True)
class Route:
    """Where the next user message goes: the asking agent's lookup path, and what asked."""

    path: str
    kind: RouteKind = "ask_user"
    run_id: str = ""
    question: str = ""
    checkpoint_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def parts(self) -> list[str]:
        return self.path.split(PATH_SEPARATOR)

    @property
    def root(self) -> str:
        return self.parts[0]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"path": self.path, "kind": self.kind, "run_id": self.run_id, "question": self.question}
        if self.checkpoint_id:
            data["checkpoint_id"] = self.checkpoint_id
        if self.extra:
            data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_value(cls, value: Any) -> Route | None:
        """The route stored under `ROUTE_STATE_KEY`, or None when `value` is not one."""
        if not isinstance(value, Mapping):
            return None
        path = value.get("path")
        if not isinstance(path, str) or not path or any(not p for p in path.split(PATH_SEPARATOR)):
            return None
        kind = value.get("kind", "ask_user")
        if kind not in ("ask_user", "graph_interrupt"):
            return None
        checkpoint = value.get("checkpoint_id")
        extra = value.get("extra")
        return cls(
            path=path,
            kind=kind,
            run_id=str(value.get("run_id") or ""),
            question=str(value.get("question") or ""),
            checkpoint_id=checkpoint if isinstance(checkpoint, str) and checkpoint else None,
            extra=dict(extra) if isinstance(extra, Mapping) else {},
        )


def route_delta(route: Route) -> dict[str, Any]:
    """The state delta that records `route` (put it on the event that asks)."""
    return {ROUTE_STATE_KEY: route.to_dict()}


def asks_user(event: Event) -> bool:
    """Whether `event` records a route: its agent now waits for the user, so a chain or
    cycle around it stops after it."""
    return event.state_delta.get(ROUTE_STATE_KEY) is not None


def sub_agents(agent: Agent) -> Sequence[Agent]:
    """The agents a route may descend into from `agent` (composites' children, an LLM
    agent's transfer targets); empty for the rest."""
    children = getattr(agent, "sub_agents", ())
    return list(children) if children else []


# -- the runner's side ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RouteDecision:
    """What the runner does with the session's route for this turn."""

    outcome: Outcome = "none"
    agent: Agent | None = None
    route: Route | None = None
    reason: str = ""

    def options(self, options: RunOptions) -> RunOptions:
        """`options`, carrying the consumed route for the agents to follow."""
        if self.outcome != "consumed" or self.route is None:
            return options
        return dataclasses.replace(options, metadata={**options.metadata, ROUTE_OPTION: self.route.to_dict()})

    def note(self, *, author: str) -> Event | None:
        """The state event that clears the route, with what happened to it; None when the
        session had no route."""
        if self.outcome == "none":
            return None
        note: dict[str, Any] = {"outcome": self.outcome, "reason": self.reason}
        if self.route is not None:
            note["path"] = self.route.path
        return Event(
            author=author,
            object=OBJECT_STATE_UPDATE,
            state_delta={ROUTE_STATE_KEY: None},
            extensions={ROUTE_EXTENSION: note},
        )


def lookup(agents: Mapping[str, Agent], path: str) -> list[Agent] | None:
    """The agents along `path` from a root in `agents`, or None when it leads nowhere."""
    parts = path.split(PATH_SEPARATOR)
    current = agents.get(parts[0])
    if current is None:
        return None
    found = [current]
    for name in parts[1:]:
        current = next((a for a in sub_agents(current) if a.name == name), None)
        if current is None:
            return None
        found.append(current)
    return found


def resolve_route(
    state: Mapping[str, Any],
    agents: Mapping[str, Agent],
    *,
    requested: str | None,
    user_turn: bool = True,
) -> RouteDecision:
    """SPEC 1.2 step 6: what the session's pending route means for a run that starts now.

    `requested` is the agent the request named (None: none); `user_turn` is False for a
    turn of tool results, which never touches a route.
    """
    value = state.get(ROUTE_STATE_KEY)
    if value is None or not user_turn:
        return RouteDecision()
    route = Route.from_value(value)
    if route is None:
        logger.warning("await-user-reply route %r is invalid; cleared and ignored", value)
        return RouteDecision(outcome="cleared", reason=f"invalid route {value!r}")
    if requested is not None and requested != route.root:
        return RouteDecision(outcome="cleared", route=route, reason=f"the request chose agent {requested!r}")
    found = lookup(agents, route.path)
    if found is None:
        logger.warning("await-user-reply route %r leads to no agent; cleared and ignored", route.path)
        return RouteDecision(outcome="cleared", route=route, reason=f"no agent at {route.path!r}")
    return RouteDecision(outcome="consumed", agent=found[0], route=route, reason=f"the reply goes to {route.path!r}")


# -- the agents' side ----------------------------------------------------------------------


def followed_route(invocation: Invocation) -> Route | None:
    """The route this run follows, if any."""
    return Route.from_value(invocation.options.metadata.get(ROUTE_OPTION))


def routed_child(invocation: Invocation, children: Sequence[Agent]) -> int | None:
    """The index in `children` of the child on the followed route's path below this
    invocation's agent, or None (no route, or the path does not pass through here)."""
    route = followed_route(invocation)
    if route is None:
        return None
    mine = invocation.branch.split(PATH_SEPARATOR)
    parts = route.parts
    if len(parts) <= len(mine) or parts[: len(mine)] != mine:
        return None
    name = parts[len(mine)]
    return next((i for i, child in enumerate(children) if child.name == name), None)


def is_route_target(invocation: Invocation) -> Route | None:
    """The followed route when this invocation's agent is the one that asked, else None."""
    route = followed_route(invocation)
    return route if route is not None and route.path == invocation.branch else None
