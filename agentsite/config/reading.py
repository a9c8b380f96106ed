"""The one list of declared variables, and the only way to read one (issue 22, item 3)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from agentsite.config.context import CONTEXT
from agentsite.config.deployment import DEMO, DJANGO, MODEL, PROCESSES, STORES
from agentsite.config.limits import MEMORY, RUNS
from agentsite.config.skills import EVOLUTION, SKILLS
from agentsite.config.variable import Variable
from agentsite.env import Env

# The order is the table's (docs/settings.md): one section after another.
VARIABLES: tuple[Variable, ...] = (
    *DJANGO,
    *STORES,
    *MODEL,
    *RUNS,
    *MEMORY,
    *CONTEXT,
    *SKILLS,
    *EVOLUTION,
    *PROCESSES,
    *DEMO,
)

BY_NAME: Mapping[str, Variable] = {variable.name: variable for variable in VARIABLES}

# Variables Agentsite no longer reads, with what replaced them. A deployment that still sets
# one is stopped at start-up: a silently ignored setting would leave it running on a default
# it never chose.
RETIRED: Mapping[str, str] = {
    "AGENTSITE_WORKSPACE_UID": (
        "each workspace now runs as a uid of its own: set the pool with AGENTSITE_WORKSPACE_UID_BASE "
        "and AGENTSITE_WORKSPACE_UID_COUNT (docs/skills.md)"
    ),
}

_UNSET: Any = object()


def refuse_retired(environ: Mapping[str, str] | None = None) -> None:
    """Raise ImproperlyConfigured naming every retired variable that is set, and its replacement."""
    env = Env(environ)
    found = [f"{name} is no longer read: {why}" for name, why in RETIRED.items() if env.raw(name) is not None]
    if found:
        raise ImproperlyConfigured("; ".join(found))


def read(name: str, *, default: Any = _UNSET, environ: Mapping[str, str] | None = None) -> Any:
    """The declared variable `name` from the environment, parsed and checked; `default`
    replaces the declared one where it is computed from other settings. A bad value raises
    ImproperlyConfigured naming the variable and what it expects; an undeclared name is a
    KeyError (declare it in VARIABLES first)."""
    variable = BY_NAME[name]
    env = Env(environ)
    value = variable.default if default is _UNSET else default
    match variable.kind:
        case "boolean":
            return env.boolean(name, value)
        case "integer":
            return env.integer(name, value, minimum=variable.minimum)
        case "string":
            return env.string(name, value)
        case "secret":
            return env.raw(name) or value
        case "choice":
            return env.choice(name, value, choices=variable.choices)
        case "strings":
            # A copy: the declaration's default list is shared by every read.
            return list(env.strings(name, value))
        case "url":
            return env.url(name, schemes=variable.schemes) or value
        case "ratio":
            return env.ratio(name, value)
        case "seconds":
            return env.seconds(name, value)
        case "rate":
            return env.rate(name, value)
