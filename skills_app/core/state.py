"""Session state keys of the skill tools (SPEC 8.1), and which skills count as loaded.

`temp:skill:loaded:<skill>` = "1" and `temp:skill:docs:<skill>` = a JSON list of document
paths or `"*"` (all) record a load; the agent-scoped variants
`temp:skill:loaded_by_agent:<agent>/<skill>` and `temp:skill:docs_by_agent:<agent>/<skill>`
are what an agent reads, so that two agents of one session do not share loaded skills.
`temp:skill:order_by_agent:<agent>` is the load order (a JSON list, most recent last) and
`temp:skill:artifacts` the artifacts the last skill or workspace tool call produced.

How long a load shows in the requests is the *load mode*: `turn` (the rest of the
invocation that loaded it), `once` (the next request only) or `session` (until cleared).
The state keys stay; the mode decides from the ledger which loads are still in effect.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

LoadMode = Literal["turn", "once", "session"]
LOAD_MODES: tuple[LoadMode, ...] = ("turn", "once", "session")

LOADED_PREFIX = "temp:skill:loaded:"
DOCS_PREFIX = "temp:skill:docs:"
ARTIFACTS_KEY = "temp:skill:artifacts"
ALL_DOCS: Final = "*"


def loaded_key(skill: str) -> str:
    return f"{LOADED_PREFIX}{skill}"


def docs_key(skill: str) -> str:
    return f"{DOCS_PREFIX}{skill}"


def agent_loaded_key(agent: str, skill: str) -> str:
    return f"temp:skill:loaded_by_agent:{agent}/{skill}"


def agent_docs_key(agent: str, skill: str) -> str:
    return f"temp:skill:docs_by_agent:{agent}/{skill}"


def order_key(agent: str) -> str:
    return f"temp:skill:order_by_agent:{agent}"


def encode_docs(docs: Sequence[str] | Literal["*"]) -> str:
    return ALL_DOCS if docs == ALL_DOCS else json.dumps(list(docs), ensure_ascii=False)


def decode_docs(value: Any) -> list[str] | Literal["*"]:
    if value == ALL_DOCS:
        return ALL_DOCS
    parsed = value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return []
    return [str(v) for v in parsed] if isinstance(parsed, list) else []


def load_delta(agent: str, skill: str, docs: Sequence[str] | Literal["*"], state: Mapping[str, Any]) -> dict[str, Any]:
    """The state delta of loading `skill` (with a docs selection) for `agent`."""
    order = [s for s in _order(state, agent) if s != skill] + [skill]
    encoded = encode_docs(docs)
    return {
        loaded_key(skill): "1",
        docs_key(skill): encoded,
        agent_loaded_key(agent, skill): "1",
        agent_docs_key(agent, skill): encoded,
        order_key(agent): json.dumps(order, ensure_ascii=False),
    }


def docs_delta(agent: str, skill: str, docs: Sequence[str] | Literal["*"]) -> dict[str, Any]:
    encoded = encode_docs(docs)
    return {docs_key(skill): encoded, agent_docs_key(agent, skill): encoded}


def _order(state: Mapping[str, Any], agent: str) -> list[str]:
    try:
        value = json.loads(state.get(order_key(agent)) or "[]")
    except (TypeError, ValueError):
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def selected_docs(state: Mapping[str, Any], agent: str, skill: str) -> list[str] | Literal["*"]:
    return decode_docs(state.get(agent_docs_key(agent, skill), "[]"))


def _loads_in(events: Iterable[Any], agent: str) -> list[str]:
    prefix = f"temp:skill:loaded_by_agent:{agent}/"
    names: list[str] = []
    for event in events:
        for key, value in (getattr(event, "state_delta", None) or {}).items():
            if key.startswith(prefix) and value:
                names.append(key[len(prefix) :])
    return names


def loaded_skills(
    *,
    state: Mapping[str, Any],
    events: Sequence[Any],
    agent: str,
    invocation_id: str,
    mode: LoadMode,
    max_loaded: int = 0,
) -> list[str]:
    """The skills whose content the agent's next request carries, oldest load first.

    `session`: every skill the state marks loaded for the agent. `turn`: those loaded by
    a tool result of this invocation. `once`: those loaded since the invocation's last
    model answer (so only the request right after the load). `max_loaded` keeps the most
    recently loaded N (0: all).
    """
    marked = [s for s in _order(state, agent) if state.get(agent_loaded_key(agent, s))]
    if mode == "session":
        chosen = marked
    else:
        mine = [e for e in events if getattr(e, "invocation_id", None) == invocation_id]
        if mode == "once":
            last_answer = max((i for i, e in enumerate(mine) if getattr(e, "role", None) == "assistant"), default=-1)
            mine = mine[last_answer + 1 :]
        recent = set(_loads_in(mine, agent))
        chosen = [s for s in marked if s in recent]
    if max_loaded > 0:
        chosen = chosen[-max_loaded:]
    return chosen
