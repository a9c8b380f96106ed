"""The agent registry: which agents this server runs.

`AGENTSITE_AGENTS=module:factory,...` names the factories (default: the demo's support,
general and troubleshoot agents). A factory takes the `AgentContext` the composition root
offers and returns one agent or several; each agent brings its own model, tools, skills and
context policy, taking from the context only what it wants (the configured model, the
service tools over this server's recall, memory and artifacts, the skill library, the
checkpoint store). A project adds its agent by putting its own `module:factory` in the
setting: no Agentsite file changes (docs/agents.md).

The same factories rebuild an agent for the evolution gate's replay, with a context whose
model is the replay's and whose services are left out (`AgentContext.for_replay`).

Context policy per agent: `context.governance` is the process-wide policy's governance;
an agent with its own policy passes `governance=context.governance_for(policy)` (a
`ContextPolicy`, often `dataclasses.replace(context.policy, ...)`), and its model calls
compact, pin and summarize within a run as that policy says. The summary jobs that run
between turns stay per session, on the process-wide policy: a session's summary is shared
by every agent that answers in it, so its trigger cannot follow one agent's policy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from agentsite.context_policy import ContextPolicy, governance
from runs.core.agents.base import Agent

if TYPE_CHECKING:
    from runs.core.agents.graph import CheckpointStore
    from runs.core.context.governance import ContextGovernance
    from runs.core.context.recall_preload import SessionRecallPreload
    from runs.core.llm.base import Model
    from runs.core.tools.base import Tool
    from sessions_app.core.summary import SummaryEngine
    from skills_app.core.repository import SkillRepository
    from skills_app.core.tools import SkillToolset


@dataclass(frozen=True, kw_only=True)
class AgentContext:
    """What the composition root offers an agent factory; a factory uses what it needs."""

    model: Model
    """The configured model (AGENTSITE_MODEL)."""
    model_named: Callable[[str], Model]
    """Another configured model by name (an agent's own model: `context.model_named("gpt-4o")`)."""
    governance: ContextGovernance | None = None
    """The process-wide context policy's governance (summaries, compaction, pins); an agent
    with its own policy uses `governance_for(policy)` instead."""
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    """The process-wide context policy `governance` was built from: the base for an agent's
    own (`dataclasses.replace(context.policy, compaction_ratio=0.5)`)."""
    summary_engine: SummaryEngine | None = None
    """How this server summarizes, for the in-run summaries of `governance_for`'s governance
    (None: no synchronous summaries, as in a replay)."""
    context_window: int | None = None
    """AGENTSITE_CONTEXT_WINDOW (None: each model's own window)."""
    service_tools: tuple[Tool, ...] = ()
    """Tools over this server's services: session recall, long-term memory, artifacts."""
    service_instruction: str = ""
    """How to use the service tools (to add to an agent's instruction)."""
    memory_preload: int = 0
    """How many long-term memories to put in the prompt (AGENTSITE_MEMORY_PRELOAD)."""
    session_recall: SessionRecallPreload | None = None
    """Preload session recall (SPEC 5.4): AGENTSITE_RECALL_PRELOAD and its injection; None: off."""
    skills: SkillToolset | None = None
    """The configured skill tools over `skill_repository` (AGENTSITE_SKILLS_*)."""
    skill_repository: SkillRepository | None = None
    """The skill library, for an agent that configures its own skill tools."""
    checkpoints: CheckpointStore | None = None
    """Where graph agents keep their checkpoints (the database in the site)."""
    replay: bool = False
    """True when the agent is rebuilt for the evolution gate's replay (no side effects)."""

    def governance_for(self, policy: ContextPolicy) -> ContextGovernance:
        """The governance an agent with its own context `policy` passes to its `LLMAgent`:
        its model calls compact, pin and summarize within a run as `policy` says (with
        `policy.summaries` off, no in-run summary). The summary jobs between turns are the
        session's and follow the process-wide policy (module docstring)."""
        engine = self.summary_engine if policy.summaries else None
        return governance(policy, engine=engine, context_window=self.context_window)

    @classmethod
    def for_replay(cls, *, model: Model, skills: SkillRepository) -> AgentContext:
        """A replay's context: every model is `model`, the skills (`skills`, the candidate on
        top of the library) in knowledge-only mode, no services, no checkpoints kept."""
        from skills_app.core.tools import SkillsConfig, SkillToolset

        return cls(
            model=model,
            model_named=lambda _name: model,
            skills=SkillToolset(skills, config=SkillsConfig(profile="knowledge_only")),
            skill_repository=skills,
            replay=True,
        )


AgentFactory = Callable[[AgentContext], Agent | Iterable[Agent]]


def load_factory(path: str) -> AgentFactory:
    """The factory `path` (`module:factory`) names; ImproperlyConfigured naming what is wrong."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ImproperlyConfigured(f"AGENTSITE_AGENTS entries are module:factory, got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImproperlyConfigured(f"AGENTSITE_AGENTS: cannot import {module_name!r} ({error})") from error
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ImproperlyConfigured(f"AGENTSITE_AGENTS: {module_name!r} has no callable {attribute!r}")
    return factory  # type: ignore[no-any-return]  # checked callable; what it returns is checked in build


@dataclass(frozen=True)
class AgentRegistry:
    """The agent factories, in the order AGENTSITE_AGENTS lists them."""

    paths: tuple[str, ...]

    @classmethod
    def from_paths(cls, paths: Sequence[str]) -> AgentRegistry:
        registry = cls(tuple(paths))
        for path in registry.paths:
            load_factory(path)  # a bad entry stops the start, not the first run
        return registry

    def build(self, context: AgentContext) -> list[Agent]:
        """Every registered agent, built on `context`; names are unique."""
        agents: list[Agent] = []
        seen: dict[str, str] = {}
        for path in self.paths:
            made: object = load_factory(path)(context)
            if isinstance(made, Agent):
                made_agents: list[object] = [made]
            elif isinstance(made, Iterable) and not isinstance(made, (str, bytes)):
                made_agents = list(made)
            else:
                made_agents = [made]
            for agent in made_agents:
                if not isinstance(agent, Agent):
                    raise ImproperlyConfigured(f"AGENTSITE_AGENTS: {path!r} returned {agent!r}, not an agent")
                if agent.name in seen:
                    raise ImproperlyConfigured(
                        f"AGENTSITE_AGENTS: {path!r} and {seen[agent.name]!r} both make an agent named {agent.name!r}"
                    )
                seen[agent.name] = path
                agents.append(agent)
        if not agents:
            raise ImproperlyConfigured("AGENTSITE_AGENTS made no agent")
        return agents

    def build_named(self, name: str, context: AgentContext) -> Agent:
        """The registered agent `name` built on `context`; LookupError when none has it."""
        for agent in self.build(context):
            if agent.name == name:
                return agent
        raise LookupError(f"no registered agent is named {name!r}")
