"""Seeded history (SPEC 1.4): messages a client sends along with its input, stored as the
earlier turns of the session they come from.

An OpenAI client that resends its whole chat, an AG-UI client's `messages`, an A2A history:
what the client says happened before this run. Stored as part of the current run it could
never be summarized, compacted or recalled like history (the active turn is always shown),
so each seeded turn (a user message and what followed it) gets an invocation and request
id of its own, and its last answer is marked `done`: to the projection, compaction, the
summary and recall it is one more completed turn before the current one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sessions_app.core.events import OBJECT_COMPLETION, OBJECT_TOOL_RESPONSE, Event, Message, new_id

SEED_EXTENSION = "seed"
"""`Event.extensions[SEED_EXTENSION]` is True on every seeded event."""


def seeded_events(seed: Sequence[Message], *, agent: str, branch: str, filter_key: str) -> Iterator[Event]:
    """The ledger events of `seed`, oldest first: a new turn at each user message (and at
    the first message), the user's messages authored `user`, the rest by `agent`."""
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
        turn.append(Event(
            author="user" if message.role == "user" else agent,
            object=OBJECT_TOOL_RESPONSE if message.role == "tool" else OBJECT_COMPLETION,
            message=message,
            invocation_id=invocation_id,
            request_id=request_id,
            branch=branch,
            filter_key=filter_key,
            extensions={SEED_EXTENSION: True},
        ))
    yield from close(turn)
