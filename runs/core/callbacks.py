"""Typed extension points (issue 20, item 4; SPEC 1.6, 1.9 plugins and callbacks).

A `Callbacks` bundle holds callables for seven points of a run. It is registered on an
agent (`LLMAgent(callbacks=...)`) or on the Runner (`Runner(callbacks=...)`, which applies
to every agent and runs first). Each callable may be sync or async and answers with one of
the typed results below, or None for "no change":

| point | called with | may answer |
| --- | --- | --- |
| `before_model` | context, `ModelRequest` | `ReplaceRequest` (change it), `Respond` (skip the model) |
| `after_model` | context, the assistant `Message` | `ReplaceResponse` |
| `before_tool` | tool context, `ToolCall` | `ReplaceCall`, `Veto` (refuse it, with a reason), `ToolAnswer` (skip the tool) |
| `after_tool` | tool context, call, result text | `ReplaceResult` |
| `on_event` | context, `Event` (before it is persisted) | `ReplaceEvent` |
| `before_run` | context | `StopRun` (the run ends failed, nothing is asked of the model) |
| `after_run` | the final `RunRecord` | nothing (observe only) |

Callables of one point run in order (the Runner's, then the agent's); each sees what the
one before it produced, and `Respond`, `Veto`, `ToolAnswer` and `StopRun` end the chain.
Every change is recorded in the ledger: `extensions["callbacks"]` of the event it shaped
(the step's assistant event, the tool result, the replaced event, the run's error) lists
`{"point", "callback", "change", "note"}`. A callable's exception is not swallowed: it is
a bug of the extension and fails the step the way a flow bug does.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from runs.core.llm.base import ModelRequest
from sessions_app.core.events import Event, Message, ToolCall

if TYPE_CHECKING:
    from runs.core.invocation import Invocation
    from runs.core.records import RunRecord
    from runs.core.tools.base import Tool

CALLBACKS_SERVICE = "callbacks"
"""`Invocation.services[CALLBACKS_SERVICE]`: the Runner's `Callbacks`, which agents run first."""

CALLBACKS_EXTENSION = "callbacks"
"""`Event.extensions` key: the changes callbacks made to this event or the call behind it."""

Point = Literal["before_model", "after_model", "before_tool", "after_tool", "on_event", "before_run", "after_run"]


@dataclass(frozen=True, kw_only=True)
class CallbackContext:
    """Where a model-, event- or run-level callback is called: the run's invocation and the
    agent's step (0 for events and run callbacks). `invocation` is None for a model call
    outside a run: the summarizer's (SPEC 3.4 model callbacks, `ModelSummaryModel`), where
    `agent_name` names the summarizer."""

    invocation: Invocation | None
    agent_name: str
    step: int = 0


@dataclass(frozen=True, kw_only=True)
class ToolCallContext:
    """Where a tool callback is called: the invocation, and the tool (None when the model
    asked for a tool the agent does not have)."""

    invocation: Invocation
    tool: Tool | None


# -- results --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReplaceRequest:
    """Send `request` instead (redact, add an instruction, drop a tool)."""

    request: ModelRequest
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Respond:
    """Do not call the model: `message` is its answer (a cache, a canned reply, a guard)."""

    message: Message
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class ReplaceResponse:
    """Use `message` as the model's answer instead of the one it gave."""

    message: Message
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class ReplaceCall:
    """Run the tool with this call instead (e.g. arguments fixed or narrowed)."""

    call: ToolCall
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Veto:
    """Do not run the tool; the model gets `{"error": "vetoed: <reason>"}` as its result."""

    reason: str


@dataclass(frozen=True, kw_only=True)
class ToolAnswer:
    """Do not run the tool; `content` is its result."""

    content: str
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class ReplaceResult:
    """The tool's result becomes `content`."""

    content: str
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class ReplaceEvent:
    """Persist and emit `event` instead (its id and identity are kept)."""

    event: Event
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class StopRun:
    """End the run before the agent starts: failed, with `reason`."""

    reason: str


_R = TypeVar("_R")
_MaybeAwaitable: TypeAlias = _R | Awaitable[_R]

BeforeModel = Callable[[CallbackContext, ModelRequest], "_MaybeAwaitable[ReplaceRequest | Respond | None]"]
AfterModel = Callable[[CallbackContext, Message], "_MaybeAwaitable[ReplaceResponse | None]"]
BeforeTool = Callable[[ToolCallContext, ToolCall], "_MaybeAwaitable[ReplaceCall | Veto | ToolAnswer | None]"]
AfterTool = Callable[[ToolCallContext, ToolCall, str], "_MaybeAwaitable[ReplaceResult | None]"]
OnEvent = Callable[[CallbackContext, Event], "_MaybeAwaitable[ReplaceEvent | None]"]
BeforeRun = Callable[[CallbackContext], "_MaybeAwaitable[StopRun | None]"]
AfterRun = Callable[["RunRecord"], "_MaybeAwaitable[None]"]


@dataclass(frozen=True, kw_only=True)
class Callbacks:
    """The callables of each extension point, in the order they run."""

    before_model: Sequence[BeforeModel] = ()
    after_model: Sequence[AfterModel] = ()
    before_tool: Sequence[BeforeTool] = ()
    after_tool: Sequence[AfterTool] = ()
    on_event: Sequence[OnEvent] = ()
    before_run: Sequence[BeforeRun] = ()
    after_run: Sequence[AfterRun] = ()

    def __add__(self, other: Callbacks) -> Callbacks:
        """These callbacks, then `other`'s, point by point."""
        return Callbacks(
            **{
                name: (*getattr(self, name), *getattr(other, name))
                for name in (
                    "before_model",
                    "after_model",
                    "before_tool",
                    "after_tool",
                    "on_event",
                    "before_run",
                    "after_run",
                )
            }
        )

    @property
    def empty(self) -> bool:
        return not any(
            (
                self.before_model,
                self.after_model,
                self.before_tool,
                self.after_tool,
                self.on_event,
                self.before_run,
                self.after_run,
            )
        )


NO_CALLBACKS = Callbacks()


def callbacks_for(invocation: Invocation, own: Callbacks | None) -> Callbacks:
    """The Runner's callbacks (from the invocation's services), then the agent's own."""
    runner = invocation.services.get(CALLBACKS_SERVICE)
    combined = runner if isinstance(runner, Callbacks) else NO_CALLBACKS
    return combined + own if own is not None else combined


def callback_name(callback: Any) -> str:
    """How the ledger names a callable: its `name` attribute, its function or class name."""
    name = getattr(callback, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(callback, "__name__", None) or type(callback).__name__


def change_record(point: Point, callback: Any, change: str, note: str = "") -> dict[str, Any]:
    """One entry of `extensions["callbacks"]`."""
    return {"point": point, "callback": callback_name(callback), "change": change, "note": note}


def with_changes(event: Event, changes: Sequence[dict[str, Any]]) -> Event:
    """`event` with `changes` added to its `extensions["callbacks"]`."""
    if not changes:
        return event
    known = list(event.extensions.get(CALLBACKS_EXTENSION) or ())
    return replace(event, extensions={**event.extensions, CALLBACKS_EXTENSION: [*known, *changes]})


async def _call(callback: Callable[..., Any], *args: Any) -> Any:
    result = callback(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


# -- running each point ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelGate:
    """What `before_model` decided: the request to send, or the answer that replaces the call."""

    request: ModelRequest
    response: Message | None
    changes: list[dict[str, Any]]


async def run_before_model(callbacks: Callbacks, context: CallbackContext, request: ModelRequest) -> ModelGate:
    changes: list[dict[str, Any]] = []
    for callback in callbacks.before_model:
        result = await _call(callback, context, request)
        if isinstance(result, ReplaceRequest):
            request = result.request
            changes.append(change_record("before_model", callback, "request", result.note))
        elif isinstance(result, Respond):
            changes.append(change_record("before_model", callback, "short_circuit", result.note))
            return ModelGate(request=request, response=result.message, changes=changes)
        elif result is not None:
            raise TypeError(f"before_model callback {callback_name(callback)!r} returned {result!r}")
    return ModelGate(request=request, response=None, changes=changes)


async def run_after_model(
    callbacks: Callbacks, context: CallbackContext, message: Message
) -> tuple[Message, list[dict[str, Any]]]:
    changes: list[dict[str, Any]] = []
    for callback in callbacks.after_model:
        result = await _call(callback, context, message)
        if isinstance(result, ReplaceResponse):
            message = result.message
            changes.append(change_record("after_model", callback, "response", result.note))
        elif result is not None:
            raise TypeError(f"after_model callback {callback_name(callback)!r} returned {result!r}")
    return message, changes


@dataclass(frozen=True, kw_only=True)
class ToolGate:
    """What `before_tool` decided: the call to run, or why it is not run (veto or answer)."""

    call: ToolCall
    veto: Veto | None
    answer: ToolAnswer | None
    changes: list[dict[str, Any]]


async def run_before_tool(callbacks: Callbacks, context: ToolCallContext, call: ToolCall) -> ToolGate:
    changes: list[dict[str, Any]] = []
    for callback in callbacks.before_tool:
        result = await _call(callback, context, call)
        if isinstance(result, ReplaceCall):
            call = result.call
            changes.append(change_record("before_tool", callback, "call", result.note))
        elif isinstance(result, Veto):
            changes.append(change_record("before_tool", callback, "veto", result.reason))
            return ToolGate(call=call, veto=result, answer=None, changes=changes)
        elif isinstance(result, ToolAnswer):
            changes.append(change_record("before_tool", callback, "short_circuit", result.note))
            return ToolGate(call=call, veto=None, answer=result, changes=changes)
        elif result is not None:
            raise TypeError(f"before_tool callback {callback_name(callback)!r} returned {result!r}")
    return ToolGate(call=call, veto=None, answer=None, changes=changes)


async def run_after_tool(
    callbacks: Callbacks, context: ToolCallContext, call: ToolCall, content: str
) -> tuple[str, list[dict[str, Any]]]:
    changes: list[dict[str, Any]] = []
    for callback in callbacks.after_tool:
        result = await _call(callback, context, call, content)
        if isinstance(result, ReplaceResult):
            content = result.content
            changes.append(change_record("after_tool", callback, "result", result.note))
        elif result is not None:
            raise TypeError(f"after_tool callback {callback_name(callback)!r} returned {result!r}")
    return content, changes


async def run_on_event(callbacks: Callbacks, context: CallbackContext, event: Event) -> Event:
    """`event` as the `on_event` callbacks leave it; a replacement keeps the event's id."""
    for callback in callbacks.on_event:
        result = await _call(callback, context, event)
        if isinstance(result, ReplaceEvent):
            replaced = replace(result.event, id=event.id)
            event = with_changes(replaced, [change_record("on_event", callback, "event", result.note)])
        elif result is not None:
            raise TypeError(f"on_event callback {callback_name(callback)!r} returned {result!r}")
    return event


async def run_before_run(callbacks: Callbacks, context: CallbackContext) -> tuple[StopRun | None, list[dict[str, Any]]]:
    for callback in callbacks.before_run:
        result = await _call(callback, context)
        if isinstance(result, StopRun):
            return result, [change_record("before_run", callback, "stop", result.reason)]
        if result is not None:
            raise TypeError(f"before_run callback {callback_name(callback)!r} returned {result!r}")
    return None, []


async def run_after_run(callbacks: Callbacks, record: RunRecord) -> None:
    for callback in callbacks.after_run:
        await _call(callback, record)


__all__ = [
    "CALLBACKS_EXTENSION",
    "CALLBACKS_SERVICE",
    "AfterModel",
    "AfterRun",
    "AfterTool",
    "BeforeModel",
    "BeforeRun",
    "BeforeTool",
    "CallbackContext",
    "Callbacks",
    "ModelGate",
    "OnEvent",
    "ReplaceCall",
    "ReplaceEvent",
    "ReplaceRequest",
    "ReplaceResponse",
    "ReplaceResult",
    "Respond",
    "StopRun",
    "ToolAnswer",
    "ToolCallContext",
    "ToolGate",
    "Veto",
    "callbacks_for",
    "run_after_model",
    "run_after_run",
    "run_after_tool",
    "run_before_model",
    "run_before_run",
    "run_before_tool",
    "run_on_event",
    "with_changes",
]
