"""FunctionTool: a tool built from a typed Python function.

The JSON schema comes from the type hints, the descriptions from the docstring (the first
paragraph describes the tool; `name: text` lines under an `Args:` heading describe the
parameters). Arguments are checked against the hints before the call; a mismatch goes back
to the model as a `ToolArgumentError` instead of reaching the function.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from runs.core.llm.base import ToolSpec
from runs.core.tools.base import ToolArgumentError, ToolContext

_PRIMITIVES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_for(hint: Any) -> dict[str, Any]:
    origin = get_origin(hint)
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}
    if origin is Literal:
        values = list(get_args(hint))
        return {"type": _PRIMITIVES.get(type(values[0]), "string"), "enum": values}
    if origin in (list, tuple, typing.Sequence, set, frozenset) or hint in (list, tuple):
        args = get_args(hint)
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = _schema_for(args[0])
        return schema
    if origin in (dict, typing.Mapping) or hint is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(hint) if a is not type(None)]
        if len(members) == 1:
            return _schema_for(members[0])
        return {"anyOf": [_schema_for(m) for m in members]}
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    raise TypeError(f"unsupported parameter type {hint!r} for a FunctionTool")


def _is_optional(hint: Any) -> bool:
    return get_origin(hint) in (typing.Union, types.UnionType) and type(None) in get_args(hint)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    doc = inspect.cleandoc(doc or "")
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    params: dict[str, str] = {}
    match = re.search(r"^(Args|Arguments|Parameters):\s*$(.*?)(?:^\S|\Z)", doc, re.M | re.S)
    if match:
        for line in match.group(2).splitlines():
            item = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)", line)
            if item:
                params[item.group(1)] = item.group(2).strip()
    return summary, params


def _check(name: str, value: Any, hint: Any) -> Any:
    """Validate (and gently coerce) one argument against its type hint."""
    if hint is Any or hint is inspect.Parameter.empty:
        return value
    if _is_optional(hint):
        if value is None:
            return None
        hint = next(a for a in get_args(hint) if a is not type(None))
    origin = get_origin(hint)
    if origin is Literal:
        if value not in get_args(hint):
            raise ToolArgumentError(f"{name}: expected one of {list(get_args(hint))!r}, got {value!r}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ToolArgumentError(f"{name}: expected a boolean, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ToolArgumentError(f"{name}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolArgumentError(f"{name}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ToolArgumentError(f"{name}: expected a string, got {value!r}")
        return value
    if origin in (list, tuple, typing.Sequence) or hint in (list, tuple):
        if not isinstance(value, list):
            raise ToolArgumentError(f"{name}: expected an array, got {value!r}")
        args = get_args(hint)
        return [_check(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value)] if args else value
    if origin in (dict, typing.Mapping) or hint is dict:
        if not isinstance(value, dict):
            raise ToolArgumentError(f"{name}: expected an object, got {value!r}")
        return value
    return value


class FunctionTool:
    """Wrap `func(ctx?, **params)`; `ctx` is passed when the first parameter is a ToolContext."""

    def __init__(
        self,
        func: Callable[..., Any] | Callable[..., Awaitable[Any]],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_one_of: Sequence[Sequence[str]] = (),
    ) -> None:
        self._func = func
        self.name = name or func.__name__
        summary, param_docs = _parse_docstring(func.__doc__ or "")
        self.description = description or summary or self.name
        hints = typing.get_type_hints(func)
        signature = inspect.signature(func)
        self._params: dict[str, Any] = {}
        self._wants_context = False
        properties: dict[str, Any] = {}
        required: list[str] = []
        for index, (pname, param) in enumerate(signature.parameters.items()):
            hint = hints.get(pname, Any)
            if index == 0 and hint is ToolContext:
                self._wants_context = True
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"FunctionTool {self.name!r}: *args/**kwargs are not supported")
            self._params[pname] = hint
            schema = _schema_for(hint)
            if pname in param_docs:
                schema["description"] = param_docs[pname]
            if param.default is not inspect.Parameter.empty:
                if param.default is not None:
                    schema["default"] = param.default
            else:
                required.append(pname)
            properties[pname] = schema
        self._required = required
        self._requires_one_of = tuple(tuple(group) for group in requires_one_of)
        unknown = sorted({p for group in self._requires_one_of for p in group} - set(properties))
        if unknown:
            raise TypeError(f"FunctionTool {self.name!r}: requires_one_of names unknown parameter(s) {unknown!r}")
        self._parameters: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self._parameters,
            requires_one_of=self._requires_one_of,
        )

    def validate(self, args: Mapping[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(args) - set(self._params))
        if unknown:
            raise ToolArgumentError(f"unexpected argument(s) {unknown!r}; expected {sorted(self._params)!r}")
        missing = [p for p in self._required if p not in args]
        if missing:
            raise ToolArgumentError(f"missing required argument(s) {missing!r}")
        return {k: _check(k, v, self._params[k]) for k, v in args.items()}

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        kwargs = self.validate(args)
        call_args = (context,) if self._wants_context else ()
        if inspect.iscoroutinefunction(self._func):
            return await self._func(*call_args, **kwargs)
        # Sync tools run in a thread so that parallel tool calls really overlap and a slow
        # tool never blocks the event loop that streams other runs.
        return await asyncio.to_thread(self._func, *call_args, **kwargs)


def function_tool(
    func: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Decorator form of `FunctionTool`."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description)

    return wrap(func) if func is not None else wrap
