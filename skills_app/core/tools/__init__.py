"""Skill tools and profiles (SPEC 8.2, 8.3): `from skills_app.core.tools import SkillToolset`.

`config` holds the profiles and `SkillsConfig`; `toolset` the `SkillToolset` (the skills
block of the system prompt and the knowledge tools); `execution` the tools that run
commands in the run's workspace (`skill_run`, `workspace_exec`).
"""

from skills_app.core.tools.config import (
    EXECUTION_TOOLS,
    KNOWLEDGE_TOOLS,
    PROFILES,
    SkillProfile,
    SkillsConfig,
    SkillToolError,
)
from skills_app.core.tools.execution import SESSIONS_SERVICE, TOOL_RESULTS_INPUT, SkillExecution, session_tool_results
from skills_app.core.tools.toolset import SkillToolset

__all__ = [
    "EXECUTION_TOOLS",
    "KNOWLEDGE_TOOLS",
    "PROFILES",
    "SESSIONS_SERVICE",
    "TOOL_RESULTS_INPUT",
    "SkillExecution",
    "SkillProfile",
    "SkillToolError",
    "SkillToolset",
    "SkillsConfig",
    "session_tool_results",
]
