"""Request building: the processors that turn an invocation into a model request.

Order (SPEC 4.1, the subset this release needs): instruction -> history projection ->
sanitize. The projection is the seam context governance extends (summary + events after
the boundary, tool-result placeholders); today it is the loaded window of the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from runs.core.invocation import Invocation
from runs.core.llm.base import ModelRequest, ToolSpec
from sessions_app.core.events import Event, Message, filter_matches


def event_to_message(event: Event) -> Message | None:
    """The model-visible message of a ledger event, or None when it has none."""
    if event.partial or event.is_runner_completion:
        return None
    message = event.message
    if message is None or not message.has_payload:
        if event.error is not None:
            return Message(role="assistant", content=f"type: {event.error.type}, message: {event.error.message}")
        return None
    if message.role == "system":
        return None
    return message


def project_history(events: Iterable[Event], *, filter_key: str) -> list[Message]:
    """The ledger events an agent's next request shows, as messages, oldest first."""
    messages: list[Message] = []
    for event in events:
        if not filter_matches(event.filter_key, filter_key):
            continue
        message = event_to_message(event)
        if message is not None:
            messages.append(message)
    return sanitize(messages)


def sanitize(messages: Sequence[Message]) -> list[Message]:
    """Make a history the OpenAI protocol accepts.

    Starts at the first user message, and keeps an assistant tool-call message only when
    every call has its result right after it (a run cancelled between the call and the
    result would otherwise make every later request fail); orphan results are dropped.
    """
    start = next((i for i, m in enumerate(messages) if m.role == "user"), len(messages))
    out: list[Message] = []
    i = start
    while i < len(messages):
        message = messages[i]
        if message.role == "tool":
            i += 1  # a result whose call was not kept
            continue
        if message.tool_calls:
            wanted = {call.id for call in message.tool_calls}
            j = i + 1
            results: list[Message] = []
            while j < len(messages) and messages[j].role == "tool":
                if messages[j].tool_call_id in wanted:
                    results.append(messages[j])
                j += 1
            if {r.tool_call_id for r in results} == wanted:
                out.append(message)
                out.extend(results)
            elif message.content:
                out.append(Message(role="assistant", content=message.content))
            i = j
            continue
        out.append(message)
        i += 1
    return out


def build_request(
    invocation: Invocation, *, instruction: str, tools: Sequence[ToolSpec]
) -> ModelRequest:
    """Instruction first, then the projected history (which ends with the current turn)."""
    messages: list[Message] = []
    if instruction:
        messages.append(Message(role="system", content=instruction))
    messages.extend(project_history(invocation.session.events, filter_key=invocation.filter_key))
    return ModelRequest(messages=tuple(messages), tools=tuple(tools))
