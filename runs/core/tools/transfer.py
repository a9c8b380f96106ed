"""`transfer_to_agent`: an LLM agent hands the turn to one of its sub-agents (SPEC 2.2, 11.2).

Offered to an `LLMAgent` built with `sub_agents`. The tool checks the name and takes note
(`extensions["transfer"]` on its result, so the call has its result in the ledger); the
agent then emits one `agent.transfer` event and runs the target in the same run, on a
child invocation with its own branch `<agent branch>/<target>` (SPEC 2.3), and ends when
the target ends (tRPC-Agent-Go's `EndInvocationAfterTransfer`, on by default there too).

The `agent.transfer` event is an assistant message ("Transferring control to agent: X",
no model call), so it is in the ledger and on every stream; `extensions["transfer"]`
holds `{"from", "to", "branch", "message"?}`. The AG-UI translator adds a CUSTOM
`agentsite.agent.transfer` event with that payload.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

from runs.core.agents.base import Agent
from runs.core.agents.composite import child_invocation
from runs.core.invocation import Invocation
from runs.core.llm.base import ToolSpec
from runs.core.routing import routed_child
from runs.core.tools.base import ToolArgumentError, ToolContext
from sessions_app.core.events import NO_MODEL_CALL, Event, Message

TRANSFER_TO_AGENT = "transfer_to_agent"
OBJECT_TRANSFER = "agent.transfer"
TRANSFER_EXTENSION = "transfer"
MAX_NOTE_CHARS = 2000


class TransferTool:
    """Hand the conversation to a sub-agent better placed to answer it."""

    name = TRANSFER_TO_AGENT

    def __init__(self, targets: Sequence[Agent]) -> None:
        if not targets:
            raise ValueError("transfer_to_agent needs at least one target agent")
        self.targets = {a.name: a for a in targets}
        listing = "; ".join(f"{a.name}: {a.description or 'no description'}" for a in targets)
        self.description = (
            "Transfer the conversation to another agent when it is better placed to handle the "
            f"user's request; that agent answers and your turn ends. Agents: {listing}."
        )

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters={
                "type": "object",
                "properties": {
                    "agent_name": {
                        "type": "string",
                        "enum": sorted(self.targets),
                        "description": "the agent to hand over to",
                    },
                    "message": {"type": "string", "description": "optional note for that agent: what you found so far"},
                },
                "required": ["agent_name"],
            },
        )

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        target = args.get("agent_name")
        if not isinstance(target, str) or target not in self.targets:
            raise ToolArgumentError(f"agent_name must be one of {sorted(self.targets)!r}, got {target!r}")
        note = args.get("message")
        if note is not None and not isinstance(note, str):
            raise ToolArgumentError(f"message must be a string, got {type(note).__name__}")
        if note is not None and len(note) > MAX_NOTE_CHARS:
            raise ToolArgumentError(f"message is {len(note)} characters; the limit is {MAX_NOTE_CHARS}")
        context.extensions[TRANSFER_EXTENSION] = {"agent": target, **({"message": note} if note else {})}
        return {"status": "transferred", "agent": target}


def transfer_target(results: Sequence[Event], targets: Mapping[str, Agent]) -> tuple[Agent, str | None] | None:
    """The agent a `transfer_to_agent` call of this step chose (the first), with its note."""
    for event in results:
        chosen = event.extensions.get(TRANSFER_EXTENSION)
        if isinstance(chosen, Mapping) and chosen.get("agent") in targets:
            note = chosen.get("message")
            return targets[str(chosen["agent"])], note if isinstance(note, str) else None
    return None


def transfer_text(target: str, note: str | None) -> str:
    """What the transfer says in the conversation (the target's model reads the note)."""
    text = f"Transferring control to agent: {target}"
    return f"{text}\n{note}" if note else text


async def run_transfer(
    invocation: Invocation, *, author: str, target: Agent, note: str | None = None
) -> AsyncGenerator[Event, None]:
    """The `agent.transfer` event, then the target's events on its own branch."""
    child = child_invocation(invocation, target)
    info: dict[str, Any] = {"from": invocation.branch, "to": target.name, "branch": child.branch}
    if note:
        info["message"] = note
    yield invocation.stamp(
        Event(
            author=author,
            object=OBJECT_TRANSFER,
            message=Message(role="assistant", content=transfer_text(target.name, note)),
            extensions={TRANSFER_EXTENSION: info, NO_MODEL_CALL: True},
        )
    )
    async with contextlib.aclosing(target.run(child)) as events:
        async for event in events:
            yield event


def follow_route(invocation: Invocation, targets: Sequence[Agent]) -> AsyncGenerator[Event, None] | None:
    """The events of the target a followed await-user-reply route leads to (the user's
    reply to a question a transferred-to agent asked), or None when the route does not
    pass through here (`runs.core.routing`)."""
    index = routed_child(invocation, targets)
    if index is None:
        return None
    target = targets[index]

    async def events() -> AsyncGenerator[Event, None]:
        async with contextlib.aclosing(target.run(child_invocation(invocation, target))) as stream:
            async for event in stream:
                yield event

    return events()
