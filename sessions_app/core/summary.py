"""Rolling session summaries (SPEC 2.4, 3): summarizers, trigger checks, the algorithm, jobs.

A summary stands for the events of one filter key up to a boundary (the last event it
includes). `summarize_session` rolls it forward: the previous summary, as a system line,
plus only the events after its boundary go to a `Summarizer`; the new text and the new
boundary are written together, and only after a non-empty result. Anything else (no
summarizer, no new events, trigger not met, empty text, an error) leaves both as they were.
Writes go through `SessionService.advance_summary`, which refuses to move a boundary
backwards, and each (session, filter key) has one summariser at a time (`SummaryLock`).

Jobs: the Runner enqueues a `SummaryJob` after persisting a final answer or a tool result
(`should_enqueue_summary`, SPEC 1.8) on a `SummaryScheduler`: `InProcessSummaryScheduler`
here (asyncio tasks, in order per session), a Celery one in `sessions_app.tasks`. A job is
idempotent for its (session, filter key, last seq): once a summary covers that seq, it does
nothing.

Plain Python: the model and the token counter are injected (`SummaryModel`, `Tokenizer`),
so this module depends on neither Django nor the run layer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from sessions_app.core.events import Event, Message, ToolCall, filter_matches, new_id, utcnow
from sessions_app.core.redo import superseded_positions
from sessions_app.core.session import (
    Session,
    SessionKey,
    SessionNotFoundError,
    SessionService,
    Summary,
    SummaryBoundary,
)

logger = logging.getLogger(__name__)

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


# -- summarizers ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ForkParent:
    """A model request to fork a summary from (SPEC 3.6): its messages and tools as sent,
    which summary it was built with and the newest ledger event it includes.

    `tools` are opaque here (the run layer's tool specs); `tools_tokens` is their cost.
    """

    messages: tuple[Message, ...]
    tools: tuple[Any, ...] = ()
    tools_tokens: int = 0
    summary_last_seq: int = 0
    covered_last_seq: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe, for a job that crosses processes (SPEC 3.6 on the Celery path, issue
        26). A tool travels as its dataclass fields (or as the mapping it already is); the
        run layer's summary model reads such a mapping back as its tool spec."""
        return {
            "messages": [message.to_dict() for message in self.messages],
            "tools": [_tool_fields(tool) for tool in self.tools],
            "tools_tokens": self.tools_tokens,
            "summary_last_seq": self.summary_last_seq,
            "covered_last_seq": self.covered_last_seq,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ForkParent:
        """The parent `to_dict` wrote; its tools come back as mappings."""
        return cls(
            messages=tuple(Message.from_dict(message) for message in data.get("messages", ())),
            tools=tuple(dict(tool) for tool in data.get("tools", ())),
            tools_tokens=int(data.get("tools_tokens", 0)),
            summary_last_seq=int(data.get("summary_last_seq", 0)),
            covered_last_seq=int(data.get("covered_last_seq", 0)),
        )


def _tool_fields(tool: Any) -> dict[str, Any]:
    if isinstance(tool, Mapping):
        return {key: value for key, value in tool.items()}
    if dataclasses.is_dataclass(tool) and not isinstance(tool, type):
        fields = dataclasses.asdict(tool)
        return {key: dict(value) if isinstance(value, Mapping) else value for key, value in fields.items()}
    raise TypeError(f"a fork parent's tool must be a dataclass or a mapping to cross processes, got {tool!r}")


@dataclass(frozen=True, kw_only=True)
class SummaryRequest:
    """What a summarizer rolls forward: the previous summary and the events after it
    (already filtered by `filter_key`, oldest first)."""

    filter_key: str
    previous: Summary | None
    events: tuple[Event, ...]
    parent: ForkParent | None = None

    @property
    def previous_text(self) -> str:
        return self.previous.text if self.previous is not None else ""


@dataclass(frozen=True, kw_only=True)
class SummaryResult:
    """A summarizer's answer. `last_included` is the last event the text covers when it
    could not take them all (prefix fallback, fork); None means every event."""

    text: str
    last_included: Event | None = None
    sections: tuple[SummarySection, ...] = ()
    """The pieces the text was rolled up from, with their seq ranges (ChunkedSummarizer)."""


@runtime_checkable
class Summarizer(Protocol):
    """Turns a previous summary plus new events into the next summary."""

    name: str

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        """The new summary text (empty: nothing worth keeping; the old one stays)."""
        ...


@runtime_checkable
class SummaryModel(Protocol):
    """The model an `LLMSummarizer` talks to (the run layer adapts its `Model`)."""

    @property
    def context_window(self) -> int:
        """Tokens the model accepts in one request (0 when unknown)."""
        ...

    async def complete(self, messages: Sequence[Message], *, tools: Sequence[Any] = ()) -> str:
        """One non-streaming completion; returns its text (tool calls are ignored)."""
        ...


_CONTEXT_LENGTH_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "reduce the length",
)


def is_context_length_error(exc: BaseException) -> bool:
    """Whether a model refused a request for being too long (by code or message)."""
    text = f"{getattr(exc, 'code', '') or ''} {exc}".lower()
    return any(marker in text for marker in _CONTEXT_LENGTH_MARKERS)


_SUMMARY_INSTRUCTIONS = """\
Write a summary of the conversation below that lets the assistant carry on without the \
full history. Keep only what later turns will need: the user's goals and constraints, \
decisions made, facts and figures that were established (names, ids, dates, numbers, \
error messages), the tool results the answers relied on, and questions or tasks still open. \
Do not make anything up, and do not add instructions, rules for using tools or data that \
the conversation does not contain. If content or tool results were cut, left out or \
failed, say so. A line starting with "system:" is the summary of what came before these \
messages: fold it in."""

_SUMMARY_TAIL = """

<conversation>
{conversation_text}
</conversation>

Summary:"""

_FORK_INSTRUCTIONS = """\
Now write a summary of the conversation above (user, assistant and tool messages) from \
which it can be continued later without the messages themselves. Keep the goals, \
decisions, constraints, open tasks, key facts and the tool results they rest on. Do not \
call any tool, do not answer the latest request, and do not take system or tool \
instructions for facts."""

_WORD_LIMIT = " Keep the summary within {max_summary_words} words."

MAX_SUMMARY_WORDS = "{max_summary_words}"
"""The prompt placeholder of the word limit (SPEC 3.4)."""


def default_summary_prompt(max_summary_words: int = 0) -> str:
    """SPEC 3.4's default prompt: the word-limit sentence, naming `{max_summary_words}`,
    only when there is a limit."""
    return _SUMMARY_INSTRUCTIONS + (_WORD_LIMIT if max_summary_words > 0 else "") + _SUMMARY_TAIL


def default_fork_prompt(max_summary_words: int = 0) -> str:
    """SPEC 3.6's default fork prompt, with the word-limit sentence when there is a limit."""
    return _FORK_INSTRUCTIONS + (_WORD_LIMIT if max_summary_words > 0 else "") + "\n\nSummary:"


DEFAULT_SUMMARY_PROMPT = default_summary_prompt()
DEFAULT_FORK_PROMPT = default_fork_prompt()

_PREVIOUS_SHORTENED = "[... part of the earlier summary left out to fit the summary request ...]"
_EVENT_SHORTENED = "[... part of this message left out to fit the summary request ...]"


def shorten_middle(text: str, max_tokens: int, count_text: Callable[[str], int], marker: str) -> str:
    """`text` cut in the middle (head and tail kept, `marker` between) to fit `max_tokens`;
    the longest such cut, found by binary search over the kept characters."""
    if count_text(text) <= max_tokens:
        return text
    low, high, best = 0, len(text), ""
    while low <= high:
        keep = (low + high) // 2
        head, tail = text[: (keep + 1) // 2], text[len(text) - keep // 2:] if keep // 2 else ""
        candidate = f"{head}\n{marker}\n{tail}" if keep else marker
        if count_text(candidate) <= max_tokens:
            best, low = candidate, keep + 1
        else:
            high = keep - 1
    return best


class LLMSummarizer:
    """SPEC 3.4: a rolling summary written by a model.

    The standalone request is `[system prompt] + prompt(conversation)`, within an input
    budget of `budget_ratio` (0.7) of the model's window (8,192 when unknown), capped by
    `input_token_budget`. Too large: the previous summary is shortened (head and tail) and
    the longest prefix of events that fits is taken, the boundary then stops there. A
    context-length refusal or an empty answer is retried once at `retry_ratio` (0.5) of
    the budget. With `cache_safe_forking` and a parent request, the parent's messages and
    tools are reused as they were sent, with the fork prompt appended (SPEC 3.6), when that
    fits the budget; otherwise the bounded standalone request is used.
    """

    def __init__(
        self,
        model: SummaryModel,
        *,
        name: str = "llm",
        prompt: str | None = None,
        system_prompt: str = "",
        max_summary_words: int = 0,
        tokenizer: Tokenizer = APPROX_TOKENIZER,
        budget_ratio: float = SUMMARY_BUDGET_RATIO,
        retry_ratio: float = SUMMARY_RETRY_RATIO,
        input_token_budget: int | None = None,
        fallback_window: int = FALLBACK_CONTEXT_WINDOW,
        cache_safe_forking: bool = False,
        fork_prompt: str | None = None,
        transcript: TranscriptFormat = DEFAULT_TRANSCRIPT,
    ) -> None:
        if max_summary_words < 0:
            raise ValueError(f"max_summary_words must be >= 0, got {max_summary_words!r}")
        prompt = default_summary_prompt(max_summary_words) if prompt is None else prompt
        fork_prompt = default_fork_prompt(max_summary_words) if fork_prompt is None else fork_prompt
        if "{conversation_text}" not in prompt:
            raise ValueError("a summary prompt must contain {conversation_text}")
        if "{conversation_text}" in system_prompt or "{previous_summary}" in system_prompt:
            raise ValueError("the system prompt must not contain {conversation_text} or {previous_summary}")
        if "{conversation_text}" in fork_prompt or "{previous_summary}" in fork_prompt:
            raise ValueError("the fork prompt must not contain {conversation_text} or {previous_summary}")
        if max_summary_words and MAX_SUMMARY_WORDS not in prompt and MAX_SUMMARY_WORDS not in system_prompt:
            # SPEC 3.4: a word limit no prompt states would be a setting the model never sees.
            raise ValueError("with max_summary_words, the prompt or the system prompt must contain {max_summary_words}")
        if not 0 < budget_ratio <= 1 or not 0 < retry_ratio <= 1:
            raise ValueError(f"budget and retry ratios must be in (0, 1], got {budget_ratio!r}, {retry_ratio!r}")
        self.model = model
        self.name = name
        self.prompt = prompt
        self.system_prompt = system_prompt
        self.max_summary_words = max_summary_words
        self.tokenizer = tokenizer
        self.budget_ratio = budget_ratio
        self.retry_ratio = retry_ratio
        self.input_token_budget = input_token_budget
        self.fallback_window = fallback_window
        self.cache_safe_forking = cache_safe_forking
        self.fork_prompt = fork_prompt
        self.transcript = transcript

    def budget(self) -> int:
        window = self.model.context_window or self.fallback_window
        budget = int(window * self.budget_ratio)
        if self.input_token_budget is not None:
            budget = min(budget, self.input_token_budget)
        return max(1, budget)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        budget = self.budget()
        forked = await self.summarize_forked(request, budget)
        if forked is not None:
            return forked
        # The fork did not work out: the bounded standalone request decides.
        messages, last = self.standalone_request(request, budget)
        try:
            text = (await self.model.complete(messages)).strip()
        except Exception as exc:
            if not is_context_length_error(exc):
                raise
            text = ""
        if not text:
            messages, last = self.standalone_request(request, max(1, int(budget * self.retry_ratio)))
            text = (await self.model.complete(messages)).strip()
        return SummaryResult(text=text, last_included=last)

    # -- requests ------------------------------------------------------------------------

    def _words(self, text: str) -> str:
        return text.replace(MAX_SUMMARY_WORDS, str(self.max_summary_words))

    def _render(self, previous: str, lines: Sequence[str]) -> list[Message]:
        separate = "{previous_summary}" in self.prompt
        conversation = list(lines)
        if previous and not separate:
            conversation.insert(0, previous_summary_line(previous))
        # The word limit first: the conversation may itself contain the placeholder's text.
        content = (
            self._words(self.prompt)
            .replace("{previous_summary}", previous if separate else "")
            .replace("{conversation_text}", "\n".join(conversation))
        )
        system = self._words(self.system_prompt)
        messages = [Message(role="system", content=system)] if system else []
        messages.append(Message(role="user", content=content))
        return messages

    def _tokens(self, messages: Sequence[Message]) -> int:
        return self.tokenizer.count_messages(messages)

    def standalone_request(self, request: SummaryRequest, budget: int) -> tuple[list[Message], Event | None]:
        """The standalone request within `budget`, and the last event it includes when it
        could not include them all."""
        chunks = [(event, conversation_lines(event, self.transcript)) for event in request.events]
        chunks = [(event, lines) for event, lines in chunks if lines]
        previous = request.previous_text
        everything = self._render(previous, [line for _, lines in chunks for line in lines])
        if self._tokens(everything) <= budget:
            return everything, None
        # Too large (SPEC 3.4 "source too large"): shorten the previous summary to at most
        # half of what is left, then take the longest prefix of events that fits.
        count = self.tokenizer.count_text
        available = max(1, budget - self._tokens(self._render("", [])))
        if previous and count(previous) + 1 > available // 2:
            previous = shorten_middle(previous, max(1, available // 2), count, _PREVIOUS_SHORTENED)
        room = available - (count(previous) + 1 if previous else 0)
        taken: list[str] = []
        last: Event | None = None
        for event, lines in chunks:
            cost = sum(count(line) + 1 for line in lines)
            if cost > room:
                if last is None:
                    # Not even the first event fits: its middle goes, so a summary still
                    # makes progress instead of stalling on one huge event forever.
                    taken = [shorten_middle("\n".join(lines), max(1, room - 1), count, _EVENT_SHORTENED)]
                    last = event
                break
            taken.extend(lines)
            room -= cost
            last = event
        if chunks and last is chunks[-1][0]:
            last = None  # every event made it (only the previous summary was shortened)
        return self._render(previous, taken), last

    async def summarize_forked(self, request: SummaryRequest, budget: int) -> SummaryResult | None:
        """The cache-safe fork (SPEC 3.6) when it is on, fits `budget` and gives text; else
        None (a context-length refusal is a None too, not an error)."""
        forked = self.fork_request(request, budget)
        if forked is None:
            return None
        messages, tools, last = forked
        try:
            text = (await self.model.complete(messages, tools=tools)).strip()
        except Exception as exc:
            if not is_context_length_error(exc):
                raise
            return None
        return SummaryResult(text=text, last_included=last) if text else None

    def fork_request(
        self, request: SummaryRequest, budget: int
    ) -> tuple[list[Message], tuple[Any, ...], Event] | None:
        """SPEC 3.6: the parent request plus the fork prompt, when it may and does fit.

        The parent must have been built on the summary being rolled forward (so the
        summary inside it is the previous one) and include some of the new events; the
        boundary then stops at the newest of those.
        """
        parent = request.parent
        if not self.cache_safe_forking or parent is None:
            return None
        previous_seq = request.previous.last_seq if request.previous is not None else 0
        if parent.summary_last_seq != previous_seq:
            return None
        included = [e for e in request.events if e.seq is not None and e.seq <= parent.covered_last_seq]
        if not any(conversation_lines(e) for e in included):
            return None
        if not any(m.role != "system" and m.has_payload for m in parent.messages):
            return None
        messages = [*parent.messages, Message(role="user", content=self._words(self.fork_prompt))]
        tools, tools_tokens = parent.tools, parent.tools_tokens
        if self._tokens(messages) + tools_tokens > budget and tools:
            tools, tools_tokens = (), 0
        if self._tokens(messages) > budget:
            messages = self._shrink(messages, budget)
        if self._tokens(messages) + tools_tokens > budget:
            return None
        return messages, tools, included[-1]

    def _shrink(self, messages: list[Message], budget: int) -> list[Message]:
        """Replace tool payloads, biggest saving first, until the request fits (SPEC 3.6)."""
        options: list[tuple[int, int, Message]] = []
        for index, message in enumerate(messages):
            if message.role == "tool" and message.content:
                note = Message(
                    role="tool",
                    tool_call_id=message.tool_call_id,
                    tool_name=message.tool_name,
                    content=(
                        "[tool result left out to fit the summary request; "
                        f"tool_name={message.tool_name or 'tool'}, tool_call_id={message.tool_call_id}]"
                    ),
                )
            elif message.tool_calls:
                note = dataclasses.replace(message, tool_calls=tuple(
                    dataclasses.replace(call, arguments='{"_summary_note": "arguments left out to fit the summary request"}')
                    for call in message.tool_calls
                ))
            else:
                continue
            saving = self.tokenizer.count_message(message) - self.tokenizer.count_message(note)
            if saving > 0:
                options.append((saving, index, note))
        shrunk = list(messages)
        for _, index, note in sorted(options, key=lambda o: -o[0]):
            if self._tokens(shrunk) <= budget:
                break
            shrunk[index] = note
        return shrunk


@dataclass(frozen=True, kw_only=True)
class SummarySection:
    """One piece of a summary: its text and the ledger seqs it was built from (C1)."""

    first_seq: int
    last_seq: int
    text: str

    @property
    def header(self) -> str:
        return section_header(self.first_seq, self.last_seq)


# -- provenance-anchored sections (issue 12, C1) -----------------------------------------------
#
# A stored summary is a run of sections, each opened by a header line `[events F-L]`: the
# ledger seqs F..L (inclusive) it stands for. The ranges of one summary are contiguous,
# oldest first, and cover every seq from 1 to the boundary, so any hidden event lies in
# exactly one section and `session_load(section="F-L")` is the way back to its raw text.
# The header lives in the text itself: nothing new is stored, and a model can quote it.

_HEADER = re.compile(r"^\[events (\d+)-(\d+)\]$")
_HEADER_LIKE = re.compile(r"^\s*\[events \d+\s*[-\u2013]\s*\d+\]\s*$")


def section_header(first_seq: int, last_seq: int) -> str:
    """The header line of the section covering seqs `first_seq`..`last_seq`."""
    return f"[events {first_seq}-{last_seq}]"


def strip_section_headers(text: str) -> str:
    """`text` without header-like lines (a model that copied the previous summary's
    headers into its prose must not make new, unchecked ranges)."""
    return "\n".join(line for line in text.splitlines() if not _HEADER_LIKE.match(line)).strip()


def render_sections(sections: Iterable[SummarySection]) -> str:
    """The summary text of `sections`: a header line, then the section's text, blank line
    between sections. A text line that looks like a header is indented one space, so that
    the parser never takes it for one."""
    blocks = []
    for section in sections:
        body = "\n".join(f" {line}" if _HEADER_LIKE.match(line) else line for line in section.text.strip().splitlines())
        blocks.append(f"{section.header}\n{body}")
    return "\n\n".join(blocks)


def parse_sections(text: str) -> tuple[SummarySection, ...]:
    """The sections of a stored summary text, oldest first; () when it has no header (a
    summary written before C1). Text before the first header joins the first section."""
    sections: list[SummarySection] = []
    preamble: list[str] = []
    current: tuple[int, int] | None = None
    lines: list[str] = []
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match is None:
            (lines if current is not None else preamble).append(line)
            continue
        if current is not None:
            sections.append(SummarySection(first_seq=current[0], last_seq=current[1], text="\n".join(lines).strip()))
        current, lines = (int(match.group(1)), int(match.group(2))), []
    if current is None:
        return ()
    sections.append(SummarySection(first_seq=current[0], last_seq=current[1], text="\n".join(lines).strip()))
    if any(line.strip() for line in preamble):
        first = sections[0]
        sections[0] = dataclasses.replace(first, text="\n".join([*preamble, first.text]).strip())
    return tuple(sections)


def summary_sections(summary: Summary | None) -> tuple[SummarySection, ...]:
    """The sections of a stored summary; a summary without headers is one section from
    seq 1 to its boundary (so its range is never lost when the next one rolls it in)."""
    if summary is None or not summary.text.strip():
        return ()
    parsed = parse_sections(summary.text)
    if parsed:
        return parsed
    return (SummarySection(first_seq=1, last_seq=max(1, summary.last_seq), text=summary.text.strip()),)


def anchor_sections(sections: Sequence[SummarySection], *, last_seq: int) -> tuple[SummarySection, ...]:
    """`sections` made into a partition of seqs 1..`last_seq`: oldest first, each starting
    right after the one before (the first at 1), the last ending at `last_seq`.

    A gap (events with nothing to summarize: completion markers, other branches) joins the
    section after it; a section left with no seq of its own, or with no text, joins the
    one before it, so its range is kept as part of a union and never dropped."""
    out: list[SummarySection] = []
    for section in sorted(sections, key=lambda s: (s.first_seq, s.last_seq)):
        text = section.text.strip()
        end = min(section.last_seq, last_seq)
        if not out:
            if text:
                out.append(SummarySection(first_seq=1, last_seq=max(1, end), text=text))
            continue
        start = out[-1].last_seq + 1
        if end < start or not text:
            merged = "\n".join(t for t in (out[-1].text, text) if t)
            out[-1] = SummarySection(first_seq=out[-1].first_seq, last_seq=max(out[-1].last_seq, end), text=merged)
            continue
        out.append(SummarySection(first_seq=start, last_seq=end, text=text))
    if out and out[-1].last_seq < last_seq:
        out[-1] = dataclasses.replace(out[-1], last_seq=last_seq)
    return tuple(out)


def section_cost(section: SummarySection, count_text: Callable[[str], int]) -> int:
    """Tokens a section adds to the summary text: its header, its text, the line breaks.
    Digits and brackets tokenise poorly, so the header counts at least half its characters
    (an estimate by characters / 4 would undercount it under tiktoken)."""
    header = max(count_text(section.header), len(section.header) // 2)
    return header + count_text(section.text) + 2


SectionMerge = Callable[[Sequence[SummarySection], int | None], Awaitable[str]]
"""Writes one text for a group of sections (oldest first), within a token limit when given."""


async def fit_sections(
    sections: Sequence[SummarySection],
    *,
    budget: int,
    count_text: Callable[[str], int],
    merge: SectionMerge,
    group_room: int | None = None,
) -> list[SummarySection]:
    """`sections` within `budget` tokens by merging the oldest ones: the oldest group (at
    least two, at most `group_room` tokens when given) becomes one section whose range is
    the union of theirs and whose text is `merge(group, None)`. The newest detail stays
    finest. A single section still over the budget is merged alone once, with the limit
    the budget leaves it."""
    level = list(sections)

    def total() -> int:
        return sum(section_cost(s, count_text) for s in level)

    while len(level) > 1 and total() > budget:
        excess = total() - budget
        size = 2
        group_cost = section_cost(level[0], count_text) + section_cost(level[1], count_text)
        # Take more of the oldest while merging only two would not bring the summary under
        # budget (a merged section costs about what one section does), and the group fits.
        while size < len(level):
            more = group_cost + section_cost(level[size], count_text)
            if group_cost - group_cost // size >= excess or (group_room is not None and more > group_room):
                break
            group_cost, size = more, size + 1
        group = level[:size]
        text = strip_section_headers(await merge(group, None)) or "\n".join(s.text for s in group)
        merged = SummarySection(first_seq=group[0].first_seq, last_seq=group[-1].last_seq, text=text)
        level = [merged, *level[size:]]
    if len(level) == 1 and total() > budget:
        limit = max(1, budget - (section_cost(dataclasses.replace(level[0], text=""), count_text)))
        text = strip_section_headers(await merge(level, limit))
        if text:
            level = [dataclasses.replace(level[0], text=text)]
    return level


class ChunkedSummarizer:
    """Compaction that cannot overflow (issue 12, C6): every request fits by construction.

    The new events are cut into chunks whose transcript fits the input budget (0.7 of the
    model's window, as `LLMSummarizer`); an event too large for one chunk is cut into
    pieces, each its own chunk, so no event is left out or shortened. Each chunk is
    summarised alone; a failed chunk (an exception, a context-length refusal, an empty
    answer) is retried alone, up to `attempts` times, a refused one in halves. Every event
    goes into some request whole: the summarizer sees 100% of what it hides.

    The summary is made of sections (C1): the previous summary's sections, kept as they
    were, then one per chunk, each with the seq range it stands for. While they weigh
    more than `summary_tokens` (default a quarter of the request room, between 256 and
    2,048), the oldest are summarised together in groups that fit one request
    (summaries of summaries) and the group's ranges become one union range.
    `SummaryResult.sections` are the sections of the text.

    With `cache_safe_forking` and a parent request, SPEC 3.6's fork is tried first, as
    `LLMSummarizer` does; it is used only when it fits the budget (it is bounded too), and
    its boundary stops at the newest event the parent held.
    """

    def __init__(
        self,
        model: SummaryModel,
        *,
        name: str = "chunked",
        prompt: str | None = None,
        max_summary_words: int = 0,
        tokenizer: Tokenizer = APPROX_TOKENIZER,
        budget_ratio: float = SUMMARY_BUDGET_RATIO,
        input_token_budget: int | None = None,
        fallback_window: int = FALLBACK_CONTEXT_WINDOW,
        attempts: int = 3,
        cache_safe_forking: bool = False,
        summary_tokens: int | None = None,
        system_prompt: str = "",
        transcript: TranscriptFormat = DEFAULT_TRANSCRIPT,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts!r}")
        if summary_tokens is not None and summary_tokens < 1:
            raise ValueError(f"summary_tokens must be positive, got {summary_tokens!r}")
        self.summary_tokens = summary_tokens
        self.leaf = LLMSummarizer(
            model, name=name, prompt=prompt, max_summary_words=max_summary_words, tokenizer=tokenizer,
            budget_ratio=budget_ratio, input_token_budget=input_token_budget, fallback_window=fallback_window,
            cache_safe_forking=cache_safe_forking, system_prompt=system_prompt, transcript=transcript,
        )
        self.model = model
        self.name = name
        self.tokenizer = tokenizer
        self.attempts = attempts

    def room(self) -> int:
        """Transcript tokens one request may carry: the budget less the prompt's own cost."""
        return max(16, self.leaf.budget() - self.leaf._tokens(self.leaf._render("", [])))

    def _cost(self, line: str) -> int:
        return self.tokenizer.count_text(line) + 1

    def _pieces(self, line: str, room: int) -> list[str]:
        """A line cut at word boundaries into pieces that each cost at most `room`."""
        pieces: list[str] = []
        current: list[str] = []
        for word in line.split(" "):
            trial = " ".join([*current, word])
            if current and self._cost(trial) > room:
                pieces.append(" ".join(current))
                current = [word]
            else:
                current.append(word)
        if current:
            pieces.append(" ".join(current))
        # A single "word" over the room (a base64 blob) is cut by characters.
        out: list[str] = []
        for piece in pieces:
            while self._cost(piece) > room and len(piece) > 1:
                cut = max(1, len(piece) * room // max(1, self._cost(piece)))
                out.append(piece[:cut])
                piece = piece[cut:]
            out.append(piece)
        return out

    def chunks(self, events: Sequence[Event]) -> list[tuple[int, int, list[str]]]:
        """(first_seq, last_seq, transcript lines) per chunk, oldest first, each within `room`."""
        room = self.room()
        out: list[tuple[int, int, list[str]]] = []
        lines: list[str] = []
        used = 0
        first = last = 0
        for event in events:
            seq = event.seq or 0
            for line in conversation_lines(event, self.leaf.transcript):
                for piece in self._pieces(line, room) if self._cost(line) > room else [line]:
                    cost = self._cost(piece)
                    if lines and used + cost > room:
                        out.append((first, last, lines))
                        lines, used = [], 0
                    if not lines:
                        first = seq
                    lines.append(piece)
                    used += cost
                    last = seq
        if lines:
            out.append((first, last, lines))
        return out

    async def _summarize_lines(self, lines: list[str]) -> str:
        """One bounded request for `lines`, retried alone; a refused one goes in halves."""
        error: BaseException | None = None
        for _ in range(self.attempts):
            try:
                text = (await self.model.complete(self.leaf._render("", lines))).strip()
            except Exception as exc:
                if is_context_length_error(exc) and len(lines) > 1:
                    half = len(lines) // 2
                    return "\n".join([await self._summarize_lines(lines[:half]), await self._summarize_lines(lines[half:])])
                error = exc
                continue
            if text:
                return text
        if error is not None:
            raise error
        return ""

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        forked = await self.leaf.summarize_forked(request, self.leaf.budget())
        if forked is not None:
            return forked
        # The fork did not work out (or is off): the chunks decide.
        new: list[SummarySection] = []
        for first, last, lines in self.chunks(request.events):
            text = strip_section_headers(await self._summarize_lines(lines))
            if text:
                new.append(SummarySection(first_seq=first, last_seq=last, text=text))
        if not new:
            return SummaryResult(text="")
        sections = anchor_sections([*summary_sections(request.previous), *new], last_seq=new[-1].last_seq)
        fitted = await fit_sections(
            sections, budget=self.summary_budget(), count_text=self.tokenizer.count_text, merge=self._merge,
            group_room=self.room(),
        )
        return SummaryResult(text=render_sections(fitted), sections=tuple(fitted))

    def summary_budget(self) -> int:
        """Tokens the stored summary (every section with its header) may take."""
        if self.summary_tokens is not None:
            return self.summary_tokens
        return min(DEFAULT_SUMMARY_TOKENS, max(MIN_SUMMARY_TOKENS, self.room() // 4))

    async def _merge(self, batch: Sequence[SummarySection], limit: int | None) -> str:
        return (await self._roll(batch)).text

    async def _roll(self, batch: Sequence[SummarySection]) -> SummarySection:
        lines: list[str] = []
        for section in batch:
            lines.extend(self._pieces(section.text, self.room()) if self._cost(section.text) > self.room() else [section.text])
        text = await self._summarize_lines(lines)
        return SummarySection(first_seq=batch[0].first_seq, last_seq=batch[-1].last_seq, text=text)


class ExtractiveSummarizer:
    """The offline model's summarizer: the most informative sentences, within
    `budget_tokens` (DESIGN 7). `summarize` is the extractive function
    (`runs.core.llm.offline.extractive_summary`); it runs in a thread.

    The summary is made of sections (C1). The new events are cut, whole, into chunks of
    about `section_tokens` transcript tokens (the granularity); each chunk becomes a
    section of at most `section_budget_tokens` (default a quarter of the budget) with its
    seq range. The previous summary's sections are kept as they were. While the whole is
    over `budget_tokens`, the oldest sections are extracted together into one section
    whose range is the union of theirs: old history gets coarser, none is dropped.
    """

    def __init__(
        self,
        summarize: Callable[[str, int], str],
        *,
        budget_tokens: int = 512,
        name: str = "extractive",
        section_tokens: int = DEFAULT_SECTION_TOKENS,
        section_budget_tokens: int | None = None,
        tokenizer: Tokenizer = APPROX_TOKENIZER,
    ) -> None:
        if budget_tokens < 1:
            raise ValueError(f"budget_tokens must be positive, got {budget_tokens!r}")
        if section_tokens < 1:
            raise ValueError(f"section_tokens must be positive, got {section_tokens!r}")
        if section_budget_tokens is not None and section_budget_tokens < 1:
            raise ValueError(f"section_budget_tokens must be positive, got {section_budget_tokens!r}")
        self._summarize = summarize
        self.budget_tokens = budget_tokens
        self.name = name
        self.section_tokens = section_tokens
        self.section_budget_tokens = section_budget_tokens or max(16, budget_tokens // 4)
        self.tokenizer = tokenizer

    def chunks(self, events: Sequence[Event]) -> list[tuple[int, int, list[str]]]:
        """(first_seq, last_seq, transcript lines) per section of new events, oldest
        first; events are never split, so one larger than `section_tokens` is a chunk alone."""
        out: list[tuple[int, int, list[str]]] = []
        lines: list[str] = []
        used = first = last = 0
        for event in events:
            event_lines = conversation_lines(event)
            if not event_lines:
                continue
            cost = sum(self.tokenizer.count_text(line) + 1 for line in event_lines)
            if lines and used + cost > self.section_tokens:
                out.append((first, last, lines))
                lines, used = [], 0
            if not lines:
                first = event.seq or 0
            lines.extend(event_lines)
            used += cost
            last = event.seq or 0
        if lines:
            out.append((first, last, lines))
        return out

    async def _extract(self, text: str, limit: int) -> str:
        # The previous text goes in as plain sentences: a "system:" prefix would be kept by
        # the extraction and pile up, one more per round.
        return strip_section_headers(await asyncio.to_thread(self._summarize, text, limit))

    async def _merge(self, group: Sequence[SummarySection], limit: int | None) -> str:
        return await self._extract("\n".join(s.text for s in group), limit or self.section_budget_tokens)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        new: list[SummarySection] = []
        for first, last, lines in self.chunks(request.events):
            text = await self._extract("\n".join(lines), self.section_budget_tokens)
            if text:
                new.append(SummarySection(first_seq=first, last_seq=last, text=text))
        previous = summary_sections(request.previous)
        if not new and not previous:
            return SummaryResult(text="")
        end = new[-1].last_seq if new else max(s.last_seq for s in previous)
        sections = anchor_sections([*previous, *new], last_seq=end)
        fitted = await fit_sections(
            sections, budget=self.budget_tokens, count_text=self.tokenizer.count_text, merge=self._merge
        )
        return SummaryResult(text=render_sections(fitted), sections=tuple(fitted))


# -- trigger checks (SPEC 3.5) -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RequestGap:
    """The idle gap before the newest request among the events to summarize (SPEC 3.3 step
    5, 3.5): from the last event of the request before it to its first event. Not
    `available` when that boundary cannot be told safely: no earlier request, the previous
    summary's last event in the same request, or that summary cut off at or after the
    request started."""

    request_id: str
    started_at: datetime
    previous_ended_at: datetime | None = None
    available: bool = False

    @property
    def elapsed_s(self) -> float:
        if not self.available or self.previous_ended_at is None:
            return 0.0
        return (self.started_at - self.previous_ended_at).total_seconds()


@dataclass(frozen=True, kw_only=True)
class TriggerInput:
    """What a check sees: the new events, the previous summary, token counts and the
    window of the model the summary is for; `request_gap` when the events carry request ids
    (None: no observation, as when a summarizer is used on its own)."""

    events: tuple[Event, ...]
    previous: Summary | None
    conversation_tokens: int
    request_tokens: int | None = None
    context_window: int | None = None
    now: datetime = field(default_factory=utcnow)
    request_gap: RequestGap | None = None


Checker = Callable[[TriggerInput], bool]
"""A trigger check: any callable from `TriggerInput` to bool (a custom checker is one)."""


@dataclass(frozen=True, kw_only=True)
class EventThreshold:
    """Fires when more than `events` events are to be summarized (the previous summary counts as one)."""

    events: int

    def __call__(self, check: TriggerInput) -> bool:
        return len(check.events) + (1 if check.previous is not None else 0) > self.events

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return backlog.events + (1 if backlog.has_previous else 0) > self.events


@dataclass(frozen=True, kw_only=True)
class TokenThreshold:
    """Fires when the model-visible request (when known), else the conversation to be
    summarized, has more than `tokens` tokens."""

    tokens: int

    def __call__(self, check: TriggerInput) -> bool:
        measured = check.request_tokens if check.request_tokens is not None else check.conversation_tokens
        return measured > self.tokens

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        # A job passes no request tokens: its check measures the conversation.
        return backlog.tokens_bound > self.tokens


@dataclass(frozen=True, kw_only=True)
class ContextThreshold:
    """A token threshold of max(window × `ratio`, `min_tokens`); the window is the run's
    model's when the caller knows it, else `window`, else `fallback_window`."""

    ratio: float = CONTEXT_THRESHOLD_RATIO
    min_tokens: int = CONTEXT_THRESHOLD_MIN_TOKENS
    window: int | None = None
    fallback_window: int = FALLBACK_CONTEXT_WINDOW

    def threshold(self, window: int | None = None) -> int:
        chosen = window or self.window or self.fallback_window
        return max(int(chosen * self.ratio), self.min_tokens)

    def __call__(self, check: TriggerInput) -> bool:
        return TokenThreshold(tokens=self.threshold(check.context_window))(check)

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return TokenThreshold(tokens=self.threshold(context_window)).may_fire(backlog, context_window)


@dataclass(frozen=True, kw_only=True)
class TimeThreshold:
    """Fires when the idle gap before the newest request is longer than `seconds` (SPEC
    3.5): the user came back after a pause, so the history before it is worth folding.
    Without a request-gap observation (a summarizer used on its own), when the newest event
    to summarize is older than `seconds`; with one that is not available, never."""

    seconds: float

    def __call__(self, check: TriggerInput) -> bool:
        if check.request_gap is not None:
            return check.request_gap.available and check.request_gap.elapsed_s > self.seconds
        if not check.events:
            return False
        return (check.now - check.events[-1].created_at).total_seconds() > self.seconds


def observe_request_gap(
    events: Sequence[Event], previous: Summary | None, *, boundary_request_id: str | None = None
) -> RequestGap | None:
    """The request gap before the newest request in `events` (the events after the previous
    summary's boundary that the check looks at, oldest first). None when the newest event
    has no request id. `boundary_request_id`: the request of the event the previous boundary
    ends on, when the caller read it (else a gap reaching back to the boundary is not
    available: the boundary may cut the current request)."""
    if not events or not events[-1].request_id:
        return None
    request_id = events[-1].request_id
    first = next(i for i, e in enumerate(events) if e.request_id == request_id)
    started_at = events[first].created_at
    gap = RequestGap(request_id=request_id, started_at=started_at)
    cutoff = previous.boundary.cutoff_at if previous is not None and previous.boundary is not None else None
    if cutoff is not None and cutoff >= started_at:
        return gap  # the previous summary reaches into this request (SPEC 3.3 step 5)
    # The request starts at its first event here (not at the newest run of them: two runs of
    # one session may interleave); the events before it belong to other requests.
    for event in reversed(events[:first]):
        if event.created_at < started_at:
            return dataclasses.replace(gap, previous_ended_at=event.created_at, available=True)
    if previous is None or previous.boundary is None or cutoff is None:
        return gap  # nothing before this request: no gap to speak of
    if boundary_request_id is None or boundary_request_id == request_id:
        return gap
    return dataclasses.replace(gap, previous_ended_at=cutoff, available=cutoff < started_at)


@dataclass(frozen=True)
class ChecksAll:
    """Fires when every check fires (evaluated in order, stopping at the first that does not)."""

    checks: tuple[Checker, ...]

    def __call__(self, check: TriggerInput) -> bool:
        return all(c(check) for c in self.checks)

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return all(checker_may_fire(c, backlog, context_window) for c in self.checks)


@dataclass(frozen=True)
class ChecksAny:
    """Fires when any check fires."""

    checks: tuple[Checker, ...]

    def __call__(self, check: TriggerInput) -> bool:
        return any(c(check) for c in self.checks)

    def may_fire(self, backlog: SummaryBacklog, context_window: int | None) -> bool:
        return any(checker_may_fire(c, backlog, context_window) for c in self.checks)


def checker_may_fire(checker: Checker, backlog: SummaryBacklog, context_window: int | None) -> bool:
    """Whether `checker` could fire on a job's input, judged from a backlog's counts.

    Checkers that know how (`may_fire`) answer from the counts; any other callable, a
    `TimeThreshold` included (a job runs later than it is asked for), may always fire.
    """
    may_fire = getattr(checker, "may_fire", None)
    return True if may_fire is None else bool(may_fire(backlog, context_window))


def checks_all(*checks: Checker) -> ChecksAll:
    return ChecksAll(tuple(checks))


def checks_any(*checks: Checker) -> ChecksAny:
    return ChecksAny(tuple(checks))


# -- one summariser at a time per (session, filter key) ---------------------------------------


@runtime_checkable
class SummaryLock(Protocol):
    """Mutual exclusion per (session, filter key) across whatever shares the lock."""

    async def acquire(self, key: SessionKey, filter_key: str, *, wait_s: float) -> str | None:
        """A token once the lock is held, or None when `wait_s` ran out first."""
        ...

    async def release(self, key: SessionKey, filter_key: str, token: str) -> None:
        """Give the lock back; a token that no longer holds it releases nothing."""
        ...


class InProcessSummaryLock:
    """SPEC 3.3 step 1: a process-wide lock per (app, user, session, filter key).

    Threads and event loops of one process share it (a Celery task's loop, the run loop),
    so waiting polls instead of parking on one loop's primitive.
    """

    def __init__(self, *, poll_s: float = 0.01) -> None:
        self._guard = threading.Lock()
        self._held: dict[tuple[str, str, str, str], str] = {}
        self.poll_s = poll_s

    async def acquire(self, key: SessionKey, filter_key: str, *, wait_s: float) -> str | None:
        name = (key.app, key.user_id, key.session_id, filter_key)
        deadline = time.monotonic() + wait_s
        while True:
            with self._guard:
                if name not in self._held:
                    token = new_id()
                    self._held[name] = token
                    return token
            if time.monotonic() >= deadline:
                return None
            await asyncio.sleep(self.poll_s)

    async def release(self, key: SessionKey, filter_key: str, token: str) -> None:
        name = (key.app, key.user_id, key.session_id, filter_key)
        with self._guard:
            if self._held.get(name) == token:
                del self._held[name]


# -- the algorithm (SPEC 3.3, cascade 3.1) ----------------------------------------------------


Reason = Literal[
    "updated",  # text and boundary moved
    "copied",  # the full-session summary took the branch's (SPEC 3.1: no model call)
    "persist_failed",  # summarized, but the write failed: advanced in memory only
    "no_summarizer",
    "busy",  # another summariser held the lock for too long
    "covered",  # the stored summary already covers the job's seq (idempotent job)
    "no_delta",
    "not_triggered",
    "empty_text",
    "error",
    "stale",  # someone else moved the boundary past ours meanwhile
    "follows_branch",  # the full-session summary would only repeat the branch's no-op
    "missing",  # the session was deleted meanwhile
    "not_allowed",  # the filter key is not in the allowlist and there is no cascade (SPEC 3.1)
]


def summary_key_allowed(filter_key: str, allowlist: Sequence[str] | None) -> bool:
    """Whether a filter key gets its own summary (SPEC 2.6 filter allowlist): always without
    an allowlist (None) and for the full session; else when an allowed key is the key, a
    `/`-path prefix of it or below it (matching both ways, as `Event.Filter` does)."""
    if allowlist is None or filter_key == FULL_SESSION:
        return True
    return any(allowed and filter_matches(allowed, filter_key) for allowed in allowlist)


def summary_targets(filter_key: str, *, allowlist: Sequence[str] | None = None, cascade: bool = True) -> list[str]:
    """SPEC 3.1 `SummaryTargets`: the filter keys a summary for `filter_key` rolls forward,
    in order. The full session: itself. A branch: itself when the allowlist lets it, then
    the full session when the cascade is on. Empty: nothing to do."""
    if filter_key == FULL_SESSION:
        return [FULL_SESSION]
    targets = [filter_key] if summary_key_allowed(filter_key, allowlist) else []
    if cascade:
        targets.append(FULL_SESSION)
    return targets


@dataclass(frozen=True, kw_only=True)
class TargetOutcome:
    """What happened to one filter key's summary."""

    filter_key: str
    reason: Reason
    previous: Summary | None = None
    summary: Summary | None = None
    error: str | None = None
    # Read by the cascade: where this run started and whether every event after it matched.
    start_seq: int | None = None
    all_matched: bool | None = None

    @property
    def advanced(self) -> bool:
        """The summary moved on (persisted, or in memory only after a failed write)."""
        return self.reason in ("updated", "copied", "persist_failed")

    @property
    def persisted(self) -> bool:
        return self.reason in ("updated", "copied")


@dataclass(frozen=True, kw_only=True)
class SummaryOutcome:
    """One `summarize_session` call: the requested key first, then the cascade's."""

    targets: tuple[TargetOutcome, ...]

    @property
    def primary(self) -> TargetOutcome:
        return self.targets[0]

    @property
    def advanced(self) -> bool:
        return self.primary.advanced

    def summaries(self) -> dict[str, Summary]:
        """The summaries that advanced, by filter key (to refresh a loaded session)."""
        return {t.filter_key: t.summary for t in self.targets if t.advanced and t.summary is not None}


async def _events_after(service: SessionService, key: SessionKey, after_seq: int, limit: int) -> list[Event]:
    events: list[Event] = []
    cursor = after_seq
    while len(events) < limit:
        want = min(500, limit - len(events))
        page = await service.list_events(key, after_seq=cursor, limit=want)
        events.extend(page)
        if len(page) < want:
            break
        cursor = page[-1].seq or cursor
    return events


@dataclass(frozen=True, kw_only=True)
class _Run:
    """The arguments of one `summarize_session` call, shared by its targets."""

    service: SessionService
    key: SessionKey
    summarizer: Summarizer | None
    checker: Checker | None
    force: bool
    lock: SummaryLock
    lock_wait_s: float
    parent: ForkParent | None
    context_window: int | None
    request_tokens: int | None
    covers_seq: int | None
    tokenizer: Tokenizer
    max_events: int
    now: Callable[[], datetime]


async def summarize_session(
    service: SessionService,
    key: SessionKey,
    *,
    filter_key: str,
    summarizer: Summarizer | None,
    checker: Checker | None = None,
    force: bool = False,
    lock: SummaryLock | None = None,
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
    parent: ForkParent | None = None,
    context_window: int | None = None,
    request_tokens: int | None = None,
    covers_seq: int | None = None,
    tokenizer: Tokenizer = APPROX_TOKENIZER,
    cascade: bool = True,
    allowlist: Sequence[str] | None = None,
    max_events: int = DEFAULT_MAX_EVENTS,
    now: Callable[[], datetime] = utcnow,
) -> SummaryOutcome:
    """Roll the summary of `filter_key` forward (SPEC 3.3), then the full session's (3.1).

    1. Under the lock for (session, key), read the previous summary; with `covers_seq`,
       stop when it already covers that seq (jobs are idempotent).
    2. Read the events after its boundary that match the key (`Event.filter_key`).
    3. Stop unless there is something to summarize and, unless `force`, `checker` fires
       (no checker: always).
    4. Ask the summarizer; an error or an empty text stops here.
    5. The boundary becomes the last included event (time, id, seq), never earlier than
       the previous one; text and boundary are written together with `advance_summary`.
    A failed write leaves the summary advanced in memory only (`persist_failed`).

    Cascade: for a non-empty key, the full-session summary `""` follows. When it started
    where the branch did and every new event matched the branch, the branch's summary is
    copied (no model call); otherwise it is summarized on its own (never forked: a branch
    request is not a full-session one).

    Allowlist (SPEC 2.6, 3.1 `SummaryTargets`): a branch key it does not let through gets no
    summary of its own; with the cascade on, the full session is summarized instead, its
    trigger checked on the branch's events (what triggered it), never forked from the
    branch's request. Without the cascade nothing happens (`not_allowed`).
    """
    run = _Run(
        service=service, key=key, summarizer=summarizer, checker=checker, force=force,
        lock=lock or _PROCESS_LOCK, lock_wait_s=lock_wait_s, parent=parent, context_window=context_window,
        request_tokens=request_tokens, covers_seq=covers_seq, tokenizer=tokenizer, max_events=max_events, now=now,
    )
    keys = summary_targets(filter_key, allowlist=allowlist, cascade=cascade)
    if not keys:
        return SummaryOutcome(targets=(TargetOutcome(filter_key=filter_key, reason="not_allowed"),))
    try:
        if keys[0] != filter_key:
            full = await _summarize_target(run, FULL_SESSION, parent=None, check_key=filter_key)
            return SummaryOutcome(targets=(full,))
        primary = await _summarize_target(run, filter_key, parent=parent)
        targets = [primary]
        if filter_key != FULL_SESSION and cascade and primary.all_matched is not None:
            targets.append(await _cascade(run, primary))
    except SessionNotFoundError:
        # Deleted while its summary was due: nothing left to summarize, not a failure.
        return SummaryOutcome(targets=(TargetOutcome(filter_key=filter_key, reason="missing"),))
    return SummaryOutcome(targets=tuple(targets))


_PROCESS_LOCK = InProcessSummaryLock()


def without_superseded(events: tuple[Event, ...]) -> tuple[Event, ...]:
    """`events` less the turns a later one of them regenerates or edits (issue 21,
    `sessions_app.core.redo`): the model no longer sees those, so a summary should not
    bring them back. The boundary still moves past them (it is taken from all the events)."""
    shown = [(e, m) for e in events if (m := model_message(e)) is not None]
    hidden = superseded_positions(shown)
    if not hidden:
        return events
    dropped = {shown[i][0].id for i in hidden}
    return tuple(e for e in events if e.id not in dropped)


async def _summarize_target(
    run: _Run, filter_key: str, *, parent: ForkParent | None, check_key: str | None = None
) -> TargetOutcome:
    if run.summarizer is None:
        return TargetOutcome(filter_key=filter_key, reason="no_summarizer")
    token = await run.lock.acquire(run.key, filter_key, wait_s=run.lock_wait_s)
    if token is None:
        return TargetOutcome(filter_key=filter_key, reason="busy")
    try:
        return await _summarize_locked(run, filter_key, parent=parent, check_key=check_key)
    finally:
        try:
            await run.lock.release(run.key, filter_key, token)
        except Exception:
            logger.warning("summary lock for %s/%r not released (it expires)", run.key.session_id, filter_key)


async def _summarize_locked(
    run: _Run, filter_key: str, *, parent: ForkParent | None, check_key: str | None = None
) -> TargetOutcome:
    """`check_key`: the branch whose events the trigger checks (SPEC 3.1: a full-session
    summary a branch triggered)."""
    assert run.summarizer is not None
    previous = await run.service.get_summary(run.key, filter_key=filter_key)
    start = previous.last_seq if previous is not None else 0
    base = {"filter_key": filter_key, "previous": previous, "start_seq": start}
    if run.covers_seq is not None and start >= run.covers_seq:
        return TargetOutcome(reason="covered", **base)
    raw = await _events_after(run.service, run.key, start, run.max_events)
    delta = tuple(e for e in raw if filter_matches(e.filter_key, filter_key) and not e.partial)
    base["all_matched"] = len(delta) == len(raw)
    if not any(conversation_lines(e) for e in delta):
        return TargetOutcome(reason="no_delta", **base)
    if not run.force and run.checker is not None:
        checked = delta if check_key is None else tuple(e for e in delta if filter_matches(e.filter_key, check_key))
        # SPEC 3.4: a summarizer that leaves some events for later (skip-recent) is triggered
        # by the events it would summarize.
        select = getattr(run.summarizer, "trigger_events", None)
        if callable(select):
            checked = tuple(select(checked))
        gap = None if _counts_only(run.checker) else await _request_gap(run, checked, previous)
        check = TriggerInput(
            events=checked,
            previous=previous,
            conversation_tokens=run.tokenizer.count_text(render_conversation(previous.text if previous else "", checked)),
            request_tokens=run.request_tokens,
            context_window=run.context_window,
            now=run.now(),
            request_gap=gap,
        )
        if not run.checker(check):
            return TargetOutcome(reason="not_triggered", **base)
    try:
        result = await run.summarizer.summarize(
            SummaryRequest(filter_key=filter_key, previous=previous, events=without_superseded(delta), parent=parent)
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("summary of %s/%r failed: %s", run.key.session_id, filter_key, exc)
        return TargetOutcome(reason="error", error=f"{type(exc).__name__}: {exc}", **base)
    text = result.text.strip()
    if not text:
        return TargetOutcome(reason="empty_text", **base)
    summary = _next_summary(run, filter_key, previous, delta, result)
    try:
        stored = await run.service.advance_summary(run.key, summary)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("summary of %s/%r advanced but was not stored: %s", run.key.session_id, filter_key, exc)
        return TargetOutcome(reason="persist_failed", summary=summary, error=f"{type(exc).__name__}: {exc}", **base)
    if stored is None:
        return TargetOutcome(reason="stale", **base)
    return TargetOutcome(reason="updated", summary=stored, **base)


async def _request_gap(run: _Run, events: Sequence[Event], previous: Summary | None) -> RequestGap | None:
    """`observe_request_gap`, reading the event the previous boundary ends on when the gap
    reaches back to it (one read, only for checkers that look at time)."""
    gap = observe_request_gap(events, previous)
    if gap is None or gap.available or previous is None or previous.boundary is None:
        return gap
    if previous.boundary.cutoff_at >= gap.started_at or events[0].request_id != gap.request_id:
        return gap  # unavailable for a reason the boundary event does not change
    found = await run.service.list_events(run.key, after_seq=previous.boundary.last_seq - 1, limit=1)
    boundary_event = found[0] if found and found[0].seq == previous.boundary.last_seq else None
    if boundary_event is None:
        return gap
    return observe_request_gap(events, previous, boundary_request_id=boundary_event.request_id)


def anchored_text(result: SummaryResult, *, last_seq: int) -> str:
    """The text stored for a summarizer's result (C1): its sections, anchored to seqs
    1..`last_seq`; a result without sections (a single model summary, a fork) is one
    section covering all of them, since it folds the previous summary in."""
    sections = result.sections or (SummarySection(first_seq=1, last_seq=last_seq, text=strip_section_headers(result.text)),)
    anchored = anchor_sections(sections, last_seq=last_seq)
    return render_sections(anchored) if anchored else result.text.strip()


def _next_summary(
    run: _Run, filter_key: str, previous: Summary | None, delta: Sequence[Event], result: SummaryResult
) -> Summary:
    last = result.last_included
    if last is None or not any(e.id == last.id for e in delta):
        last = delta[-1]
    assert last.seq is not None
    text = anchored_text(result, last_seq=last.seq)
    covered = [e for e in delta if (e.seq or 0) <= last.seq]
    visible = [m for m in (model_message(e) for e in covered) if m is not None]
    cutoff = last.created_at
    if previous is not None and previous.boundary is not None and previous.boundary.cutoff_at > cutoff:
        cutoff = previous.boundary.cutoff_at  # monotone even if clocks disagree
    return Summary(
        filter_key=filter_key,
        text=text,
        boundary=SummaryBoundary(cutoff_at=cutoff, last_event_id=last.id, last_seq=last.seq),
        updated_at=run.now(),
        version=(previous.version if previous is not None else 0) + 1,
        covered_events=(previous.covered_events if previous is not None else 0) + len(visible),
        covered_tokens=(previous.covered_tokens if previous is not None else 0) + run.tokenizer.count_messages(visible),
    )


async def _cascade(run: _Run, primary: TargetOutcome) -> TargetOutcome:
    full = await run.service.get_summary(run.key, filter_key=FULL_SESSION)
    same_start = (full.last_seq if full is not None else 0) == primary.start_seq and (
        (full.text if full is not None else "") == (primary.previous.text if primary.previous is not None else "")
    )
    if not (same_start and primary.all_matched):
        return await _summarize_target(run, FULL_SESSION, parent=None)
    if not primary.advanced or primary.summary is None:
        return TargetOutcome(filter_key=FULL_SESSION, reason="follows_branch", previous=full)
    copy = dataclasses.replace(primary.summary, filter_key=FULL_SESSION)
    if not primary.persisted:
        return TargetOutcome(filter_key=FULL_SESSION, reason="persist_failed", previous=full, summary=copy)
    try:
        stored = await run.service.advance_summary(run.key, copy)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return TargetOutcome(
            filter_key=FULL_SESSION, reason="persist_failed", previous=full, summary=copy, error=f"{type(exc).__name__}: {exc}"
        )
    if stored is None:
        return TargetOutcome(filter_key=FULL_SESSION, reason="stale", previous=full)
    return TargetOutcome(filter_key=FULL_SESSION, reason="copied", previous=full, summary=stored)


# -- the engine: a configured summarize_session -------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SummaryJob:
    """Summarize (session, filter key) so that the summary covers at least `last_seq`."""

    key: SessionKey
    filter_key: str
    last_seq: int
    context_window: int | None = None
    parent: ForkParent | None = None


@dataclass(frozen=True, kw_only=True)
class SummaryEngine:
    """`summarize_session` with its configuration bound: what the schedulers, the Celery
    task and the LLM flow's synchronous summary call."""

    summarizer: Summarizer | None
    checker: Checker | None = None
    lock: SummaryLock | None = None
    tokenizer: Tokenizer = APPROX_TOKENIZER
    cascade: bool = True
    allowlist: tuple[str, ...] | None = None
    """SPEC 2.6 filter allowlist: the filter keys that get summaries of their own (None: all)."""
    context_window: int | None = None
    max_events: int = DEFAULT_MAX_EVENTS
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S

    async def summarize(
        self,
        service: SessionService,
        key: SessionKey,
        *,
        filter_key: str,
        force: bool = False,
        parent: ForkParent | None = None,
        context_window: int | None = None,
        request_tokens: int | None = None,
        covers_seq: int | None = None,
        lock_wait_s: float | None = None,
    ) -> SummaryOutcome:
        return await summarize_session(
            service,
            key,
            filter_key=filter_key,
            summarizer=self.summarizer,
            checker=self.checker,
            force=force,
            lock=self.lock,
            lock_wait_s=self.lock_wait_s if lock_wait_s is None else lock_wait_s,
            parent=parent,
            context_window=context_window or self.context_window,
            request_tokens=request_tokens,
            covers_seq=covers_seq,
            tokenizer=self.tokenizer,
            cascade=self.cascade,
            allowlist=self.allowlist,
            max_events=self.max_events,
        )

    async def run_job(self, service: SessionService, job: SummaryJob) -> SummaryOutcome:
        """Run a job; a second run for the same (session, filter key, last seq) does nothing."""
        return await self.summarize(
            service,
            job.key,
            filter_key=job.filter_key,
            parent=job.parent,
            context_window=job.context_window,
            covers_seq=job.last_seq,
        )


# -- is a job due? (issue 18: a cheap hot path) -----------------------------------------------------


def _line_cost(line: str, tokenizer: Tokenizer) -> int:
    # One more than the line: the line break that joins it to the next, and any merge
    # across that break, never make the joined transcript cost more than this (a bound
    # tests/sessions/test_summary_backlog.py checks against tiktoken).
    return tokenizer.count_text(line) + 1


@dataclass(kw_only=True)
class SummaryBacklog:
    """What a summary job for `filter_key` would read, counted as events are appended.

    A job reads the events after its summary's boundary and asks its checker; most jobs
    find nothing due. The backlog keeps, for one loaded session, the counts a checker
    looks at (events after the boundary that match the key, an upper bound of the
    transcript's tokens), so that the Runner enqueues a job only when its trigger could
    fire. It is derived data: `rebuild` from the ledger equals `advance` event by event.
    `complete` is False when the loaded events miss one after the boundary (a window cut,
    another writer's append): the counts then prove nothing and the job is enqueued.
    """

    filter_key: str
    boundary_seq: int = 0
    has_previous: bool = False
    previous_tokens: int = 0
    last_seq: int = 0
    events: int = 0
    """Events after the boundary that match the key (what `EventThreshold` counts)."""
    talking: int = 0
    """Of those, events with transcript lines (none: the job has no delta)."""
    tokens: int = 0
    """Upper bound of their transcript's tokens."""
    complete: bool = True

    @classmethod
    def rebuild(
        cls, *, filter_key: str, previous: Summary | None, events: Sequence[Event], last_seq: int, tokenizer: Tokenizer
    ) -> SummaryBacklog:
        """The backlog of a session whose ledger ends at `last_seq`, from its loaded `events`."""
        boundary = previous.last_seq if previous is not None else 0
        backlog = cls(
            filter_key=filter_key,
            boundary_seq=boundary,
            has_previous=previous is not None,
            previous_tokens=_line_cost(previous_summary_line(previous.text), tokenizer) if previous is not None else 0,
            last_seq=boundary,
        )
        backlog.advance(events, tokenizer)
        if backlog.last_seq != last_seq:
            backlog.complete = False
        return backlog

    def advance(self, events: Sequence[Event], tokenizer: Tokenizer) -> None:
        """Count the events of `events` (oldest first) past `last_seq`; only the tail is read."""
        start = len(events)
        while start > 0 and (events[start - 1].seq or 0) > self.last_seq:
            start -= 1
        for event in events[start:]:
            seq = event.seq or 0
            if seq != self.last_seq + 1:
                self.complete = False
            self.last_seq = max(self.last_seq, seq)
            if event.partial or not filter_matches(event.filter_key, self.filter_key):
                continue
            self.events += 1
            lines = conversation_lines(event)
            if lines:
                self.talking += 1
                self.tokens += sum(_line_cost(line, tokenizer) for line in lines)

    @property
    def tokens_bound(self) -> int:
        """At least the tokens of the transcript a job's checker measures."""
        return self.previous_tokens + self.tokens

    def may_fire(self, checker: Checker | None, context_window: int | None) -> bool:
        """Whether a job for this key could do anything now (False: it would stop at
        `no_delta` or `not_triggered`)."""
        if not self.complete:
            return True
        if self.talking == 0:
            return False
        return checker is None or checker_may_fire(checker, self, context_window)


@dataclass(kw_only=True)
class SummaryGate:
    """Decides, for one run's loaded session, whether a summary job is worth enqueueing.

    Keeps a `SummaryBacklog` per filter key, advanced over the events appended since the
    last question and rebuilt when the session's summary moved. A job is due when its key's
    backlog, or the full session's (the job's cascade), may fire. The job still makes its
    own check: this only spares the ones that would find nothing to do.
    """

    checker: Checker | None
    context_window: int | None = None
    tokenizer: Tokenizer = APPROX_TOKENIZER
    cascade: bool = True
    allowlist: tuple[str, ...] | None = None
    backlogs: dict[str, SummaryBacklog] = field(default_factory=dict)

    def due(
        self, session: Session, filter_key: str, *, context_window: int | None = None,
        summaries: Mapping[str, Summary] | None = None,
    ) -> bool:
        """Whether a job for `filter_key` may do something. `summaries`: the session's
        summaries when newer than the loaded ones (a job of this run already advanced them)."""
        if not summary_targets(filter_key, allowlist=self.allowlist, cascade=self.cascade):
            return False  # a key outside the allowlist, without the cascade: the job would do nothing
        window = context_window or self.context_window
        known = session.summaries if summaries is None else summaries
        keys = [filter_key] + ([FULL_SESSION] if self.cascade and filter_key != FULL_SESSION else [])
        # Every backlog is brought up to date, even past the first that may fire.
        backlogs = [self.backlog(session, key, known) for key in keys]
        return any(b.may_fire(self.checker, window) and self._fires(session, b, window, known) for b in backlogs)

    def _fires(
        self, session: Session, backlog: SummaryBacklog, window: int | None, summaries: Mapping[str, Summary]
    ) -> bool:
        """The job's own check, made on the loaded events when the bound says it may fire:
        the bound runs ahead of the exact count, and a job near its threshold would read
        the events only to stop at `not_triggered`. Only for checkers that look at counts
        alone (a time threshold may fire later than now)."""
        if not backlog.complete or self.checker is None or not _counts_only(self.checker):
            return True
        previous = summaries.get(backlog.filter_key)
        delta = tuple(
            e for e in session.events
            if (e.seq or 0) > backlog.boundary_seq and not e.partial and filter_matches(e.filter_key, backlog.filter_key)
        )
        if not any(conversation_lines(e) for e in delta):
            return False
        conversation = render_conversation(previous.text if previous is not None else "", delta)
        check = TriggerInput(
            events=delta, previous=previous, conversation_tokens=self.tokenizer.count_text(conversation),
            context_window=window,
        )
        return bool(self.checker(check))

    def backlog(
        self, session: Session, filter_key: str, summaries: Mapping[str, Summary] | None = None
    ) -> SummaryBacklog:
        previous = (session.summaries if summaries is None else summaries).get(filter_key)
        boundary = previous.last_seq if previous is not None else 0
        known = self.backlogs.get(filter_key)
        if known is None or known.boundary_seq != boundary or known.has_previous != (previous is not None):
            known = SummaryBacklog.rebuild(
                filter_key=filter_key, previous=previous, events=session.events, last_seq=session.last_seq,
                tokenizer=self.tokenizer,
            )
            self.backlogs[filter_key] = known
        else:
            known.advance(session.events, self.tokenizer)
        return known


def _counts_only(checker: Checker) -> bool:
    """Whether `checker` decides from the events and token counts alone (not the time)."""
    if isinstance(checker, EventThreshold | TokenThreshold | ContextThreshold):
        return True
    if isinstance(checker, ChecksAll | ChecksAny):
        return all(_counts_only(c) for c in checker.checks)
    return False


# -- jobs ------------------------------------------------------------------------------------------


def tool_round_complete(events: Sequence[Event], result: Event) -> bool:
    """Whether every call of the tool round `result` answers has its result in `events`."""
    call_id = result.message.tool_call_id if result.message is not None else None
    answered: set[str] = set()
    for event in reversed(events):
        message = event.message
        if message is None:
            continue
        if message.tool_call_id is not None:
            answered.add(message.tool_call_id)
        if message.tool_calls and call_id in {c.id for c in message.tool_calls}:
            return all(c.id in answered for c in message.tool_calls)
    return True


def should_enqueue_summary(event: Event, *, sync_intra_run: bool = False, round_complete: bool = True) -> bool:
    """SPEC 1.8: whether persisting `event` asks for a summary job.

    Final answers and (complete rounds of) tool results do; user messages, tool calls,
    errors, events without content and those marked `skip_summarization` do not, nor tool
    results while the flow summarizes synchronously within the run.
    """
    if event.is_user_message or event.is_tool_call or event.is_error or not event.has_valid_content:
        return False
    if event.extensions.get("skip_summarization"):
        return False
    if event.is_tool_result:
        return round_complete and not sync_intra_run
    return True


@runtime_checkable
class SummaryScheduler(Protocol):
    """Where summary jobs go: `enqueue` returns at once; the job runs later, elsewhere."""

    async def enqueue(self, job: SummaryJob) -> None:
        """Queue a job (errors are the caller's to log, never the run's to fail)."""
        ...

    async def aclose(self) -> None:
        """Stop running jobs of this scheduler (process shutdown, tests)."""
        ...


def summary_gate(scheduler: SummaryScheduler) -> SummaryGate | None:
    """A fresh gate for one run, from a scheduler that knows its jobs' checker
    (`summary_gate()`); None: every job the rule asks for is enqueued."""
    factory = getattr(scheduler, "summary_gate", None)
    return factory() if callable(factory) else None


def engine_gate(engine: SummaryEngine) -> SummaryGate:
    """The gate of the jobs `engine` runs: its checker, window, tokenizer and cascade."""
    return SummaryGate(
        checker=engine.checker, context_window=engine.context_window, tokenizer=engine.tokenizer, cascade=engine.cascade,
        allowlist=engine.allowlist,
    )


_ADVANCED_SESSIONS = 256


class InProcessSummaryScheduler:
    """Runs jobs as asyncio tasks of the loop that enqueues them, one session at a time in
    order (SPEC 3.2: same session, same worker). Pending jobs of one (session, filter key)
    coalesce into the one with the highest seq: it covers the others. Each job is bounded
    by `job_timeout_s`; failures are logged, never raised.
    """

    def __init__(
        self, engine: SummaryEngine, service: SessionService, *, job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    ) -> None:
        self.engine = engine
        self.service = service
        self.job_timeout_s = job_timeout_s
        self._pending: dict[tuple[str, str], dict[str, SummaryJob]] = {}
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}
        # The summaries this scheduler's jobs advanced, per session (the newest few sessions).
        self._advanced: OrderedDict[tuple[str, str], dict[str, Summary]] = OrderedDict()
        self.outcomes: list[SummaryOutcome] = []
        """The last outcomes (a few), for tests and the inspector."""

    def summary_gate(self) -> SummaryGate:
        return engine_gate(self.engine)

    def advanced_summaries(self, key: SessionKey) -> dict[str, Summary]:
        """The summaries of `key` that this scheduler's jobs advanced (a run's loaded session
        does not see them: its gate asks here, so that it does not queue jobs they cover)."""
        return dict(self._advanced.get((key.app, key.session_id), {}))

    async def enqueue(self, job: SummaryJob) -> None:
        session = (job.key.app, job.key.session_id)
        pending = self._pending.setdefault(session, {})
        current = pending.get(job.filter_key)
        if current is None or job.last_seq >= current.last_seq:
            pending[job.filter_key] = job
        if session not in self._workers:
            self._workers[session] = asyncio.get_running_loop().create_task(
                self._drain(session), name=f"summary-{job.key.session_id}"
            )

    async def _drain(self, session: tuple[str, str]) -> None:
        try:
            # No await between the emptiness check and leaving: enqueue (same loop) either
            # sees this worker and adds to its queue, or sees none and starts another.
            while pending := self._pending.get(session):
                filter_key = next(iter(pending))
                job = pending.pop(filter_key)
                try:
                    outcome = await asyncio.wait_for(self.engine.run_job(self.service, job), self.job_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Maintenance, not the run's business: one line at warning, details at debug.
                    logger.warning("summary job for session %s failed: %r", job.key.session_id, exc)
                    logger.debug("summary job for session %s failed", job.key.session_id, exc_info=True)
                    continue
                self.outcomes = [*self.outcomes[-49:], outcome]
                if outcome.summaries():
                    self._advanced.setdefault(session, {}).update(outcome.summaries())
                    self._advanced.move_to_end(session)
                    while len(self._advanced) > _ADVANCED_SESSIONS:
                        self._advanced.popitem(last=False)
        finally:
            self._workers.pop(session, None)
            if not self._pending.get(session):
                self._pending.pop(session, None)

    @property
    def idle(self) -> bool:
        return not self._workers

    async def join(self) -> None:
        """Wait until every queued job has run."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def aclose(self) -> None:
        workers = list(self._workers.values())
        for task in workers:
            task.cancel()
        if workers:
            await asyncio.gather(*workers, return_exceptions=True)
        self._pending.clear()


def refresh_summaries(session: Session, outcome: SummaryOutcome) -> None:
    """Put the summaries that advanced into a loaded session (its projection uses them)."""
    session.summaries.update(outcome.summaries())

