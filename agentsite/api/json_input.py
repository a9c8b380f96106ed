"""JSON and text from clients, checked once for every surface (REST, OpenAI-compatible,
AG-UI, A2A, the session websocket).

`parse_json` is the only way a request body or frame becomes Python values: it refuses
what is not JSON (NaN and infinities included: PostgreSQL's jsonb has no such numbers),
nesting deeper than `MAX_JSON_DEPTH` (deeper input would reach the recursion limit in a
parser, a validator or the database layer: a 500), and any string, key or value, holding a
NUL character or a lone surrogate: PostgreSQL stores neither in text or jsonb, and UTF-8
cannot encode a surrogate, so either would fail at the first write. `check_text` does the
same for a single value that did not come as JSON (a header, a query parameter).

Each surface renders `InputError` in its own error format; `field` gives the offending
place in that surface's notation.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

MAX_JSON_DEPTH = 64

InputErrorCode = Literal["malformed_json", "json_too_deep", "invalid_text"]
FieldStyle = Literal["dotted", "brackets"]

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")


class InputError(ValueError):
    """Input refused before any of it is used; `path` is where (keys and list indexes)."""

    def __init__(self, code: InputErrorCode, problem: str, path: Sequence[str | int] = ()) -> None:
        super().__init__(problem)
        self.code: InputErrorCode = code
        self.problem = problem
        self.path = tuple(path)

    def field(self, style: FieldStyle = "dotted", *, prefix: Sequence[str | int] = ()) -> str | None:
        """The place as `messages.0.content` (dotted) or `messages[0].content` (brackets)."""
        return _join((*prefix, *self.path), style)

    def message(self, style: FieldStyle = "dotted", *, prefix: Sequence[str | int] = ()) -> str:
        """The problem, naming the place: `messages[0].content contains a NUL character`."""
        if self.code != "invalid_text":
            return self.problem
        return f"{self.field(style, prefix=prefix) or 'the body'} {self.problem}"


def _join(path: Sequence[str | int], style: FieldStyle) -> str | None:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]" if style == "brackets" else f".{part}"
        else:
            text += f".{part}"
    return text.lstrip(".") or None


def text_problem(value: str) -> str | None:
    """What makes a string unstorable, or None: a NUL character or a lone surrogate."""
    found = _BAD_CHAR.search(value)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "contains a NUL character"
    return f"contains a lone surrogate (U+{ord(char):04X}); text must be valid Unicode"


def check_text(value: str, field: str) -> None:
    """Raise `InputError` naming `field` when `value` cannot be stored as text."""
    problem = text_problem(value)
    if problem is not None:
        raise InputError("invalid_text", problem, (field,))


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"the number {text[:40]!r} is out of range")
    return number


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(raw: bytes | str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text as Python values, or `InputError` (see the module docstring)."""
    try:
        value = json.loads(raw, parse_float=_finite, parse_constant=_constant)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except UnicodeDecodeError as exc:
        raise InputError("malformed_json", f"not valid JSON: the body is not UTF-8 ({exc.reason})") from None
    except ValueError as exc:  # JSONDecodeError, NaN, an integer past Python's digit limit
        raise InputError("malformed_json", f"not valid JSON: {exc}") from None
    _check(value, 1, [], max_depth)
    return value


def _too_deep(max_depth: int) -> InputError:
    return InputError("json_too_deep", f"the JSON nests deeper than {max_depth} levels")


def _check(value: Any, depth: int, path: list[str | int], max_depth: int) -> None:
    """Recursive, but never deeper than `max_depth` + 1 frames."""
    if isinstance(value, str):
        problem = text_problem(value)
        if problem is not None:
            raise InputError("invalid_text", problem, path)
        return
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    if depth > max_depth:
        raise _too_deep(max_depth)
    for key, item in items:
        if isinstance(key, str) and (problem := text_problem(key)) is not None:
            raise InputError("invalid_text", f"has a key that {problem}", path)
        path.append(key)
        _check(item, depth + 1, path, max_depth)
        path.pop()
