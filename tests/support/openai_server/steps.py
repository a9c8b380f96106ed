"""The script a `ScriptedOpenAIServer` plays (`ServerStep`) and the record of what it received."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

StepKind = Literal["answer", "tool_calls", "error", "delay", "broken_stream", "events"]


@dataclass(frozen=True, kw_only=True)
class ScriptedToolCall:
    """A tool call the server will answer with; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True)
class ServerStep:
    """One scripted answer. Build steps with the class methods, not the constructor."""

    kind: StepKind
    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    chunk_size: int = 4
    fragment_size: int = 5
    interleave: bool = False
    chunk_delay_s: float = 0.0
    usage: tuple[int, int] | None = None
    finish_reason: str | None = None
    status: int = 200
    body: Mapping[str, Any] | str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    then: ServerStep | None = None
    after_chunks: int = 0
    events: tuple[Mapping[str, Any] | str, ...] = ()
    done: bool = True

    @classmethod
    def answer(
        cls,
        text: str,
        *,
        chunk_size: int = 4,
        chunk_delay_s: float = 0.0,
        usage: tuple[int, int] | None = None,
        finish_reason: str = "stop",
    ) -> ServerStep:
        """A text answer, streamed `chunk_size` characters per chunk; `usage` is (prompt, completion)."""
        return cls(
            kind="answer",
            text=text,
            chunk_size=chunk_size,
            chunk_delay_s=chunk_delay_s,
            usage=usage,
            finish_reason=finish_reason,
        )

    @classmethod
    def calls(
        cls,
        *calls: tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str],
        text: str = "",
        fragment_size: int = 5,
        interleave: bool = False,
        usage: tuple[int, int] | None = None,
    ) -> ServerStep:
        """Parallel tool calls, each `(name, arguments)` or `(name, arguments, id)`.

        When streamed, each call's arguments are split into `fragment_size`-character
        fragments; `interleave` sends the fragments of all calls round-robin instead of
        one call after the other, as some servers do.
        """
        built: list[ScriptedToolCall] = []
        for spec in calls:
            name, arguments = spec[0], spec[1]
            call_id = spec[2] if len(spec) == 3 else f"call_{uuid.uuid4().hex[:12]}"
            built.append(
                ScriptedToolCall(
                    id=call_id,
                    name=name,
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
            )
        return cls(
            kind="tool_calls",
            text=text,
            tool_calls=tuple(built),
            fragment_size=fragment_size,
            interleave=interleave,
            usage=usage,
            finish_reason="tool_calls",
        )

    @classmethod
    def call(cls, name: str, arguments: Mapping[str, Any] | str, *, id: str | None = None) -> ServerStep:
        """A single tool call."""
        return cls.calls((name, arguments, id) if id is not None else (name, arguments))

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        type: str | None = None,
        code: str | None = None,
        body: Mapping[str, Any] | str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ServerStep:
        """An HTTP error. Without `body`, OpenAI's `{"error": {message, type, param, code}}`."""
        if body is None:
            body = {
                "error": {
                    "message": message or f"scripted error {status}",
                    "type": type or ("server_error" if status >= 500 else "invalid_request_error"),
                    "param": None,
                    "code": code,
                }
            }
        return cls(kind="error", status=status, body=body, headers=dict(headers or {}))

    @classmethod
    def delay(cls, seconds: float, then: ServerStep | None = None) -> ServerStep:
        """Wait `seconds` before answering with `then`; without `then`, hang up instead."""
        return cls(kind="delay", delay_s=seconds, then=then)

    @classmethod
    def broken_stream(cls, text: str, *, after_chunks: int, chunk_size: int = 4) -> ServerStep:
        """Start answering `text`, then drop the connection mid-body after `after_chunks` chunks.

        The role chunk counts: `after_chunks=1` breaks before any text was sent. Without
        streaming, half the JSON body is sent before the connection drops.
        """
        return cls(kind="broken_stream", text=text, after_chunks=after_chunks, chunk_size=chunk_size)

    @classmethod
    def stream_events(cls, *events: Mapping[str, Any] | str, done: bool = True) -> ServerStep:
        """Stream these `data:` payloads verbatim (dicts as JSON), then `[DONE]` if `done`.

        For streams no well-behaved server sends: no choices at all, an error event
        mid-stream, invalid JSON. Always answered as a stream, whatever was requested.
        """
        return cls(kind="events", events=tuple(events), done=done)


@dataclass(frozen=True, kw_only=True)
class RecordedRequest:
    """Any request the server received, with its JSON body (None when it had none)."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
