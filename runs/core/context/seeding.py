"""Seeded history (SPEC 1.4): messages a client sends along with its input, stored as the
earlier turns of the session they come from.

An OpenAI client that resends its whole chat, an AG-UI client's `messages`, an A2A history:
what the client says happened before this run. Stored as part of the current run it could
never be summarized, compacted or recalled like history (the active turn is always shown),
so each seeded turn (a user message and what followed it) gets an invocation and request
id of its own, and its last answer is marked `done`: to the projection, compaction, the
summary and recall it is one more completed turn before the current one.

Tool rounds in a seeded history (an assistant message's tool calls and the `tool` results
answering them) were the client's: its own model called its own functions, which ran on the
client (a LangGraph ReAct loop, an Agents SDK handoff). They are stored as tool-call and
tool-result events of their own kind, authored by `SEED_TOOL_AUTHOR`, not by the agent: the
projection then shows them to the agent as "For context:" messages (SPEC 4.5, foreign
events), never as calls the agent itself made of tools it may not have. The text an
assistant message carries beside its calls stays the agent's, in an event before the calls.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sessions_app.core.events import OBJECT_COMPLETION, OBJECT_TOOL_RESPONSE, Event, Message, new_id

SEED_EXTENSION = "seed"
"""`Event.extensions[SEED_EXTENSION]` is True on every seeded event."""

SEED_TOOL_AUTHOR = "client"
"""The author of seeded tool calls and results: the client that ran them, not the agent."""


def seeded_events(seed: Sequence[Message], *, agent: str, branch: str, filter_key: str) -> Iterator[Event]:
    """The ledger events of `seed`, oldest first: a new turn at each user message (and at
    the first message), the user's messages authored `user`, tool calls and results by
    `SEED_TOOL_AUTHOR`, the rest by `agent`."""
    turn: list[Event] = []

    def close(events: list[Event]) -> list[Event]:
        last = events[-1].message if events else None
        if last is not None and last.role == "assistant" and not last.tool_calls:
            events[-1] = events[-1].replace(done=True)
        return events

    invocation_id = request_id = ""
    for message in seed:
        if message.role == "user" or not turn:
            yield from close(turn)
            turn, invocation_id, request_id = [], new_id(), new_id()
        for author, part in _authored(message, agent):
            turn.append(Event(
                author=author,
                object=OBJECT_TOOL_RESPONSE if part.role == "tool" else OBJECT_COMPLETION,
                message=part,
                invocation_id=invocation_id,
                request_id=request_id,
                branch=branch,
                filter_key=filter_key,
                extensions={SEED_EXTENSION: True},
            ))
    yield from close(turn)


def _authored(message: Message, agent: str) -> Iterator[tuple[str, Message]]:
    """`message` as (author, message) events: an assistant's text and its tool calls apart."""
    if message.role == "user":
        yield "user", message
    elif message.role == "tool":
        yield SEED_TOOL_AUTHOR, message
    elif message.tool_calls:
        if message.content:
            yield agent, Message(role="assistant", content=message.content)
        yield SEED_TOOL_AUTHOR, Message(role="assistant", tool_calls=message.tool_calls)
    else:
        yield agent, message
