"""Seeded history (SPEC 1.4): messages a client sends along with its input, stored as the
earlier turns of the session they come from.

An OpenAI client that resends its whole chat, an AG-UI client's `messages`, an A2A history:
what the client says happened before this run. Stored as part of the current run it could
never be summarized, compacted or recalled like history (the active turn is always shown),
so each seeded turn (a user message and what followed it) gets an invocation and request
id of its own, and its last answer is marked `done`: to the projection, compaction, the
summary and recall it is one more completed turn before the current one.

Tool rounds in a seeded history (an assistant message's tool calls and the `tool` results
answering them) are stored as tool-call and tool-result events. A call of a tool the agent
has is the agent's own (an AG-UI client resending the calls the agent made); a call of any
other tool was the client's (a LangGraph ReAct loop or an Agents SDK handoff that ran its
own functions): that call and its result are authored by `SEED_TOOL_AUTHOR`, so the
projection shows them to the agent as "For context:" messages (SPEC 4.5, foreign events),
never as calls the agent made of a tool it does not have. The text an assistant message
carries beside such calls stays the agent's, in an event before the calls. The client-side
tools a request offers the agent (issue 20, `RunOptions.client_tools`) count as its own: a
stateless client resending the agent's call of one, then its result, continues that round.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence

from sessions_app.core.events import OBJECT_COMPLETION, OBJECT_TOOL_RESPONSE, Event, Message, new_id

SEED_EXTENSION = "seed"
"""`Event.extensions[SEED_EXTENSION]` is True on every seeded event."""

SEED_TOOL_AUTHOR = "client"
"""The author of seeded calls of tools the agent does not have, and of their results."""


def own_tool_names(agent: object) -> frozenset[str]:
    """The names of the tools an agent declares (`LLMAgent.tools`); none for agents
    without tools of their own (graphs, chains)."""
    tools = getattr(agent, "tools", None)
    return frozenset(tools) if isinstance(tools, Mapping) else frozenset()


def seeded_events(
    seed: Sequence[Message], *, agent: str, branch: str, filter_key: str, own_tools: Collection[str] = ()
) -> Iterator[Event]:
    """The ledger events of `seed`, oldest first: a new turn at each user message (and at
    the first message), the user's messages authored `user`, calls of tools not in
    `own_tools` and their results by `SEED_TOOL_AUTHOR`, the rest by `agent`."""
    turn: list[Event] = []
    caller: dict[str, str] = {}  # call id -> the author of the call, for its result

    def close(events: list[Event]) -> list[Event]:
        last = events[-1].message if events else None
        if last is not None and last.role == "assistant" and not last.tool_calls:
            events[-1] = events[-1].replace(done=True)
        return events

    def authored(message: Message) -> Iterator[tuple[str, Message]]:
        if message.role == "user":
            yield "user", message
        elif message.role == "tool":
            yield caller.get(message.tool_call_id or "", agent), message
        elif message.tool_calls:
            own = tuple(c for c in message.tool_calls if c.name in own_tools)
            foreign = tuple(c for c in message.tool_calls if c.name not in own_tools)
            caller.update({c.id: agent for c in own} | {c.id: SEED_TOOL_AUTHOR for c in foreign})
            if own or message.content:
                yield agent, Message(role="assistant", content=message.content, tool_calls=own)
            if foreign:
                yield SEED_TOOL_AUTHOR, Message(role="assistant", tool_calls=foreign)
        else:
            yield agent, message

    invocation_id = request_id = ""
    for message in seed:
        if message.role == "user" or not turn:
            yield from close(turn)
            turn, invocation_id, request_id = [], new_id(), new_id()
        for author, part in authored(message):
            turn.append(
                Event(
                    author=author,
                    object=OBJECT_TOOL_RESPONSE if part.role == "tool" else OBJECT_COMPLETION,
                    message=part,
                    invocation_id=invocation_id,
                    request_id=request_id,
                    branch=branch,
                    filter_key=filter_key,
                    extensions={SEED_EXTENSION: True},
                )
            )
    yield from close(turn)
