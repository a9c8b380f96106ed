"""Structured output (issue 20, item 1): an answer that must be a JSON value of a schema.

An `OutputSpec` says what the final answer must be: any JSON object (`json_object`) or an
instance of a JSON Schema (`json_schema`, from a dict or a pydantic model class). The LLM
agent passes it to the model with the request (providers that support it send OpenAI's
`response_format`), validates the final answer with `OutputSpec.check`, tells the model
what is wrong on a mismatch (`feedback_message`) and retries at most `max_retries` times.

`check_schema` refuses a schema that is not valid JSON Schema before anything runs, so
that a surface can answer 400 naming the problem. `minimal_instance` builds a small valid
value of a schema (types, required properties, enums, bounds): the offline model answers
with it, filled from its findings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
from jsonschema.validators import validator_for

from sessions_app.core.events import Message

DEFAULT_OUTPUT_RETRIES = 2
MAX_OUTPUT_RETRIES = 5
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Event extension keys: the validated value on the final answer, the problems on a refused one.
OUTPUT_EXTENSION = "output"
OUTPUT_INVALID_EXTENSION = "output_invalid"
# How many problems one feedback message lists (a wildly wrong answer can have hundreds).
_MAX_PROBLEMS = 8

OutputKind = Literal["json_object", "json_schema"]


class SchemaError(ValueError):
    """The declared schema is not valid JSON Schema; the message names the problem and
    `param` the request field that holds it, when a surface parsed one."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class OutputMismatch(ValueError):
    """An answer that is not valid output: not JSON, or not an instance of the schema."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, kw_only=True)
class OutputSpec:
    """What a run's final answer must be.

    `kind="json_object"`: any JSON object. `kind="json_schema"`: an instance of `schema`
    (checked with the validator of the schema's `$schema`, draft 2020-12 by default);
    `strict` is passed on to models that support it. `model_class`, when the spec was made
    from a pydantic model, parses the value (`OutputSpec.parse`).
    """

    kind: OutputKind = "json_schema"
    schema: Mapping[str, Any] | None = None
    name: str = "output"
    strict: bool = False
    max_retries: int = DEFAULT_OUTPUT_RETRIES
    model_class: type[Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.kind == "json_schema":
            if self.schema is None:
                raise SchemaError("a json_schema output needs a schema")
            check_schema(self.schema)
        if not _NAME.match(self.name):
            raise SchemaError(f"the schema name must be 1-64 letters, digits, '_' or '-', got {self.name!r}")
        if not 0 <= self.max_retries <= MAX_OUTPUT_RETRIES:
            raise SchemaError(f"max_retries must be between 0 and {MAX_OUTPUT_RETRIES}, got {self.max_retries!r}")

    @classmethod
    def of(
        cls,
        schema: Mapping[str, Any] | type[Any],
        *,
        name: str | None = None,
        strict: bool = False,
        max_retries: int = DEFAULT_OUTPUT_RETRIES,
    ) -> OutputSpec:
        """A spec from a JSON Schema dict or a pydantic model class (its `model_json_schema`)."""
        if isinstance(schema, type):
            to_schema: Callable[[], Mapping[str, Any]] | None = getattr(schema, "model_json_schema", None)
            if to_schema is None:
                raise SchemaError(f"{schema.__name__} is not a pydantic model (no model_json_schema)")
            return cls(
                kind="json_schema",
                schema=dict(to_schema()),
                name=name or schema.__name__,
                strict=strict,
                max_retries=max_retries,
                model_class=schema,
            )
        if not isinstance(schema, Mapping):
            raise SchemaError(f"a schema must be a JSON object, got {type(schema).__name__}")
        return cls(
            kind="json_schema", schema=dict(schema), name=name or "output", strict=strict, max_retries=max_retries
        )

    def check(self, text: str) -> Any:
        """The answer's JSON value when it is valid output; `OutputMismatch` naming each problem."""
        try:
            value = json.loads(_strip_fence(text))
        except json.JSONDecodeError as exc:
            raise OutputMismatch(
                [f"the answer is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]
            ) from None
        if self.kind == "json_object" or self.schema is None:
            if not isinstance(value, dict):
                raise OutputMismatch([f"the answer must be a JSON object, got {_json_type(value)}"])
            return value
        validator = validator_for(self.schema)(self.schema)
        errors = sorted(validator.iter_errors(value), key=lambda e: (list(e.absolute_path), e.message))
        if errors:
            problems = [f"{_where(e.absolute_path)}: {e.message}" for e in errors[:_MAX_PROBLEMS]]
            if len(errors) > _MAX_PROBLEMS:
                problems.append(f"... and {len(errors) - _MAX_PROBLEMS} more")
            raise OutputMismatch(problems)
        return value

    def parse(self, value: Any) -> Any:
        """`value` as an instance of the pydantic model the spec was made from (else as is)."""
        if self.model_class is None:
            return value
        return self.model_class.model_validate(value)

    def instruction(self) -> str:
        """What the model is told, for models that cannot take the schema as a parameter."""
        if self.kind == "json_object" or self.schema is None:
            return "Answer with a single JSON object and nothing else."
        schema = json.dumps(self.schema, ensure_ascii=False, sort_keys=True)
        return f"Answer with a single JSON value that matches this JSON Schema, and nothing else: {schema}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form (run records, docs); `model_class` stays in code."""
        data: dict[str, Any] = {
            "kind": self.kind,
            "name": self.name,
            "strict": self.strict,
            "max_retries": self.max_retries,
        }
        if self.schema is not None:
            data["schema"] = dict(self.schema)
        return data


def check_schema(schema: Any) -> None:
    """Refuse what is not a valid JSON Schema (draft of its `$schema`, else 2020-12)."""
    if not isinstance(schema, Mapping):
        raise SchemaError(f"a schema must be a JSON object, got {_json_type(schema)}")
    dialect = schema.get("$schema")
    if dialect is not None and not isinstance(dialect, str):
        raise SchemaError(f"invalid JSON Schema at $.$schema: {dialect!r} is not a URI string")
    validator = validator_for(schema)
    try:
        validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = _where(exc.absolute_path)
        raise SchemaError(f"invalid JSON Schema at {where}: {exc.message}") from None
    # A reference outside the schema would be fetched while validating: never across the network.
    for path, ref in _refs(schema, ()):
        if not ref.startswith("#"):
            raise SchemaError(
                f"invalid JSON Schema at {_where(path)}: only local references ('#/...') are allowed, got {ref!r}"
            )


def _refs(node: Any, path: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    if isinstance(node, Mapping):
        found = [((*path, "$ref"), node["$ref"])] if isinstance(node.get("$ref"), str) else []
        for key, value in node.items():
            found.extend(_refs(value, (*path, key)))
        return found
    if isinstance(node, list):
        return [ref for index, item in enumerate(node) for ref in _refs(item, (*path, index))]
    return []


def output_from_response_format(value: Any, *, param: str = "response_format") -> OutputSpec | None:
    """OpenAI's `response_format` as an output spec: None for `text` (or absent),
    `json_object`, or `json_schema` `{"name", "schema", "strict"?}`. `SchemaError` names the
    offending field (`param`) for anything else, including an invalid schema."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SchemaError(f"{param} must be an object, got {_json_type(value)}", param=param)
    kind = value.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return OutputSpec(kind="json_object")
    if kind != "json_schema":
        raise SchemaError(
            f"{param}.type must be 'text', 'json_object' or 'json_schema', got {kind!r}", param=f"{param}.type"
        )
    spec = value.get("json_schema")
    if not isinstance(spec, Mapping):
        raise SchemaError(f"{param}.json_schema must be an object with name and schema", param=f"{param}.json_schema")
    strict = spec.get("strict", False)
    if not isinstance(strict, bool | None):
        raise SchemaError(f"{param}.json_schema.strict must be a boolean", param=f"{param}.json_schema.strict")
    name = spec.get("name", "output")
    if not isinstance(name, str) or not _NAME.match(name):
        raise SchemaError(
            f"{param}.json_schema.name must be 1-64 letters, digits, '_' or '-', got {name!r}",
            param=f"{param}.json_schema.name",
        )
    schema = spec.get("schema")
    if schema is None:
        raise SchemaError(f"{param}.json_schema.schema is required", param=f"{param}.json_schema.schema")
    try:
        check_schema(schema)
    except SchemaError as exc:
        raise SchemaError(str(exc), param=f"{param}.json_schema.schema") from None
    return OutputSpec(kind="json_schema", schema=dict(schema), name=name, strict=bool(strict))


def feedback_message(spec: OutputSpec, problems: list[str], *, attempt: int) -> Message:
    """The message that tells the model why its answer was refused (sent with the retry)."""
    listed = "\n".join(f"- {p}" for p in problems)
    return Message(
        role="user",
        content=(
            f"Your answer is not valid output (attempt {attempt} of {spec.max_retries + 1}):\n{listed}\n"
            f"{spec.instruction()} Answer again with the corrected JSON only."
        ),
    )


def minimal_instance(schema: Mapping[str, Any], *, text: str = "", count: int = 0) -> Any:
    """A small valid value of `schema`: required properties (and the listed ones whose type is
    simple), the first enum or const value, bounds respected. Strings take `text` (cut to
    `maxLength`), integers and numbers `count` within bounds. `$ref` to `$defs` is followed."""
    root = schema

    def build(node: Any, depth: int) -> Any:
        if not isinstance(node, Mapping) or depth > 8:
            return None
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part, {}) if isinstance(target, Mapping) else {}
            return build(target, depth + 1)
        if "const" in node:
            return node["const"]
        if isinstance(node.get("enum"), list) and node["enum"]:
            return node["enum"][0]
        for combiner in ("allOf", "anyOf", "oneOf"):
            options = node.get(combiner)
            if isinstance(options, list) and options:
                if combiner == "allOf":
                    merged: dict[str, Any] = {}
                    for option in options:
                        if isinstance(option, Mapping):
                            merged.update(option)
                    return build({**merged, **{k: v for k, v in node.items() if k != "allOf"}}, depth + 1)
                non_null = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")]
                return build((non_null or options)[0], depth + 1)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
        if kind is None:
            kind = "object" if "properties" in node else "string"
        if kind == "object":
            properties = node.get("properties") or {}
            required = set(node.get("required") or ())
            value: dict[str, Any] = {}
            for key, sub in properties.items():
                simple = isinstance(sub, Mapping) and sub.get("type") in ("string", "integer", "number", "boolean")
                if key in required or simple:
                    value[key] = build(sub, depth + 1)
            return value
        if kind == "array":
            items = node.get("items") if isinstance(node.get("items"), Mapping) else {}
            return [build(items, depth + 1) for _ in range(int(node.get("minItems") or 0))]
        if kind in ("integer", "number"):
            low = node.get("minimum", node.get("exclusiveMinimum"))
            high = node.get("maximum", node.get("exclusiveMaximum"))
            number = count
            if low is not None:
                number = max(number, low + (1 if "exclusiveMinimum" in node and "minimum" not in node else 0))
            if high is not None:
                number = min(number, high - (1 if "exclusiveMaximum" in node and "maximum" not in node else 0))
            return int(number) if kind == "integer" else number
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        string = text or "n/a"
        if node.get("format") == "date-time":
            string = "1970-01-01T00:00:00Z"
        minimum = int(node.get("minLength") or 0)
        if len(string) < minimum:
            string = string.ljust(minimum, ".")
        maximum = node.get("maxLength")
        return string[: int(maximum)] if maximum is not None else string

    return build(schema, 0)


def _strip_fence(text: str) -> str:
    # Models often wrap JSON in a markdown fence despite being told not to; the value inside
    # is what they meant, and refusing it would cost a retry for nothing.
    stripped = text.strip()
    match = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", stripped, re.S)
    return match.group(1) if match else stripped


def _where(path: Any) -> str:
    parts = list(path)
    if not parts:
        return "$"
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


__all__ = [
    "DEFAULT_OUTPUT_RETRIES",
    "OUTPUT_EXTENSION",
    "OUTPUT_INVALID_EXTENSION",
    "OutputMismatch",
    "OutputSpec",
    "SchemaError",
    "check_schema",
    "feedback_message",
    "minimal_instance",
    "output_from_response_format",
]
