"""Summaries: the defaults, token counting and the transcript a summarizer reads (SPEC 3.4)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sessions_app.core.events import Event, Message, ToolCall

FULL_SESSION = ""
"""The filter key of the whole-session summary (SPEC 2.1)."""

# SPEC 3.4 / 3.5 / 14 defaults.
FALLBACK_CONTEXT_WINDOW = 8192
SUMMARY_BUDGET_RATIO = 0.7
SUMMARY_RETRY_RATIO = 0.5
CONTEXT_THRESHOLD_RATIO = 0.5
CONTEXT_THRESHOLD_MIN_TOKENS = 2000
DEFAULT_SUMMARY_TOKENS = 2048
MIN_SUMMARY_TOKENS = 256
"""Bounds of a chunked summary's default size (a quarter of the request room)."""
DEFAULT_SECTION_TOKENS = 1024
"""Transcript tokens of new events per section of an extractive summary (its granularity)."""
DEFAULT_MAX_EVENTS = 2000
"""Most events one summary run reads after the boundary; the rest wait for the next run."""
DEFAULT_LOCK_WAIT_S = 30.0
DEFAULT_JOB_TIMEOUT_S = 60.0


# -- tokens and the model-visible form of events ------------------------------------------


def _approx_text(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def _approx_message(message: Message) -> int:
    total = 3 + _approx_text(message.content) + message.part_tokens
    for call in message.tool_calls:
        total += _approx_text(call.name) + _approx_text(call.arguments) + 3
    return total


@dataclass(frozen=True, kw_only=True)
class Tokenizer:
    """How tokens are counted. The run layer injects tiktoken's (`runs.core.tokens`); the
    default here is SPEC's estimate, characters / 4."""

    count_text: Callable[[str], int] = _approx_text
    count_message: Callable[[Message], int] = _approx_message

    def count_messages(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


APPROX_TOKENIZER = Tokenizer()


def model_message(event: Event) -> Message | None:
    """The message a model is shown for a ledger event, or None when it shows nothing.

    Streaming deltas, completion markers, system rows and events without content show
    nothing; an error without content shows as `type: <t>, message: <m>` (SPEC 1.12).
    """
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


ToolCallFormatter = Callable[[ToolCall], str]
"""How a summarizer's transcript shows a tool call (SPEC 3.4); an empty string leaves it out."""
ToolResultFormatter = Callable[[Message], str]
"""How a summarizer's transcript shows a tool result (`tool_name`, `content`); empty: left out."""


def default_tool_call_text(call: ToolCall) -> str:
    """`[Called tool: NAME]`, or `[Called tool: NAME with args: ARGS]` when it has arguments."""
    arguments = call.arguments.strip()
    if not arguments or arguments == "{}":
        return f"[Called tool: {call.name}]"
    return f"[Called tool: {call.name} with args: {arguments}]"


def default_tool_result_text(message: Message) -> str:
    """`[TOOL returned: CONTENT]`; nothing for an empty result."""
    return f"[{message.tool_name or 'tool'} returned: {message.content}]" if message.content else ""


@dataclass(frozen=True, kw_only=True)
class TranscriptFormat:
    """The tool call and tool result formatters of a summarizer's transcript (SPEC 3.4)."""

    tool_call: ToolCallFormatter = default_tool_call_text
    tool_result: ToolResultFormatter = default_tool_result_text


DEFAULT_TRANSCRIPT = TranscriptFormat()


def conversation_lines(event: Event, transcript: TranscriptFormat = DEFAULT_TRANSCRIPT) -> list[str]:
    """An event as transcript lines for a summarizer (SPEC 3.4): `<author>: <text>`, a line
    per tool call, `[<tool> returned: <content>]` for a result (or what `transcript`'s
    formatters make of them); nothing when empty."""
    message = model_message(event)
    if message is None:
        return []
    author = event.author or "unknown"
    lines: list[str] = []
    for call in message.tool_calls:
        text = transcript.tool_call(call).strip()
        if text:
            lines.append(f"{author}: {text}")
    if message.role == "tool":
        text = transcript.tool_result(message).strip()
        if text:
            lines.append(f"{author}: {text}")
    elif message.content:
        lines.append(f"{author}: {message.content}")
    return lines


def previous_summary_line(text: str) -> str:
    """The previous summary, as the synthetic system event that opens a rolling summary."""
    return f"system: {text}"


def render_conversation(previous: str, events: Iterable[Event]) -> str:
    lines = [previous_summary_line(previous)] if previous else []
    for event in events:
        lines.extend(conversation_lines(event))
    return "\n".join(lines)
