"""Events: the unit of the session ledger.

An `Event` is one step of a run: a user message, a streamed text delta, an assistant
message (text or tool calls), a tool result, a state change, an error or the runner's
completion marker. Complete events are appended to the ledger; streaming deltas are only
emitted. Events round-trip through JSON (`to_dict` / `from_dict`).
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

Role = Literal["user", "assistant", "tool", "system"]
FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "cancelled"]

# Well-known `Event.object` values (SPEC 2.2).
OBJECT_COMPLETION = "chat.completion"
OBJECT_CHUNK = "chat.completion.chunk"
OBJECT_TOOL_RESPONSE = "tool.response"
OBJECT_ERROR = "error"
OBJECT_RUNNER_COMPLETION = "runner.completion"
OBJECT_STATE_UPDATE = "state.update"

# `Event.extensions` key marking an assistant message no model produced (a graph's own words,
# its tool calls, its questions): the run's `model_calls` does not count it.
NO_MODEL_CALL = "no_model_call"

# Shown in history for error events that carry no content (SPEC 1.12).
REPAIRED_ERROR_TEXT = "An error occurred during execution. Please contact the service provider."

EVENT_VERSION = 1

_T = TypeVar("_T")


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` with NUL and lone surrogates replaced by U+FFFD (the replacement character)."""
    return _UNSTORABLE.sub("\ufffd", text)


def new_id() -> str:
    """A fresh random identifier (UUID4, hex with dashes)."""
    return str(uuid.uuid4())


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """A model's request to call one tool; `arguments` is the raw JSON text it produced."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        if _UNSTORABLE.search(self.arguments):  # see Message.__post_init__
            object.__setattr__(self, "arguments", storable(self.arguments))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(id=str(data["id"]), name=str(data["name"]), arguments=str(data.get("arguments", "{}")))


PartType = Literal["image", "file", "text"]

# Fixed context-budget estimates of an attachment (issue 20, item 3): what a model charges
# for an image depends on its size and the provider; one figure keeps the budget simple and
# on the safe side (OpenAI's high-detail 512px-tile formula gives 765 for a 1024x1024 image).
IMAGE_TOKEN_ESTIMATE = 765
FILE_TOKEN_ESTIMATE = 1024


@dataclass(frozen=True, kw_only=True)
class ArtifactRef:
    """A stored artifact version an attachment points at (its bytes live in the artifact
    store, never in the ledger)."""

    filename: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"filename": self.filename, "version": self.version}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ArtifactRef:
        return cls(filename=str(data["filename"]), version=int(data["version"]))


@dataclass(frozen=True, kw_only=True)
class ContentPart:
    """A non-text part of a message: an image (an artifact, or a URL the client gave) or a
    file (an artifact), or a text part a request builder adds (the "Attached files" note).

    `data` holds bytes only in memory: an upload not stored yet, or the bytes loaded for a
    model request. It is never serialized: `to_dict` refuses a part whose bytes have no
    artifact, so base64 never reaches the ledger.
    """

    type: PartType
    name: str = ""
    mime: str = ""
    size: int = 0
    artifact: ArtifactRef | None = None
    url: str | None = None
    detail: str | None = None
    text: str = ""
    data: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def token_estimate(self) -> int:
        if self.type == "text":
            return len(self.text) // 4 + 1  # SPEC's characters / 4 estimate
        return IMAGE_TOKEN_ESTIMATE if self.type == "image" else FILE_TOKEN_ESTIMATE

    def to_dict(self) -> dict[str, Any]:
        if self.data is not None and self.artifact is None:
            raise ValueError(f"attachment {self.name!r} must be stored as an artifact before it is serialized")
        data: dict[str, Any] = {"type": self.type}
        if self.type == "text":
            data["text"] = self.text
            return data
        data.update(name=self.name, mime=self.mime, size=self.size)
        if self.artifact is not None:
            data["artifact"] = self.artifact.to_dict()
        if self.url is not None:
            data["url"] = self.url
        if self.detail is not None:
            data["detail"] = self.detail
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ContentPart:
        artifact = data.get("artifact")
        return cls(
            type=data.get("type", "file"),
            name=str(data.get("name") or ""),
            mime=str(data.get("mime") or ""),
            size=int(data.get("size") or 0),
            artifact=ArtifactRef.from_dict(artifact) if artifact else None,
            url=data.get("url"),
            detail=data.get("detail"),
            text=str(data.get("text") or ""),
        )


@dataclass(frozen=True, kw_only=True)
class Message:
    """A chat message in the OpenAI sense: role, text, tool calls or a tool result.

    `content` is the text; `parts` are the message's images and files (issue 20, item 3).
    A message without parts serializes as it always did (no `parts` key).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    parts: tuple[ContentPart, ...] = ()

    def __post_init__(self) -> None:
        # What a tool or model produced may hold characters no database text column takes
        # (PostgreSQL refuses NUL; no UTF-8 encoder takes a lone surrogate). Clients are
        # refused such input at every surface; output is kept, with those characters shown
        # as U+FFFD, so the same message is stored, emitted and shown to the model.
        if _UNSTORABLE.search(self.content):
            object.__setattr__(self, "content", storable(self.content))

    @property
    def has_payload(self) -> bool:
        return bool(self.content or self.tool_calls or self.tool_call_id or self.attachments)

    @property
    def attachments(self) -> tuple[ContentPart, ...]:
        """The images and files (not the text parts a request builder added)."""
        return tuple(p for p in self.parts if p.type != "text")

    @property
    def part_tokens(self) -> int:
        """The fixed context-budget estimate of the message's attachments."""
        return sum(p.token_estimate for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.tool_name is not None:
            data["tool_name"] = self.tool_name
        if self.parts:
            data["parts"] = [part.to_dict() for part in self.parts]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=str(data.get("content") or ""),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            tool_name=data.get("tool_name"),
            parts=tuple(ContentPart.from_dict(p) for p in data.get("parts") or ()),
        )


@dataclass(frozen=True, kw_only=True)
class EventError:
    """What went wrong: a stable `type` (e.g. `model_error`, `flow_error`) and a message."""

    type: str
    message: str
    code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "code": self.code}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EventError:
        return cls(type=str(data["type"]), message=str(data["message"]), code=data.get("code"))


@dataclass(frozen=True, kw_only=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        return cls(
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
        )


@dataclass(frozen=True, kw_only=True)
class Event:
    """One step of a run. `seq` is assigned by the session service on append.

    `partial` marks a streaming delta (never persisted unless it carries a state delta);
    `done` marks the end of a response; `object` says what kind of step this is.
    """

    id: str = field(default_factory=new_id)
    seq: int | None = None
    invocation_id: str = ""
    request_id: str = ""
    author: str
    branch: str = ""
    filter_key: str = ""
    object: str = OBJECT_COMPLETION
    message: Message | None = None
    partial: bool = False
    done: bool = False
    finish_reason: str | None = None
    state_delta: Mapping[str, Any] = field(default_factory=dict)
    error: EventError | None = None
    usage: Usage | None = None
    model: str | None = None
    created_at: datetime = field(default_factory=utcnow)
    extensions: Mapping[str, Any] = field(default_factory=dict)
    version: int = EVENT_VERSION

    # -- predicates (SPEC 2.2) ------------------------------------------------------

    @property
    def role(self) -> str:
        if self.message is not None:
            return self.message.role
        return "system"

    @property
    def text(self) -> str:
        return self.message.content if self.message is not None else ""

    @property
    def is_user_message(self) -> bool:
        return self.message is not None and self.message.role == "user"

    @property
    def is_tool_call(self) -> bool:
        return self.message is not None and bool(self.message.tool_calls)

    @property
    def is_tool_result(self) -> bool:
        return self.message is not None and self.message.tool_call_id is not None

    @property
    def is_error(self) -> bool:
        return self.object == OBJECT_ERROR or self.error is not None

    @property
    def is_runner_completion(self) -> bool:
        return self.done and self.object == OBJECT_RUNNER_COMPLETION

    @property
    def has_valid_content(self) -> bool:
        return self.message is not None and self.message.has_payload

    @property
    def is_final_response(self) -> bool:
        return (
            self.done
            and not self.partial
            and not self.is_tool_call
            and (self.message is not None or self.error is not None)
        )

    def replace(self, **changes: Any) -> Event:
        """`dataclasses.replace`, without its cost: the runner makes a hundred of these a run
        (issue 23). Event has no `__post_init__`, so a copy of its fields with `changes` on
        top is what `replace` builds; an unknown field still raises as `replace` does."""
        return replaced(self, _EVENT_FIELDS, changes)

    # -- JSON -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "seq": self.seq,
            "invocation_id": self.invocation_id,
            "request_id": self.request_id,
            "author": self.author,
            "branch": self.branch,
            "filter_key": self.filter_key,
            "object": self.object,
            "message": self.message.to_dict() if self.message is not None else None,
            "partial": self.partial,
            "done": self.done,
            "finish_reason": self.finish_reason,
            "state_delta": dict(self.state_delta),
            "error": self.error.to_dict() if self.error is not None else None,
            "usage": self.usage.to_dict() if self.usage is not None else None,
            "model": self.model,
            "created_at": self.created_at.isoformat(),
            "extensions": dict(self.extensions),
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        message = data.get("message")
        error = data.get("error")
        usage = data.get("usage")
        return cls(
            id=str(data["id"]),
            seq=data.get("seq"),
            invocation_id=str(data.get("invocation_id", "")),
            request_id=str(data.get("request_id", "")),
            author=str(data["author"]),
            branch=str(data.get("branch", "")),
            filter_key=str(data.get("filter_key", "")),
            object=str(data.get("object", OBJECT_COMPLETION)),
            message=Message.from_dict(message) if message else None,
            partial=bool(data.get("partial", False)),
            done=bool(data.get("done", False)),
            finish_reason=data.get("finish_reason"),
            state_delta=dict(data.get("state_delta") or {}),
            error=EventError.from_dict(error) if error else None,
            usage=Usage.from_dict(usage) if usage else None,
            model=data.get("model"),
            created_at=datetime.fromisoformat(data["created_at"]) if data.get("created_at") else utcnow(),
            extensions=dict(data.get("extensions") or {}),
            version=int(data.get("version", EVENT_VERSION)),
        )


_EVENT_FIELDS = frozenset(f.name for f in dataclasses.fields(Event))


def replaced(obj: _T, fields: frozenset[str], changes: Mapping[str, Any]) -> _T:
    """A copy of the frozen dataclass `obj` (its fields named by `fields`, none of them
    `init=False`, the class without `__post_init__`) with `changes`: what
    `dataclasses.replace` returns, built without a call of `__init__`."""
    if not fields.issuperset(changes) or hasattr(obj, "__post_init__"):
        # An unknown name raises there; a class that gains a __post_init__ keeps its checks.
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    copy = object.__new__(type(obj))
    values = copy.__dict__
    values.update(obj.__dict__)
    values.update(changes)
    return copy


def should_persist(event: Event) -> bool:
    """SPEC 1.7: persist iff the event changes state, or is complete and has content.

    Streaming deltas are never persisted unless they carry a state delta; an error event is
    persisted once it has been repaired to carry visible content (`repair_error`).
    """
    if event.state_delta:
        return True
    return not event.partial and event.has_valid_content


def repair_error(event: Event) -> Event:
    """SPEC 1.12: an error event without content gets a visible assistant message."""
    if not event.is_error or event.has_valid_content:
        return event
    return event.replace(
        message=Message(role="assistant", content=REPAIRED_ERROR_TEXT),
        finish_reason="error",
    )


def filter_matches(event_key: str, key: str) -> bool:
    """SPEC 2.3: keys match when either is empty or one is a `/`-path prefix of the other."""
    if not key or not event_key:
        return True
    return event_key == key or event_key.startswith(key + "/") or key.startswith(event_key + "/")
