"""OfflineModel: the embedded default model (DESIGN 7), a deterministic rule-based planner.

It is not a language model and never says it is one. It lets every path of the product
(tool calls, parallel tools, streaming, summaries) run without a network:

- Plan: when the current turn has no tool results yet, it scores every offered tool by the
  overlap between the user's words and the tool's name, description and parameter
  schema (lowercased, lightly stemmed), fills each parameter from what the request
  contains (hostnames, ticket ids, enum or listed values, quoted strings, numbers, a
  keyword query) and calls, in one response, every tool that clears `MIN_TOOL_SCORE` and
  whose required parameters it could all fill (and one whole group of a tool's
  `requires_one_of`) and whose arguments its JSON schema accepts: never a call with
  required arguments missing or a value the tool would refuse.
- Answer: once the turn's tool results are in (or nothing fits), it writes a short
  Markdown answer: the cause (the problems the results report), the evidence (a digest
  of each result: status, problems, dates, counts, first items) and the fix (steps for
  the certificate problems of the demo's tools, then past resolutions on record), streamed
  word by word, and says the offline planner composed it. A user message in Chinese (CJK
  characters) gets the answer in Chinese; Chinese words of the demo scenario (证书, 日志,
  工单, 扫描, ...) count as their English tool words when planning. When the
  request asks for structured output (issue 20), the answer is instead a valid JSON value
  of the schema (`runs.core.output.minimal_instance`): its strings carry the conclusion,
  its numbers the count of tool results; a JSON object answer is `{"answer": ...}`.
- Summarise: `summarize(text, budget_tokens)` keeps the sentences that carry the most
  entities, numbers, decisions and errors, in their original order, within the budget.

Same request in, same response out: nothing depends on time, randomness or hash order.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jsonschema
from jsonschema.validators import validator_for

from runs.core.attachments import describe_part
from runs.core.llm.base import ModelInfo, ModelRequest, ModelResponse, ToolSpec
from runs.core.output import OutputSpec, minimal_instance
from runs.core.tokens import count_messages, count_text
from sessions_app.core.events import Message, ToolCall, Usage
from sessions_app.core.text import stem

OFFLINE_MODEL_NAME = "offline"
OFFLINE_DESCRIPTION = "deterministic rule-based planner, not a language model"
DEFAULT_CONTEXT_WINDOW = 8192

# A tool is called only when its overlap score reaches this: one word of its name (3), or
# a description word plus a parameter word (2 + 1), or an identifier that fills it (3).
MIN_TOOL_SCORE = 3
MAX_TOOL_CALLS = 4
WORDS_PER_DELTA = 5
_NAME_WEIGHT, _DESCRIPTION_WEIGHT, _PARAMETER_WEIGHT = 3, 2, 1
_IDENTIFIER_BONUS = 3
_MAX_QUERY_TERMS = 8
_DIGEST_CHARS = 400
_VALUE_CHARS = 240
_ITEM_CHARS = 200
_LIST_ITEMS = 3

SIGNATURE = (
    "(Composed by the offline planner from the tool results above: deterministic rules, "
    "not a language model.)"
)

_STOPWORDS = frozenset(
    """
    a about after again all also am an and any are as at be because been before being but by
    can check could did do does doing done for from get give had has have having help her here
    him his how i if in into is it its just know let look me more most my need no not now of
    on or our out please should show so some tell than that the their them then there these
    they this those to too up us very was we were what when where which while who whom why
    will with would you your
    before earlier ever happen happened hello hi last past recent recently seen thank thanks
    today wrong yesterday
    """.split()
)

# Cross-language hints: the seed scenario is written in Chinese, the tools in English.
_CJK_HINTS: tuple[tuple[str, str], ...] = (
    ("证书", "certificate"),
    ("日志", "logs"),
    ("工单", "ticket"),
    ("错误", "error"),
    ("报错", "error"),
    ("失败", "fails"),
    ("过期", "expired"),
    ("握手", "handshake"),
    ("服务", "service"),
    ("支付", "payments"),
    ("搜索", "search"),
    ("查询", "search"),
    ("认证", "auth"),
    ("扫描", "scan"),
    ("所有主机", "fleet"),
    ("全部主机", "fleet"),
    ("集群", "fleet"),
    ("重启", "restart"),
    ("主机", "host"),
    ("网关", "gateway"),
    ("结账", "checkout"),
    ("历史", "past"),
    ("事故", "incident"),
)

_FILE_SUFFIXES = frozenset("py md txt json log pem csv yaml yml html js ts toml ini cfg conf sh png jpg".split())
_HOST = re.compile(
    r"(?<![\w.@-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9])(?![\w-])", re.I
)
_TICKET = re.compile(r"(?<![\w-])([A-Za-z][A-Za-z0-9]{1,9}-\d{1,9})(?![\w-])")
_QUOTED = re.compile(r'"([^"\n]{1,200})"|“([^”\n]{1,200})”|`([^`\n]{1,200})`|(?<!\w)\'([^\'\n]{1,200})\'(?!\w)')
_NUMBER = re.compile(r"(?<![\w.:/-])(\d{1,9})(?![\w:/-]|\.\d)")
_WORD = re.compile(r"[a-z0-9]+(?:[-_][a-z0-9]+)*")
_BACKTICKED_OR_QUOTED = re.compile(r'`([^`]{1,80})`|"([^"]{1,80})"')
_ONE_OF = re.compile(r"one of[:\s]+([^.;()]+)", re.I)

_HOST_PARAMS = frozenset({"host", "hostname", "domain", "server", "fqdn", "url", "endpoint", "site"})
_QUERY_PARAMS = frozenset({"query", "q", "text", "keywords", "keyword", "search", "term", "terms", "pattern", "topic"})


def offline_model_info(context_window: int | None = None) -> ModelInfo:
    """What the offline model reports about itself (window 8,192 unless overridden)."""
    return ModelInfo(
        name=OFFLINE_MODEL_NAME,
        context_window=context_window or DEFAULT_CONTEXT_WINDOW,
        provider="offline",
        description=OFFLINE_DESCRIPTION,
    )


# -- words ----------------------------------------------------------------------------------



def _vocabulary(text: str) -> list[str]:
    """Content-word stems of a text, in order, without duplicates (hyphenated words also
    count by their parts)."""
    return list(_stems_of(text))


@functools.lru_cache(maxsize=4096)
def _stems_of(text: str) -> tuple[str, ...]:
    # Tool names, descriptions and schemas are re-read on every planning step of every run.
    stems: list[str] = []
    for word in _WORD.findall(text.lower()):
        parts = [word] if not re.search(r"[-_]", word) else [word, *re.split(r"[-_]", word)]
        for part in parts:
            if len(part) > 1 and part not in _STOPWORDS and not part.isdigit():
                stems.append(stem(part))
    return tuple(dict.fromkeys(stems))


@dataclass(frozen=True, kw_only=True)
class _Word:
    text: str  # as written, lowercased
    stem: str
    position: int


@dataclass(kw_only=True)
class _Analysis:
    """What the planner reads out of the user's request."""

    text: str
    words: list[_Word] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    tickets: list[str] = field(default_factory=list)
    quoted: list[str] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)

    @property
    def stems(self) -> list[str]:
        return list(dict.fromkeys(w.stem for w in self.words))


def _blank(text: str, start: int, end: int) -> str:
    return text[:start] + " " * (end - start) + text[end:]


def _analyse(text: str) -> _Analysis:
    analysis = _Analysis(text=text)
    masked = text
    for match in _QUOTED.finditer(text):
        value = next(g for g in match.groups() if g is not None).strip()
        if value:
            analysis.quoted.append(value)
    # Identifiers are blanked out (same length, so positions hold) before words are read.
    for match in _HOST.finditer(text):
        host = match.group(1).lower()
        if host.rsplit(".", 1)[-1] not in _FILE_SUFFIXES and host not in analysis.hosts:
            analysis.hosts.append(host)
        masked = _blank(masked, match.start(1), match.end(1))
    for match in _TICKET.finditer(masked):
        ticket = match.group(1).upper()
        if ticket not in analysis.tickets:
            analysis.tickets.append(ticket)
        masked = _blank(masked, match.start(1), match.end(1))
    analysis.numbers = [int(n) for n in _NUMBER.findall(masked)]
    for match in _WORD.finditer(masked.lower()):
        word = match.group(0)
        if word in _STOPWORDS or word.isdigit() or len(word) < 2:
            continue
        analysis.words.append(_Word(text=word, stem=stem(word), position=match.start()))
    for hint, english in _CJK_HINTS:
        index = text.find(hint)
        if index >= 0:
            analysis.words.append(_Word(text=english, stem=stem(english), position=index))
    analysis.words.sort(key=lambda w: w.position)
    return analysis


# -- planning -------------------------------------------------------------------------------


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


def _keyword_query(analysis: _Analysis, tool_vocabulary: set[str], used: set[str]) -> str:
    """Content words of the request that neither name the tool's purpose nor were used."""
    if analysis.quoted:
        return " ".join(f'"{q}"' if " " in q else q for q in analysis.quoted)
    terms = [w.text for w in analysis.words if w.stem not in tool_vocabulary and w.text not in used]
    terms.extend(h for h in analysis.hosts if h not in used)
    terms.extend(t for t in analysis.tickets if t not in used)
    return " ".join(list(dict.fromkeys(terms))[:_MAX_QUERY_TERMS])


def _plan_tool(spec: ToolSpec, analysis: _Analysis, order: int) -> ToolPlan:
    parameters = spec.parameters or {}
    properties: Mapping[str, Any] = parameters.get("properties", {}) or {}
    required = [str(r) for r in parameters.get("required", []) or []]

    name_vocabulary = set(_vocabulary(re.sub(r"([a-z])([A-Z])", r"\1 \2", spec.name).replace("_", " ")))
    description_vocabulary = set(_vocabulary(spec.description))
    parameter_vocabulary: set[str] = set()
    for pname, schema in properties.items():
        parameter_vocabulary.update(_vocabulary(pname.replace("_", " ")))
        parameter_vocabulary.update(_vocabulary(str(schema.get("description", ""))))
        parameter_vocabulary.update(_vocabulary(" ".join(str(v) for v in schema.get("enum", []) or [])))

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
    kinds = {pname: _param_kind(pname, schema) for pname, schema in properties.items()}
    # Query-like parameters last: they take the words the others left.
    ordered = sorted(properties, key=lambda p: kinds[p] in ("query", "string"))
    identified = False
    for pname in ordered:
        schema = properties[pname]
        kind = kinds[pname]
        is_required = pname in required
        value: Any = None
        if kind == "enum":
            value = _match_value(list(schema.get("enum", [])), analysis, used)
        elif kind == "listed":
            value = _match_value(_listed_values(schema), analysis, used)
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
        if kind == "number" and "integer" not in _schema_types(schema):
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
        tool=spec.name, score=score, arguments=arguments, missing=missing, order=order,
        invalid=() if missing else schema_problems(spec, arguments), targets=targets,
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
    validator = _validator(json.dumps(spec.parameters or {"type": "object"}, sort_keys=True, default=str))
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
        follower = next((p for p in reversed(callable_) if any(
            set(c.targets) & set(p.targets) for c in callable_[:callable_.index(p)])), callable_[-1])
        callable_.remove(follower)
    blocked = [p for p in relevant if p.blocked]
    return callable_, blocked


# -- digests of tool results ----------------------------------------------------------------

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
        (k, v) for k, v in data.items()
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


Language = Literal["en", "zh"]
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_CAUSE = re.compile(r"^\*\*(?:Cause:|原因：)\*\*\s*")


def answer_language(user_text: str) -> Language:
    """Chinese when the user's message holds CJK characters (the demo's readers write
    Chinese), else English: the planner answers in the user's language."""
    return "zh" if _CJK.search(user_text or "") else "en"


# What the planner writes, in each language it answers in.
_TEXT: dict[Language, dict[str, str]] = {
    "en": {
        "failed": "Could not complete this request: {failed} of {total} tool call(s) failed.",
        "cause": "**Cause:** {cause}",
        "causes": "**Cause:** the results report {count} problems:",
        "no_problem": "**Cause:** none of the results reports a problem.",
        "nothing": "**Cause:** no tool produced a result, so there is nothing to conclude yet.",
        "partial": "**Cause:** the results that came back report no problem, but the failed call(s) above mean "
                   "the request was not done.",
        "evidence": "**Evidence**",
        "fix": "**Fix**",
        "no_fix": "Nothing to fix from these results.",
        "no_known_fix": "No fix on record for this: ask to look up past tickets about it, or to inspect the host "
                        "it names.",
        "retry": "Fix what made the failed call(s) fail and ask again.",
        "on_record": "On record: {resolution}",
        "renew": "Renew the certificate of {host} and deploy it with its full chain (leaf + intermediate), "
                 "then reload the service.",
        "chain": "Rebuild the certificate bundle of {host} as leaf + intermediate and reload the service.",
        "names": "Reissue the certificate of {host} with the names clients use.",
        "verify": "Verify with `openssl s_client -connect {host}:443 -showcerts`.",
        "prevent": "Prevent a repeat: alert on certificates well before they expire and check the chain in deploys.",
        "signature": SIGNATURE,
        "no_tool": "The offline planner (a deterministic rule-based planner, not a language model) found no "
                   "tool it could call for this request.",
        "needs": "{tool} looks relevant but needs {needs}, which the request does not give.",
        "misfit": "{tool} looks relevant but the arguments the request gives do not fit it: {problems}.",
        "can_do": "What it can do here:",
        "ask_again": "Ask again naming what to look at (for example a host, a service, an id or keywords).",
        "no_tools": "This agent has no tools, and without a language model configured the planner cannot hold "
                    "a free-form conversation: it can only run tools and report their results.",
        "short_signature": "(Composed by the offline planner.)",
    },
    "zh": {
        "failed": "无法完成此请求：{total} 个工具调用中有 {failed} 个失败。",
        "cause": "**原因：**{cause}",
        "causes": "**原因：**结果报告了 {count} 个问题：",
        "no_problem": "**原因：**所有结果都没有报告问题。",
        "nothing": "**原因：**没有任何工具返回结果，目前无法得出结论。",
        "partial": "**原因：**返回的结果没有报告问题，但上面失败的调用说明请求没有完成。",
        "evidence": "**证据**",
        "fix": "**修复**",
        "no_fix": "根据这些结果，没有需要修复的内容。",
        "no_known_fix": "没有关于此问题的修复记录：可以让我查找相关的历史工单，或检查它提到的主机。",
        "retry": "先解决导致调用失败的问题，然后再问一次。",
        "on_record": "以往记录：{resolution}",
        "renew": "续签 {host} 的证书，并连同完整证书链（叶证书 + 中间证书）一起部署，然后重新加载服务。",
        "chain": "将 {host} 的证书包重建为叶证书 + 中间证书，并重新加载服务。",
        "names": "用客户端实际使用的名称为 {host} 重新签发证书。",
        "verify": "用 `openssl s_client -connect {host}:443 -showcerts` 验证。",
        "prevent": "防止再次发生：在证书过期前尽早告警，并在部署时检查证书链。",
        "signature": "（由离线规划器根据上述工具结果生成：确定性规则，不是语言模型。）",
        "no_tool": "离线规划器（确定性的规则规划器，不是语言模型）没有找到可以为此请求调用的工具。",
        "needs": "{tool} 看起来相关，但需要 {needs}，而请求中没有提供。",
        "misfit": "{tool} 看起来相关，但请求给出的参数不符合它的要求：{problems}。",
        "can_do": "这里可以做的：",
        "ask_again": "请再问一次，并说明要查看的对象（例如主机、服务、编号或关键词）。",
        "no_tools": "这个智能体没有工具；在没有配置语言模型时，规划器无法进行自由对话，只能调用工具并报告结果。",
        "short_signature": "（由离线规划器生成。）",
    },
}

# Known problem texts of the demo's tools, in Chinese (the tools report in English).
_PROBLEMS_ZH: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"certificate expired on (\S+) \((\d+) days? ago\)"), r"证书已于 \1 过期（\2 天前）"),
    (re.compile(r"certificate expires on (\S+) \(in (\d+) days?\)"), r"证书将于 \1 过期（还有 \2 天）"),
    (re.compile(r"chain is missing the intermediate issuer '([^']+)' of '([^']+)'"),
     r"证书链缺少 '\2' 的中间证书签发者 '\1'"),
)


def _say(language: Language, problem: str) -> str:
    if language == "en":
        return problem
    for pattern, replacement in _PROBLEMS_ZH:
        problem = pattern.sub(replacement, problem)
    return problem


def _fixes(problems: Sequence[tuple[str, str]], language: Language) -> list[str]:
    """Concrete steps for the problems the demo's tools report (certificates): renew,
    rebuild the chain, reissue for the right names; then verify and prevent a repeat."""
    text = _TEXT[language]
    steps: list[str] = []
    hosts: list[str] = []
    for label, problem in problems:
        lowered = problem.lower()
        if not (label and _HOST.fullmatch(label)):
            # A log line's source is a service: the host its message names is what to fix.
            named = _HOST.search(problem)
            label = named.group(1) if named else label
        host = label or "the host"
        if "expired" in lowered or "expires" in lowered:
            steps.append(text["renew"].format(host=host))
        elif "chain" in lowered or "intermediate" in lowered:
            steps.append(text["chain"].format(host=host))
        elif "hostname" in lowered or "does not match" in lowered or "names" in lowered:
            steps.append(text["names"].format(host=host))
        else:
            continue
        if label and _HOST.fullmatch(label):
            hosts.append(label)
    if hosts:
        steps.extend(text["verify"].format(host=h) for h in dict.fromkeys(hosts))
    if steps:
        steps.append(text["prevent"])
    return list(dict.fromkeys(steps))


_LOG_ERROR = re.compile(r"^(?P<at>\S+)\s+(?:ERROR|FATAL|CRITICAL)\s+(?:\[(?P<source>[^\]]+)\]\s*)?(?P<message>.+)$")


def _log_errors(results: Sequence[_Result]) -> list[tuple[str, str]]:
    """(source, message at time) of the error lines in log-like results (a `lines` list of
    "<time> <LEVEL> [source] message" strings), first per source, in result order."""
    found: dict[str, str] = {}
    for result in results:
        data = result.data
        lines = data.get("lines") if isinstance(data, Mapping) else None
        for line in lines if isinstance(lines, list) else ():
            match = _LOG_ERROR.match(line) if isinstance(line, str) else None
            if match is not None:
                source = match.group("source") or ""
                found.setdefault(source, f"{_truncate(match.group('message'), _VALUE_CHARS)} ({match.group('at')})")
    return list(found.items())


def _compose_answer(results: Sequence[_Result], language: Language = "en") -> str:
    """The answer as a short incident note in Markdown: the cause, the evidence (one line
    per tool call), the fix (steps for the problems found, and past resolutions on record)."""
    text = _TEXT[language]
    problems, resolutions, failures = _findings(results)
    logged = not problems and _log_errors(results)
    if logged:
        # Logs are evidence; an error they hold is the cause only when no tool reports a
        # problem of its own (a certificate check's finding explains the log lines).
        problems = logged
    lines: list[str] = []
    if failures:
        # A failed step comes first and in plain words: an answer that reads as "no problem
        # found" when the work could not be done misleads more than no answer.
        lines.append(text["failed"].format(failed=len(failures), total=len(results)))
        lines.extend(f"- {failure}" for failure in failures)
        lines.append("")
    said = [_labelled(label, _say(language, problem)) for label, problem in problems]
    if len(said) == 1:
        lines.append(text["cause"].format(cause=said[0].rstrip(".") + ("。" if language == "zh" else ".")))
    elif said:
        lines.append(text["causes"].format(count=len(said)))
        lines.extend(f"{i}. {p}" for i, p in enumerate(said[:5], 1))
    elif failures and len(failures) == len(results):
        lines.append(text["nothing"])
    elif failures:
        lines.append(text["partial"])
    else:
        lines.append(text["no_problem"])
    lines.extend(["", text["evidence"]])
    lines.extend(f"- `{result.header()}`: {result.digest()}" for result in results)
    lines.extend(["", text["fix"]])
    steps = _fixes(problems, language)
    lines.extend(f"{i}. {step}" for i, step in enumerate(steps, 1))
    # Past resolutions about what is broken now come first (a ticket on another host is
    # only a hint).
    subjects = [label for label, _ in problems if label]
    resolutions = sorted(resolutions, key=lambda r: not any(subject in r for subject in subjects))
    lines.extend(f"- {text['on_record'].format(resolution=r)}" for r in resolutions[:2])
    if not steps and not resolutions:
        lines.append(text["retry"] if failures else text["no_known_fix"] if problems else text["no_fix"])
    lines.extend(["", text["signature"]])
    return "\n".join(lines)


def _compose_no_tool_answer(tools: Sequence[ToolSpec], blocked: Sequence[ToolPlan], language: Language = "en") -> str:
    text = _TEXT[language]
    lines = [text["no_tool"]]
    specs = {spec.name: spec for spec in tools}
    for plan in blocked:
        needs = []
        for pname in plan.missing:
            schema = (specs[plan.tool].parameters.get("properties", {}) or {}).get(pname, {})
            hint = schema.get("description")
            needs.append(f"`{pname}` ({_truncate(str(hint), 120)})" if hint else f"`{pname}`")
        if needs:
            lines.append(text["needs"].format(tool=plan.tool, needs=", ".join(needs)))
        else:
            lines.append(text["misfit"].format(tool=plan.tool, problems="; ".join(plan.invalid[:2])))
    if tools:
        lines.extend(["", text["can_do"]])
        lines.extend(f"- {spec.name}: {_truncate(spec.description, 200)}" for spec in tools)
        lines.extend(["", text["ask_again"]])
    else:
        lines.append(text["no_tools"])
    lines.extend(["", text["short_signature"]])
    return "\n".join(lines)


# -- summaries ------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^\s.])|(?<=[\u3002\uff01\uff1f])")
_DECISION = re.compile(
    r"\b(decid\w*|decision|agreed?|conclu\w*|resolv\w*|resolution|fix\w*|plan\w*|chose|choose|"
    r"will|must|should|next step|action|todo|approv\w*|rollback|roll back|renew\w*|deploy\w*)\b|"
    r"决定|结论|计划|修复|需要|应该",
    re.I,
)
_ERROR = re.compile(
    r"\b(errors?|fail\w*|exceptions?|expir\w*|timeouts?|timed out|refused|denied|crash\w*|missing|"
    r"invalid|broken|outage|incident|unable|cannot|can't|rejected?|5\d\d)\b|错误|失败|过期|异常|超时",
    re.I,
)


def _split_sentences(text: str) -> list[str]:
    sentences: list[str] = []
    for line in text.splitlines():
        for piece in _SENTENCE_END.split(line):
            piece = piece.strip()
            if piece:
                sentences.append(piece)
    return sentences


def _join(sentences: Iterable[str]) -> str:
    """Sentences joined by a space, or by nothing after a CJK sentence end."""
    out = ""
    for sentence in sentences:
        if out and not out.endswith(("\u3002", "\uff01", "\uff1f")):
            out += " "
        out += sentence
    return out


def _sentence_score(sentence: str) -> float:
    analysis = _analyse(sentence)
    entities = len(analysis.hosts) + len(analysis.tickets) + len(analysis.quoted)
    numbers = len(re.findall(r"\d+(?:[.:]\d+)*", sentence))
    score = 2.0 * min(entities, 3) + 1.0 * min(numbers, 4)
    score += 2.0 * min(len(_DECISION.findall(sentence)), 2)
    score += 2.5 * min(len(_ERROR.findall(sentence)), 2)
    if len(sentence.split()) < 4 and not re.search(r"[\u3000-\u9fff]", sentence):
        score -= 1.0
    return score


def extractive_summary(text: str, budget_tokens: int) -> str:
    """The most informative sentences of `text`, in their original order, within the budget.

    A sentence scores by the entities (hosts, ids, quoted names), numbers, decision words
    and error words it carries. When even the best sentence is too long, its head is kept.
    """
    if budget_tokens <= 0 or not text.strip():
        return ""
    if count_text(text.strip()) <= budget_tokens:
        return text.strip()
    sentences = _split_sentences(text)
    sizes = [count_text(s) for s in sentences]
    scores = [_sentence_score(s) for s in sentences]
    ranked = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    chosen: list[int] = []
    used = 0
    for index in ranked:
        if scores[index] < 0 and chosen:
            break  # fragments ("Ok.") only stand in when nothing better fits
        # Joining costs at most about one token per sentence.
        if used + sizes[index] + 1 <= budget_tokens:
            chosen.append(index)
            used += sizes[index] + 1
    # Verify against the real count of the joined text; drop the weakest picks if needed.
    while chosen and count_text(_join(sentences[i] for i in sorted(chosen))) > budget_tokens:
        chosen.pop()
    if chosen:
        return _join(sentences[i] for i in sorted(chosen))
    words = sentences[ranked[0]].split() if ranked else []
    while words and count_text(" ".join(words) + " …") > budget_tokens:
        words.pop()
    return " ".join(words) + " …" if words else ""


# -- the model ------------------------------------------------------------------------------


def _turn(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """The last user message's text and the messages after it."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return messages[index].content, list(messages[index + 1:])
    return None, []


def _attachments_notice(messages: Sequence[Message], language: Language = "en") -> str:
    """Issue 20: the planner reads text only, and says so plainly when the user's message
    came with images or files, naming what it received ("" when there were none)."""
    user = next((m for m in reversed(messages) if m.role == "user"), None)
    if user is None or not user.attachments:
        return ""
    received = "; ".join(describe_part(p) for p in user.attachments)
    if language == "zh":
        return f"我看不到图片，也读不了附件：离线规划器只处理文字。收到的附件：{received}。\n\n"
    return (f"I cannot see images or read attached files: the offline planner works on text only. "
            f"I received: {received}.\n\n")


def _turn_results(after_user: Sequence[Message]) -> list[_Result]:
    calls: dict[str, ToolCall] = {}
    results: list[_Result] = []
    for message in after_user:
        for call in message.tool_calls:
            calls[call.id] = call
        if message.role == "tool":
            call = calls.get(message.tool_call_id or "")
            arguments = _parse(call.arguments) if call is not None else {}
            results.append(_Result(
                tool=message.tool_name or (call.name if call is not None else "tool"),
                arguments=arguments if isinstance(arguments, Mapping) else {},
                content=message.content,
            ))
    return results


def _chunks(text: str, words_per_delta: int) -> Iterable[str]:
    pieces = re.findall(r"\S+\s*|\s+", text)
    for start in range(0, len(pieces), words_per_delta):
        yield "".join(pieces[start:start + words_per_delta])


class OfflineModel:
    """The offline model: a deterministic rule-based planner, not a language model.

    Plans tool calls from the request, answers by composing tool results, summarises
    extractively. See the module docstring for the rules.
    """

    def __init__(self, context_window: int | None = None) -> None:
        if context_window is not None and context_window <= 0:
            raise ValueError(f"context_window must be positive, got {context_window!r}")
        self._info = offline_model_info(context_window)

    def info(self) -> ModelInfo:
        return self._info

    def summarize(self, text: str, budget_tokens: int) -> str:
        """Extractive summary of `text` within `budget_tokens` (see `extractive_summary`)."""
        return extractive_summary(text, budget_tokens)

    def respond(self, request: ModelRequest) -> Message:
        """The complete assistant message for a request (what `generate` streams)."""
        user_text, after_user = _turn(request.messages)
        if user_text is None:
            return Message(
                role="assistant",
                content="The offline planner found no user request to act on.\n\n(Composed by the offline planner.)",
            )
        results = _turn_results(after_user)
        language = answer_language(user_text)
        notice = _attachments_notice(request.messages, language)
        if results:
            return self._answer(request.output, notice + _compose_answer(results, language), len(results))
        calls, blocked = plan_tool_calls(user_text, request.tools) if request.tools else ([], [])
        if calls:
            first = sum(len(m.tool_calls) for m in request.messages) + 1
            return Message(role="assistant", tool_calls=tuple(
                ToolCall(
                    id=f"offline_call_{first + i}",
                    name=plan.tool,
                    arguments=json.dumps(plan.arguments, ensure_ascii=False),
                )
                for i, plan in enumerate(calls)
            ))
        return self._answer(request.output, notice + _compose_no_tool_answer(request.tools, blocked, language), 0)

    @staticmethod
    def _answer(output: OutputSpec | None, text: str, count: int) -> Message:
        """The text answer, or, when the request wants structured output, a valid JSON value
        carrying its conclusion (the line that says what the findings mean)."""
        if output is None:
            return Message(role="assistant", content=text)
        signatures = {_TEXT[language]["signature"] for language in _TEXT}
        lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() not in signatures]
        at = next((i for i, line in enumerate(lines) if _CAUSE.match(line)), None)
        gist = lines[0] if at is None and lines else ""
        if at is not None:
            # Several problems are listed under the cause line: the gist carries them all.
            listed = [line for line in lines[at + 1:at + 6] if re.match(r"\d+\. ", line)]
            gist = " ".join([_CAUSE.sub("", lines[at]), *listed])
        if output.kind == "json_object" or output.schema is None:
            value: Any = {"answer": gist}
        else:
            value = minimal_instance(output.schema, text=gist, count=count)
        return Message(role="assistant", content=json.dumps(value, ensure_ascii=False))

    async def generate(self, request: ModelRequest) -> AsyncIterator[ModelResponse]:
        message = self.respond(request)
        response_id = f"offline-{_fingerprint(request)}"
        name = self._info.name
        for delta in _chunks(message.content, WORDS_PER_DELTA):
            yield ModelResponse(id=response_id, partial=True, delta=delta, model=name)
        if message.tool_calls:
            completion = sum(count_text(c.name) + count_text(c.arguments) for c in message.tool_calls)
        else:
            completion = count_text(message.content)
        yield ModelResponse(
            id=response_id,
            partial=False,
            message=message,
            finish_reason="tool_calls" if message.tool_calls else "stop",
            usage=Usage(prompt_tokens=_prompt_tokens(request), completion_tokens=completion),
            model=name,
        )


def _tool_json(spec: ToolSpec) -> str:
    return json.dumps(
        {"name": spec.name, "description": spec.description, "parameters": spec.parameters},
        sort_keys=True, ensure_ascii=False, default=str,
    )


def _prompt_tokens(request: ModelRequest) -> int:
    return count_messages(request.messages) + sum(count_text(_tool_json(t)) for t in request.tools)


def _fingerprint(request: ModelRequest) -> str:
    digest = hashlib.sha256()
    for message in request.messages:
        digest.update(json.dumps(message.to_dict(), sort_keys=True, ensure_ascii=False).encode())
    for spec in request.tools:
        digest.update(_tool_json(spec).encode())
    return digest.hexdigest()[:16]
