"""What the apps reach of this process's composition: a narrow accessor, set once at start-up.

The composition root (`agentsite.composition`) builds the models, agents, services and the
Runner from settings. Nothing imports it but `agentsite.apps` (an import-linter contract
keeps the apps off it): `AgentsiteConfig.ready` installs the root's `Runtime` here, and the
apps call the functions below. A test or a script may install a `Runtime` of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runs.core.agents.base import Agent
    from runs.core.llm.base import Model
    from runs.core.manager import RunManager
    from sessions_app.core.summary import SummaryEngine
    from skills_app.core.repository import SkillRepository
    from skills_app.core.workspace import WorkspaceConfig


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """The process's built pieces, as the apps may ask for them."""

    run_manager: Callable[[], RunManager]
    """The process's run manager (one per process: the same object on every call)."""
    build_model: Callable[[str | None], Model]
    """A model by its configured name (None: AGENTSITE_MODEL)."""
    summary_engine: Callable[[], SummaryEngine]
    """How this process summarizes (summarizer, trigger, lock)."""
    skill_repository: Callable[[], SkillRepository]
    """The skills the agents can load."""
    workspace_config: Callable[[], WorkspaceConfig]
    """The code workspace and its sandbox limits."""
    replay_agent: Callable[[str, Model, SkillRepository], Agent]
    """The registered agent `name` ("": the default one) rebuilt on `model` with `skills` in
    knowledge-only mode (the evolution gate's replay); LookupError when none has that name."""


_installed: Runtime | None = None


class RuntimeNotInstalled(RuntimeError):
    """An app asked for the runtime before the composition root installed it."""


def install(runtime: Runtime) -> None:
    """Make `runtime` the process's (the composition root calls this at start-up)."""
    global _installed
    _installed = runtime


def current() -> Runtime:
    """The installed runtime."""
    if _installed is None:
        raise RuntimeNotInstalled(
            "the Agentsite runtime is not installed: add 'agentsite' to INSTALLED_APPS "
            "(its AppConfig installs the composition root) or call agentsite.runtime.install()"
        )
    return _installed


def run_manager() -> RunManager:
    """The process's run manager."""
    return current().run_manager()


def build_model(name: str | None = None) -> Model:
    """The model configured under `name` (None: AGENTSITE_MODEL)."""
    return current().build_model(name)


def summary_engine() -> SummaryEngine:
    """How this process summarizes."""
    return current().summary_engine()


def skill_repository() -> SkillRepository:
    """The skills the agents can load."""
    return current().skill_repository()


def workspace_config() -> WorkspaceConfig:
    """The code workspace and its sandbox limits."""
    return current().workspace_config()


def replay_agent(name: str, model: Model, skills: SkillRepository) -> Agent:
    """The registered agent `name` rebuilt for a replay (see `Runtime.replay_agent`)."""
    return current().replay_agent(name, model, skills)
