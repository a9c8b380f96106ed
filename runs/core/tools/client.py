"""Client-side tools (issue 20 item 2, issue 25 item 9): functions the caller declares with
its request and runs itself.

A client tool is offered to the model beside the agent's own (`RunOptions.client_tools`).
When the model calls one, the agent runs its own tools of that step as usual and ends its
turn there: the assistant event with the calls carries `CLIENT_CALLS_EXTENSION` (the ids of
the calls the client must answer), and the Runner pauses the run durably: status
`requires_action` in its record, a completion event of that status naming the calls. The
client's next request brings `tool` results for those ids (`Runner.start(tool_results=...)`),
which are stored as the results of the calls and continue the same run from there (the
Runner claims it back with `RunStore.resume`).

`ToolChoice` says how the model may use the tools of a request (OpenAI's `tool_choice`).
Parsing the client's wire formats (OpenAI `tools`, AG-UI `Tool`) lives here too, so that
both surfaces refuse the same things in the same words, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

from runs.core.llm.base import ToolChoice, ToolSpec
from runs.core.output import SchemaError, check_schema
from sessions_app.core.events import Event, ToolCall

CLIENT_CALLS_EXTENSION = "client_tool_calls"
"""`Event.extensions[CLIENT_CALLS_EXTENSION]`: ids of the calls in this assistant event that
the client must answer (the run paused for them)."""

# OpenAI's rule for function names; a name outside it is refused by OpenAI-compatible
# upstreams, so it is refused here first, naming the field.
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ClientToolError(ValueError):
    """A client's tool definition or tool choice that cannot be honoured; `param` names
    the field (OpenAI's bracketed form, e.g. `tools[1].function.name`)."""

    def __init__(self, message: str, *, param: str, code: str = "invalid_tools") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def client_tool_spec(name: Any, description: Any, parameters: Any, *, at: str, sep: str = ".") -> ToolSpec:
    """A client tool as a `ToolSpec`, checked: a valid function name, a string description,
    parameters that are a JSON Schema of an object (absent means no arguments)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ClientToolError(
            f"{at}{sep}name must be 1 to 64 letters, digits, '_' or '-', got {name!r}", param=f"{at}{sep}name"
        )
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise ClientToolError(f"{at}{sep}description must be a string", param=f"{at}{sep}description")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    try:
        check_schema(parameters)
    except SchemaError as exc:
        raise ClientToolError(f"{at}{sep}parameters: {exc}", param=f"{at}{sep}parameters") from None
    if parameters.get("type", "object") != "object":
        raise ClientToolError(
            f"{at}{sep}parameters must describe an object (type 'object'), got type {parameters.get('type')!r}",
            param=f"{at}{sep}parameters.type",
        )
    return ToolSpec(name=name, description=description, parameters=dict(parameters))


def openai_tools(raw: Any, *, param: str = "tools") -> tuple[ToolSpec, ...]:
    """OpenAI's `tools` array (`{"type": "function", "function": {name, description,
    parameters, strict?}}`) as tool specs; names must be unique."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ClientToolError(f"{param} must be an array of tool definitions", param=param)
    specs: list[ToolSpec] = []
    for index, item in enumerate(raw):
        at = f"{param}[{index}]"
        if not isinstance(item, dict):
            raise ClientToolError(f"{at} must be an object", param=at)
        if item.get("type", "function") != "function":
            raise ClientToolError(f"{at}.type must be 'function', got {item.get('type')!r}", param=f"{at}.type")
        function = item.get("function")
        if not isinstance(function, dict):
            raise ClientToolError(
                f"{at}.function must be an object with name, description and parameters", param=f"{at}.function"
            )
        specs.append(
            client_tool_spec(
                function.get("name"), function.get("description"), function.get("parameters"), at=f"{at}.function"
            )
        )
    check_unique(specs, lambda i: f"{param}[{i}].function.name")
    return tuple(specs)


def check_unique(specs: Sequence[ToolSpec], where: Callable[[int], str]) -> None:
    """Refuse two client tools of one name; `where(index)` names the second one's field."""
    seen: set[str] = set()
    for index, spec in enumerate(specs):
        if spec.name in seen:
            raise ClientToolError(f"{where(index)}: the tool name {spec.name!r} is declared twice", param=where(index))
        seen.add(spec.name)


def check_clashes(
    specs: Sequence[ToolSpec], server_tools: Collection[str], where: Callable[[int], str], *, agent: str
) -> None:
    """Refuse a client tool named like one of the agent's own: a call of that name would be
    ambiguous (the server's tool would run, never the client's)."""
    for index, spec in enumerate(specs):
        if spec.name in server_tools:
            raise ClientToolError(
                f"{where(index)}: the tool name {spec.name!r} clashes with a tool of the agent {agent!r}; "
                "rename the client tool",
                param=where(index),
                code="tool_name_clash",
            )


def openai_tool_choice(raw: Any, *, param: str = "tool_choice") -> ToolChoice | None:
    """OpenAI's `tool_choice`: `auto`, `none`, `required`, or `{"type": "function",
    "function": {"name"}}` (`check_choice` then checks that the name is offered)."""
    if raw is None:
        return None
    if raw in ("auto", "none", "required"):
        return ToolChoice(mode=raw)
    if not isinstance(raw, dict) or raw.get("type") != "function" or not isinstance(raw.get("function"), dict):
        raise ClientToolError(
            f"{param} must be 'auto', 'none', 'required' or {{'type': 'function', 'function': {{'name': ...}}}}",
            param=param,
            code="invalid_tool_choice",
        )
    name = raw["function"].get("name")
    if not isinstance(name, str) or not name:
        raise ClientToolError(
            f"{param}.function.name must be a non-empty string",
            param=f"{param}.function.name",
            code="invalid_tool_choice",
        )
    return ToolChoice(mode="function", name=name)


def check_choice(choice: ToolChoice | None, names: Collection[str], *, param: str = "tool_choice") -> None:
    """Refuse a tool choice that names a tool the request does not offer (the client's
    tools and the agent's own are offered)."""
    if choice is not None and choice.mode == "function" and choice.name not in names:
        raise ClientToolError(
            f"{param}.function.name {choice.name!r} names no tool offered: {sorted(names)!r}",
            param=f"{param}.function.name",
            code="invalid_tool_choice",
        )


def split_calls(
    calls: Iterable[ToolCall], client: Collection[str], server: Collection[str]
) -> tuple[list[ToolCall], list[ToolCall]]:
    """A step's calls as (the server's to run, the client's to return). A name both sides
    have is the server's (clashes are refused at the door; this keeps the agent's own)."""
    ours: list[ToolCall] = []
    theirs: list[ToolCall] = []
    for call in calls:
        (theirs if call.name in client and call.name not in server else ours).append(call)
    return ours, theirs


def takes_client_tools(agent: object) -> bool:
    """Whether `agent` can be offered client tools: an LLM agent, which ends its run at a
    call of one. A composite or a graph cannot: a child that paused would be followed by
    the next child, the call left behind."""
    return getattr(agent, "kind", None) == "llm"


def client_calls(event: Event) -> list[ToolCall]:
    """The calls of `event` that wait for the client (empty for any other event)."""
    ids = event.extensions.get(CLIENT_CALLS_EXTENSION)
    if not ids or event.message is None:
        return []
    return [call for call in event.message.tool_calls if call.id in set(ids)]


def offered(choice: ToolChoice | None, specs: Sequence[ToolSpec]) -> tuple[ToolSpec, ...]:
    """The tools a request offers under `choice`: none for `none`, else all of them."""
    return () if choice is not None and choice.mode == "none" else tuple(specs)
