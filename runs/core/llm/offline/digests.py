"""Digests of tool results for the offline planner's answers: the most telling
`key: value` facts of each result, the problems and past resolutions they report, and the
calls that failed."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_DIGEST_CHARS = 400
_VALUE_CHARS = 240
_ITEM_CHARS = 200
_LIST_ITEMS = 3

_TIER_PROBLEM = re.compile(r"error|problem|fail|status|warning|reason")
_TIER_IDENTITY = re.compile(r"^(id|title|name|host|service|subject)$")
_TIER_TIME = re.compile(r"expir|not_after|not_before|valid|days|date|created|resolved|updated|seen|time|_at$")
_TIER_COUNT = re.compile(r"total|count|matches|returned|size|number|^by_")
_TIER_FLAG = re.compile(r"expir|complete|valid|match|^ok$|healthy|success|enabled|active|open|closed|resolved")
_MAX_FACTS = 10


def _truncate(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def _scalar(value: Any, limit: int = _VALUE_CHARS) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return _truncate(str(value), limit)


def _is_empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _tier(key: str, value: Any) -> int:
    lowered = key.lower()
    if _TIER_PROBLEM.search(lowered):
        return 0
    if isinstance(value, bool):
        return 1 if _TIER_FLAG.search(lowered) else 3
    if _TIER_IDENTITY.match(lowered) or _TIER_TIME.search(lowered):
        return 1
    if _TIER_COUNT.search(lowered) or isinstance(value, int | float):
        return 2
    if isinstance(value, list | dict):
        return 4
    return 3


def _facts(data: Mapping[str, Any], *, skip: Mapping[str, Any] | None = None, depth: int = 0) -> list[str]:
    """`key: value` phrases of a JSON object, most telling first (problems, flags, dates,
    counts, then the rest), lists shortened to their first items."""
    skip = skip or {}
    keyed = [
        (k, v)
        for k, v in data.items()
        if not _is_empty(v) and not (k in skip and str(skip[k]).lower() == str(v).lower())
    ]
    ordered = sorted(enumerate(keyed), key=lambda item: (_tier(item[1][0], item[1][1]), item[0]))
    facts: list[str] = []
    for _, (key, value) in ordered:
        if isinstance(value, Mapping) and value and all(isinstance(v, int | float) for v in value.values()):
            # A table of counts reads best in the tool's own order.
            facts.append(f"{key}: " + ", ".join(f"{k}={_scalar(v)}" for k, v in value.items()))
        elif isinstance(value, Mapping):
            if depth >= 1:
                continue
            inner = _facts(value, depth=depth + 1)
            if inner:
                facts.append(f"{key}: " + "; ".join(inner[:10]))
        elif isinstance(value, list):
            facts.append(_list_fact(key, value, data, depth))
        else:
            facts.append(f"{key}: {_scalar(value)}")
    return facts


def _list_fact(key: str, value: list[Any], parent: Mapping[str, Any], depth: int) -> str:
    if all(not isinstance(v, Mapping | list) for v in value) and len(", ".join(map(str, value))) <= _ITEM_CHARS:
        return f"{key}: {', '.join(_scalar(v) for v in value)}"
    shown = value[:_LIST_ITEMS]
    items = []
    for item in shown:
        if isinstance(item, Mapping):
            items.append(_truncate("; ".join(_facts(item, depth=depth + 1)[:5]), _ITEM_CHARS))
        else:
            items.append(_truncate(str(item), _ITEM_CHARS))
    more = f", first {len(shown)}" if len(value) > len(shown) else ""
    return f"{key} ({len(value)}{more}): " + " | ".join(items)


def _parse(content: str) -> Any:
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return content


@dataclass(frozen=True, kw_only=True)
class _Result:
    tool: str
    arguments: Mapping[str, Any]
    content: str

    @property
    def data(self) -> Any:
        return _parse(self.content)

    @property
    def failure(self) -> str | None:
        data = self.data
        if isinstance(data, Mapping) and set(data) == {"error"}:
            return str(data["error"])
        return None

    def header(self) -> str:
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.arguments.items())
        return f"{self.tool}({args})"

    def digest(self) -> str:
        failure = self.failure
        if failure is not None:
            return f"failed: {_truncate(failure, _VALUE_CHARS)}"
        data = self.data
        if isinstance(data, Mapping):
            text = "; ".join(_facts(data, skip=self.arguments)[:_MAX_FACTS])
        elif isinstance(data, list):
            text = _list_fact("items", data, {}, 0)
        else:
            text = str(data)
        return _truncate(text or "(empty result)", _DIGEST_CHARS)


def _label(data: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
    for key in ("host", "id", "name", "service", "title"):
        if data.get(key):
            return str(data[key])
    for value in arguments.values():
        if isinstance(value, str) and value:
            return value
    return ""


def _labelled(label: str, text: str) -> str:
    return f"{label}: {text}" if label else text


def _findings(results: Sequence[_Result]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Problems reported (what they are about, what they say), past resolutions on record
    and tool failures, in result order."""
    problems: list[tuple[str, str]] = []
    resolutions: list[str] = []
    failures: list[str] = []

    def walk(data: Any, arguments: Mapping[str, Any], depth: int) -> None:
        if isinstance(data, list):
            for item in data[:10]:
                walk(item, arguments, depth + 1)
            return
        if not isinstance(data, Mapping) or depth > 2:
            return
        label = _label(data, arguments)
        for key, value in data.items():
            lowered = key.lower()
            if lowered in ("problem", "problems", "error", "errors") and not _is_empty(value):
                texts = value if isinstance(value, list) else [value]
                for text in (t for t in texts if isinstance(t, str) and t.strip()):
                    problems.append((label, _truncate(text, _VALUE_CHARS)))
            elif lowered in ("resolution", "fix", "remediation") and isinstance(value, str) and value.strip():
                resolutions.append(_labelled(label, _truncate(value, 320)))
            elif isinstance(value, Mapping | list):
                walk(value, arguments, depth + 1)

    for result in results:
        failure = result.failure
        if failure is not None:
            failures.append(f"{result.tool}: {_truncate(failure, _VALUE_CHARS)}")
        else:
            walk(result.data, result.arguments, 0)
    return list(dict.fromkeys(problems)), list(dict.fromkeys(resolutions)), failures
