"""The model contract: a request in, a stream of responses out."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from sessions_app.core.events import Message, ToolCall, Usage

if TYPE_CHECKING:
    from runs.core.output import OutputSpec


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """What the model is told about a tool: name, description and JSON schema.

    `requires_one_of` lists groups of parameters of which a call must give at least one
    group whole, for a tool whose parameters are each optional but not all at once
    (`session_load` needs an anchor). Providers do not send it (a top-level `anyOf` is
    refused by some); the description says it in words, and planners and validation use it.

    A spec is a value: its `parameters` are never changed in place once handed out (a tool
    whose schema changes builds a new one), which lets `tool_json` remember its text.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    requires_one_of: tuple[tuple[str, ...], ...] = ()


_TOOL_JSON: dict[tuple[str, str, int], tuple[Mapping[str, Any], str]] = {}
_TOOL_JSON_CHARS = [0]  # characters of the texts kept
MAX_TOOL_JSON_CHARS = 4_000_000
"""What the remembered tool texts may hold in all: a client's own tools (`/v1`) are new objects
with every request, so the memo is emptied when they fill it."""
MAX_TOOL_JSON_TEXT = 65_536
"""A longer tool text is made each time rather than kept."""


def tool_json(spec: ToolSpec) -> str:
    """The tool as the model is told it: its name, description and parameters as one JSON
    text (keys sorted), on which its token cost is counted and the offline model reads it.

    Remembered: every model call of a run offers the same tools, and a tool hands out specs
    that share one parameters object. The entry is found by that object's identity and holds
    it alive, so no other object can take its id while the entry is there; a spec whose
    schema was built afresh is dumped again. Bounded by `MAX_TOOL_JSON_CHARS`."""
    key = (spec.name, spec.description, id(spec.parameters))
    hit = _TOOL_JSON.get(key)
    if hit is not None and hit[0] is spec.parameters:
        return hit[1]
    text = json.dumps(
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    if len(text) > MAX_TOOL_JSON_TEXT:
        return text
    if _TOOL_JSON_CHARS[0] + len(text) > MAX_TOOL_JSON_CHARS:
        _TOOL_JSON.clear()
        _TOOL_JSON_CHARS[0] = 0
    _TOOL_JSON[key] = (spec.parameters, text)
    _TOOL_JSON_CHARS[0] += len(text)
    return text


@dataclass(frozen=True, kw_only=True)
class ToolChoice:
    """How the model may use the offered tools (OpenAI's `tool_choice`, issue 20): `auto`,
    `none` (no tools are offered at all), `required` (some tool), or `function` (`name`)."""

    mode: Literal["auto", "none", "required", "function"]
    name: str | None = None


@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    stream: bool = True
    temperature: float | None = None
    max_tokens: int | None = None
    # Issue 20: the answer must be JSON of this spec; providers that can, constrain it.
    output: OutputSpec | None = None
    # Issue 20: the caller's tool choice; providers that can, send it (None: the model's default).
    tool_choice: ToolChoice | None = None


@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    """One item of a model's stream.

    Partial responses carry `delta` (text written so far in this chunk); the final one has
    `partial=False` and the whole assistant `message` (text and/or tool calls), the finish
    reason and usage.
    """

    id: str
    partial: bool
    delta: str = ""
    message: Message | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    model: str | None = None


@dataclass(frozen=True, kw_only=True)
class ModelInfo:
    name: str
    context_window: int
    provider: str = "openai"
    description: str = ""


@runtime_checkable
class Model(Protocol):
    def info(self) -> ModelInfo:
        """Name and context window of the model."""
        ...

    def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        """Stream the response: zero or more partial deltas, then exactly one final response.

        Raises `ModelError` for a refused request and `TransientModelError` once retries
        of a transient failure are exhausted.
        """
        ...


@dataclass(kw_only=True)
class FinalResponseBuilder:
    """Accumulates streamed text and tool-call fragments into one final message."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)

    def add_text(self, delta: str) -> None:
        self.text.append(delta)

    def add_tool_call_fragment(self, index: int, *, id: str | None, name: str | None, arguments: str | None) -> None:
        call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
        if id:
            call["id"] = id
        if name:
            call["name"] += name
        if arguments:
            call["arguments"] += arguments

    def message(self) -> Message:
        calls = tuple(
            ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] or "{}")
            for _, c in sorted(self.calls.items())
        )
        return Message(role="assistant", content="".join(self.text), tool_calls=calls)
