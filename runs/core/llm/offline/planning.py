"""The offline planner's tool calls: each offered tool scored by the overlap between the
request's words and the tool's name, description and schema, its parameters filled from
what the request names, and the call kept only when the tool's JSON schema accepts it."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import jsonschema
from jsonschema.validators import validator_for

from runs.core.llm.base import ToolSpec, tool_json
from runs.core.llm.offline.words import _analyse, _Analysis, _vocabulary
from sessions_app.core.text import stem

# A tool is called only when its overlap score reaches this: one word of its name (3), or
# a description word plus a parameter word (2 + 1), or an identifier that fills it (3).
MIN_TOOL_SCORE = 3
MAX_TOOL_CALLS = 4

_NAME_WEIGHT, _DESCRIPTION_WEIGHT, _PARAMETER_WEIGHT = 3, 2, 1
_IDENTIFIER_BONUS = 3
_MAX_QUERY_TERMS = 8

_BACKTICKED_OR_QUOTED = re.compile(r'`([^`]{1,80})`|"([^"]{1,80})"')
_ONE_OF = re.compile(r"one of[:\s]+([^.;()]+)", re.I)

_HOST_PARAMS = frozenset({"host", "hostname", "domain", "server", "fqdn", "url", "endpoint", "site"})
_QUERY_PARAMS = frozenset({"query", "q", "text", "keywords", "keyword", "search", "term", "terms", "pattern", "topic"})


@dataclass(frozen=True, kw_only=True)
class ToolPlan:
    """One tool as the planner sees it: its score, the arguments it could fill, what is
    missing, and what its JSON schema refuses in the arguments (`invalid`)."""

    tool: str
    score: int
    arguments: dict[str, Any]
    missing: tuple[str, ...]
    order: int
    invalid: tuple[str, ...] = ()
    # Enum values the call names (a skill, a mode): the object it acts on.
    targets: tuple[str, ...] = ()

    @property
    def blocked(self) -> bool:
        return bool(self.missing or self.invalid)


def _param_kind(name: str, schema: Mapping[str, Any]) -> str:
    lowered = name.lower()
    description = str(schema.get("description", "")).lower()
    types = _schema_types(schema)
    if "enum" in schema:
        return "enum"
    if "integer" in types or "number" in types:
        return "number"
    if "string" not in types:
        return "unsupported"
    host_suffixes = ("_host", "_hostname", "_domain", "_url")
    if lowered in _HOST_PARAMS or lowered.endswith(host_suffixes) or "hostname" in description:
        return "host"
    if any(k in lowered for k in ("ticket", "incident", "issue")) or (
        (lowered == "id" or lowered.endswith("_id")) and any(k in description for k in ("ticket", "incident", "issue"))
    ):
        return "ticket"
    if len(_listed_values(schema)) >= 2:
        return "listed"
    if lowered in _QUERY_PARAMS or lowered.endswith(("_query", "_text", "_keywords")):
        return "query"
    return "string"


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [str(t) for t in declared]
    types: list[str] = []
    for option in schema.get("anyOf", ()) or ():
        if isinstance(option, Mapping):
            types.extend(_schema_types(option))
    return types


def _listed_values(schema: Mapping[str, Any]) -> list[str]:
    """Values a description spells out: `a`, `b` or "c", or "one of a, b, c"."""
    description = str(schema.get("description", ""))
    values = [next(g for g in m.groups() if g) for m in _BACKTICKED_OR_QUOTED.finditer(description)]
    for match in _ONE_OF.finditer(description):
        values.extend(v.strip(" `\"'") for v in re.split(r",|\bor\b", match.group(1)))
    return list(dict.fromkeys(v for v in values if v and len(v) <= 60))


def _match_value(candidates: Sequence[Any], analysis: _Analysis, used: set[str]) -> Any | None:
    """The candidate the request names first: by word, by stem, or by a distinctive part."""
    best: tuple[int, Any] | None = None
    for candidate in candidates:
        label = str(candidate).lower()
        label_stem = stem(label)
        pieces = re.split(r"[-_.\s]", label)
        parts = [p for p in pieces if len(p) >= 4] if len(pieces) > 1 else []
        for word in analysis.words:
            if word.text in used:
                continue
            if word.text == label or word.stem == label_stem or word.text in parts:
                if best is None or word.position < best[0]:
                    best = (word.position, candidate)
                break
    return None if best is None else best[1]


def _keyword_query(analysis: _Analysis, tool_vocabulary: AbstractSet[str], used: set[str]) -> str:
    """Content words of the request that neither name the tool's purpose nor were used."""
    if analysis.quoted:
        return " ".join(f'"{q}"' if " " in q else q for q in analysis.quoted)
    terms = [w.text for w in analysis.words if w.stem not in tool_vocabulary and w.text not in used]
    terms.extend(h for h in analysis.hosts if h not in used)
    terms.extend(t for t in analysis.tickets if t not in used)
    return " ".join(list(dict.fromkeys(terms))[:_MAX_QUERY_TERMS])


@dataclass(frozen=True, kw_only=True)
class ToolProfile:
    """What the planner reads out of one tool, once: the same tools are offered at every
    model step of every run, and reading them was most of the planner's cost."""

    json: str
    """The tool as the model is told it (name, description, parameters; sorted keys)."""
    properties: Mapping[str, Any]
    required: tuple[str, ...]
    name_vocabulary: frozenset[str]
    description_vocabulary: frozenset[str]
    parameter_vocabulary: frozenset[str]
    kinds: Mapping[str, str]
    ordered: tuple[str, ...]
    """Parameters in filling order: query-like ones last (they take the words the others left)."""
    listed: Mapping[str, list[str]]
    numeric: Mapping[str, bool]
    """Whether a number parameter takes integers."""
    validator: Any


_PROFILES: dict[tuple[str, str, int, tuple[tuple[str, ...], ...]], tuple[Mapping[str, Any], ToolProfile]] = {}
_PROFILES_BY_JSON: dict[tuple[str, tuple[tuple[str, ...], ...]], ToolProfile] = {}
_MAX_PROFILES = 2048


def tool_profile(spec: ToolSpec) -> ToolProfile:
    """The planner's reading of `spec`, remembered.

    A tool hands out specs that share its parameters object (a `ToolSpec` is a frozen
    value: its schema is never changed in place), so the profile is found by that object's
    identity, held alive by the entry; a spec with a schema built afresh is found by its JSON.
    """
    key = (spec.name, spec.description, id(spec.parameters), spec.requires_one_of)
    hit = _PROFILES.get(key)
    if hit is not None and hit[0] is spec.parameters:
        return hit[1]
    text = tool_json(spec)
    profile = _PROFILES_BY_JSON.get((text, spec.requires_one_of))
    if profile is None:
        profile = _read_tool(spec, text)
        if len(_PROFILES_BY_JSON) >= _MAX_PROFILES:
            _PROFILES_BY_JSON.clear()
        _PROFILES_BY_JSON[(text, spec.requires_one_of)] = profile
    if len(_PROFILES) >= _MAX_PROFILES:
        _PROFILES.clear()
    _PROFILES[key] = (spec.parameters, profile)
    return profile


def _read_tool(spec: ToolSpec, text: str) -> ToolProfile:
    parameters = spec.parameters or {}
    properties: Mapping[str, Any] = parameters.get("properties", {}) or {}
    parameter_vocabulary: set[str] = set()
    for pname, schema in properties.items():
        parameter_vocabulary.update(_vocabulary(pname.replace("_", " ")))
        parameter_vocabulary.update(_vocabulary(str(schema.get("description", ""))))
        parameter_vocabulary.update(_vocabulary(" ".join(str(v) for v in schema.get("enum", []) or [])))
    kinds = {pname: _param_kind(pname, schema) for pname, schema in properties.items()}
    return ToolProfile(
        json=text,
        properties=properties,
        required=tuple(str(r) for r in parameters.get("required", []) or []),
        name_vocabulary=frozenset(_vocabulary(re.sub(r"([a-z])([A-Z])", r"\1 \2", spec.name).replace("_", " "))),
        description_vocabulary=frozenset(_vocabulary(spec.description)),
        parameter_vocabulary=frozenset(parameter_vocabulary),
        kinds=kinds,
        ordered=tuple(sorted(properties, key=lambda p: kinds[p] in ("query", "string"))),
        listed={p: _listed_values(properties[p]) for p in properties if kinds[p] == "listed"},
        numeric={p: "integer" in _schema_types(properties[p]) for p in properties if kinds[p] == "number"},
        validator=_validator(json.dumps(spec.parameters or {"type": "object"}, sort_keys=True, default=str)),
    )


def _plan_tool(spec: ToolSpec, analysis: _Analysis, order: int) -> ToolPlan:
    profile = tool_profile(spec)
    properties = profile.properties
    required = profile.required
    name_vocabulary = profile.name_vocabulary
    description_vocabulary = profile.description_vocabulary
    parameter_vocabulary = profile.parameter_vocabulary

    score = 0
    for word_stem in analysis.stems:
        if word_stem in name_vocabulary:
            score += _NAME_WEIGHT
        elif word_stem in description_vocabulary:
            score += _DESCRIPTION_WEIGHT
        elif word_stem in parameter_vocabulary:
            score += _PARAMETER_WEIGHT

    arguments: dict[str, Any] = {}
    used: set[str] = set()
    kinds = profile.kinds
    identified = False
    for pname in profile.ordered:
        schema = properties[pname]
        kind = kinds[pname]
        is_required = pname in required
        value: Any = None
        if kind == "enum":
            value = _match_value(list(schema.get("enum", [])), analysis, used)
        elif kind == "listed":
            value = _match_value(profile.listed[pname], analysis, used)
        elif kind == "host":
            value = next((h for h in analysis.hosts if h not in used), None)
        elif kind == "ticket":
            value = next((t for t in analysis.tickets if t not in used), None)
        elif kind == "number":
            numbers = [n for n in analysis.numbers if str(n) not in used]
            # An optional count is only taken from a modest number (not a year or an id).
            value = next((n for n in numbers if is_required or n < 1000), None)
        elif kind == "query" and (is_required or not identified):
            value = _keyword_query(analysis, name_vocabulary | description_vocabulary, used) or None
        elif kind == "string":
            value = next((q for q in analysis.quoted if q not in used), None)
        if value is None:
            continue
        if kind in ("host", "ticket"):
            identified = True
            score += _IDENTIFIER_BONUS
        if kind == "number" and not profile.numeric[pname]:
            value = float(value)
        arguments[pname] = value
        used.add(str(value).lower())
        if kind in ("enum", "listed"):
            used.update(w.text for w in analysis.words if w.text == str(value).lower() or w.stem == stem(str(value)))
    # Keep the schema's parameter order in the arguments, whatever order they were filled in.
    arguments = {p: arguments[p] for p in properties if p in arguments}
    missing = tuple(p for p in required if p not in arguments)
    if spec.requires_one_of and not any(set(group) <= set(arguments) for group in spec.requires_one_of):
        # A tool whose parameters are each optional but not all at once: without one whole
        # group the call could only fail, so the planner names the first group as missing.
        missing += tuple(p for p in spec.requires_one_of[0] if p not in arguments)
    targets = tuple(str(arguments[p]) for p in properties if p in arguments and kinds[p] == "enum")
    return ToolPlan(
        tool=spec.name,
        score=score,
        arguments=arguments,
        missing=missing,
        order=order,
        invalid=() if missing else _problems(profile.validator, arguments),
        targets=targets,
    )


@functools.lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return None  # a tool with a broken schema is the tool's bug: its own call checks report it
    return cls(schema)


def schema_problems(spec: ToolSpec, arguments: Mapping[str, Any]) -> tuple[str, ...]:
    """What the tool's JSON schema refuses in `arguments` (() when they are valid). The
    planner emits no call that fails this: a call the tool would refuse is no plan."""
    return _problems(tool_profile(spec).validator, arguments)


def _problems(validator: Any, arguments: Mapping[str, Any]) -> tuple[str, ...]:
    if validator is None:
        return ()
    problems = []
    for error in sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in error.absolute_path)
        problems.append(f"{where}: {error.message}" if where else error.message)
    return tuple(problems)


def plan_tool_calls(text: str, tools: Sequence[ToolSpec]) -> tuple[list[ToolPlan], list[ToolPlan]]:
    """(calls to make, relevant tools that lack required arguments or whose arguments their
    schema refuses), best first.

    When more tools fit than a step may call (`MAX_TOOL_CALLS`), a tool acting on an object
    a better-ranked call already names (`skill_run` of the skill `skill_load` loads) gives
    way first: a skill whose description matches the request is loaded, and the step's
    budget goes to the other tools the request asks for before the skill is also run.
    """
    analysis = _analyse(text)
    plans = [_plan_tool(spec, analysis, i) for i, spec in enumerate(tools)]
    relevant = sorted((p for p in plans if p.score >= MIN_TOOL_SCORE), key=lambda p: (-p.score, p.order))
    callable_ = [p for p in relevant if not p.blocked]
    while len(callable_) > MAX_TOOL_CALLS:
        follower = next(
            (
                p
                for p in reversed(callable_)
                if any(set(c.targets) & set(p.targets) for c in callable_[: callable_.index(p)])
            ),
            callable_[-1],
        )
        callable_.remove(follower)
    blocked = [p for p in relevant if p.blocked]
    return callable_, blocked
