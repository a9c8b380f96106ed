"""Skill profiles and their tools (SPEC 8.2, 8.3): which tools an agent's skills give it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skills_app.core import state as keys
from skills_app.core.skill import SkillError
from skills_app.core.state import LoadMode

SkillProfile = Literal["knowledge_only", "full"]
PROFILES: tuple[SkillProfile, ...] = ("knowledge_only", "full")
KNOWLEDGE_TOOLS = ("skill_load", "skill_list_docs", "skill_select_docs")
EXECUTION_TOOLS = ("skill_run", "workspace_exec")
_SKILL_TOOL_NAMES = frozenset(KNOWLEDGE_TOOLS + EXECUTION_TOOLS)


class SkillToolError(SkillError):
    """A skill tool call that cannot be served; the message goes back to the model."""


@dataclass(frozen=True, kw_only=True)
class SkillsConfig:
    """How an agent uses skills."""

    profile: SkillProfile = "knowledge_only"
    allowed_tools: tuple[str, ...] | None = None
    load_mode: LoadMode = "turn"
    max_loaded_skills: int = 0
    max_overview_skills: int = 50
    require_load_before_run: bool = False
    max_doc_chars: int = 20_000
    max_tool_description_skills: int = 10

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"skills profile must be one of {PROFILES!r}, got {self.profile!r}")
        if self.load_mode not in keys.LOAD_MODES:
            raise ValueError(f"skills load mode must be one of {keys.LOAD_MODES!r}, got {self.load_mode!r}")
        unknown = set(self.allowed_tools or ()) - _SKILL_TOOL_NAMES
        if unknown:
            raise ValueError(f"unknown skill tools {sorted(unknown)!r}; known: {sorted(_SKILL_TOOL_NAMES)!r}")

    @property
    def tool_names(self) -> tuple[str, ...]:
        if self.allowed_tools is not None:
            return tuple(t for t in KNOWLEDGE_TOOLS + EXECUTION_TOOLS if t in self.allowed_tools)
        return KNOWLEDGE_TOOLS + (EXECUTION_TOOLS if self.profile == "full" else ())
