"""Skill tools and profiles (SPEC 8.2, 8.3) and the skills block of the system prompt.

Profiles: `knowledge_only` (the default) gives `skill_load`, `skill_list_docs` and
`skill_select_docs`, which never execute anything; `full` adds `skill_run` and
`workspace_exec`, which run commands in the run's sandboxed workspace
(`skills_app.core.workspace`). `allowed_tools` overrides the profile (empty: none).

`SkillToolset.instruction_block` is the skills request processor: "Available skills:"
(name and description, the first `max_overview_skills`, the rest as names), what the
agent can do with them, then for each loaded skill (per the load mode, see
`skills_app.core.state`) its SKILL.md body and the documents chosen for it.

The execution tools (`skill_run`, `workspace_exec`) are in `skills_app.core.tools.execution`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from runs.core.llm.base import ToolSpec
from runs.core.tools.base import Tool, ToolContext
from runs.core.tools.function import FunctionTool
from skills_app.core import state as keys
from skills_app.core.repository import SkillRepository
from skills_app.core.skill import Skill, SkillError, SkillSummary
from skills_app.core.tools.config import EXECUTION_TOOLS, SkillsConfig, SkillToolError
from skills_app.core.tools.execution import SkillExecution
from skills_app.core.workspace import WorkspaceExecutor
from skills_app.core.workspace_fs import SANDBOX_ROOT


class _SkillTool:
    """A FunctionTool whose `skill` parameter lists the repository's skills (an enum the
    model, and the offline planner, can pick from) and whose description may name them."""

    def __init__(self, inner: FunctionTool, toolset: SkillToolset, *, list_in_description: bool) -> None:
        self._inner = inner
        self._toolset = toolset
        self._list_in_description = list_in_description
        self.name = inner.name
        self._parameters: tuple[tuple[str, ...], dict[str, Any]] | None = None

    @property
    def description(self) -> str:
        base = self._inner.description
        if not self._list_in_description:
            return base
        listing = self._toolset.listing()
        return f"{base} Skills: {listing}" if listing else base

    def spec(self) -> ToolSpec:
        spec = self._inner.spec()
        names = tuple(s.name for s in self._toolset.known)
        if self._parameters is None or self._parameters[0] != names:
            # Built again only when the skills change: one schema object per catalog lets
            # every model call reuse its JSON and token count (`tool_json`).
            parameters = json.loads(json.dumps(spec.parameters))
            skill = parameters.get("properties", {}).get("skill")
            if skill is not None and names:
                skill["enum"] = list(names)
            self._parameters = (names, parameters)
        return ToolSpec(name=spec.name, description=self.description, parameters=self._parameters[1])

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        return await self._inner.call(context, args)


class SkillToolset:
    """The skill tools of one agent over a repository (and, for `full`, an executor)."""

    def __init__(
        self,
        repository: SkillRepository,
        *,
        config: SkillsConfig | None = None,
        executor: WorkspaceExecutor | None = None,
    ) -> None:
        self.repository = repository
        self.config = config or SkillsConfig()
        self.executor = executor
        self.known: list[SkillSummary] = []
        if any(t in EXECUTION_TOOLS for t in self.config.tool_names) and executor is None:
            raise ValueError(f"skill tools {EXECUTION_TOOLS!r} need a WorkspaceExecutor")
        self._execution = SkillExecution(repository, config=self.config, executor=executor)

    # -- what the model sees

    async def prepare(self) -> list[SkillSummary]:
        """Read the repository's summaries (before a run builds its tool specs)."""
        self.known = await self.repository.summaries()
        return self.known

    def listing(self) -> str:
        shown = self.known[: self.config.max_tool_description_skills]
        text = "; ".join(f"{s.name} ({s.description})" if s.description else s.name for s in shown)
        if len(self.known) > len(shown):
            text += f"; and {len(self.known) - len(shown)} more"
        return text

    def overview(self) -> str:
        """The "Available skills:" part of the system prompt."""
        if not self.known:
            return ""
        cap = self.config.max_overview_skills
        lines = ["Available skills:"]
        lines += [f"- {s.name}: {s.description}" if s.description else f"- {s.name}" for s in self.known[:cap]]
        if len(self.known) > cap:
            lines.append("More skills: " + ", ".join(s.name for s in self.known[cap:]))
        names = self.config.tool_names
        guidance = (
            [
                "Skills are packaged know-how. Before you use one, call skill_load with its name: its instructions "
                "(and the documents you choose with skill_select_docs) then appear below."
            ]
            if "skill_load" in names
            else []
        )
        if "skill_run" in names:
            guidance.append(
                "skill_run runs a command of a loaded skill (its default command when you give none) in a sandboxed "
                f"workspace without network; files it writes under {SANDBOX_ROOT}/out are saved as artifacts the "
                "user can open."
            )
        if "workspace_exec" in names:
            guidance.append("workspace_exec runs a shell command in the same workspace.")
        if not any(t in EXECUTION_TOOLS for t in names):
            guidance.append("You cannot execute code here: use the skills' knowledge, not their scripts.")
        return "\n".join([*lines, "", *guidance])

    async def loaded_content(self, *, session: Any, agent: str, invocation_id: str) -> str:
        """The bodies and chosen documents of the skills loaded (per the load mode)."""
        names = keys.loaded_skills(
            state=session.state,
            events=session.events,
            agent=agent,
            invocation_id=invocation_id,
            mode=self.config.load_mode,
            max_loaded=self.config.max_loaded_skills,
        )
        parts: list[str] = []
        for name in names:
            try:
                skill = await self.repository.get(name)
            except SkillError:
                continue  # removed since it was loaded
            docs = self._resolve_docs(skill, keys.selected_docs(session.state, agent, name))
            block = [f"[Loaded] {name}", skill.body.strip()]
            if docs:
                block.append("Docs loaded: " + ", ".join(docs))
                for path in docs:
                    text = skill.files.get(path, "")
                    if len(text) > self.config.max_doc_chars:
                        text = text[: self.config.max_doc_chars] + "\n[document truncated]"
                    block.append(f"[Doc] {path}\n{text.strip()}")
            parts.append("\n\n".join(block))
        return "\n\n".join(parts)

    async def instruction_block(self, *, session: Any, agent: str, invocation_id: str) -> str:
        """Overview plus loaded content, for the system message of the next request."""
        loaded = await self.loaded_content(session=session, agent=agent, invocation_id=invocation_id)
        return "\n\n".join(p for p in (self.overview(), loaded) if p)

    @staticmethod
    def _resolve_docs(skill: Skill, selection: list[str] | Literal["*"]) -> list[str]:
        available = skill.docs
        if selection == keys.ALL_DOCS:
            return available
        return [d for d in selection if d in available]

    # -- the tools

    def tools(self) -> list[Tool]:
        """The tools of the profile (or the allowed list)."""
        functions: dict[str, tuple[Callable[..., Any], bool]] = {
            "skill_load": (self._skill_load, True),
            "skill_list_docs": (self._skill_list_docs, False),
            "skill_select_docs": (self._skill_select_docs, False),
            "skill_run": (self._execution.skill_run, True),
            "workspace_exec": (self._execution.workspace_exec, False),
        }
        built: list[Tool] = []
        for name in self.config.tool_names:
            func, listed = functions[name]
            inner = FunctionTool(func, name=name)
            built.append(
                _SkillTool(inner, self, list_in_description=listed)
                if "skill" in inner.spec().parameters["properties"]
                else inner
            )
        return built

    async def _get(self, name: str) -> Skill:
        return await self.repository.get(name)

    async def _skill_load(
        self, context: ToolContext, skill: str, docs: list[str] | None = None, include_all_docs: bool = False
    ) -> str:
        """Load a skill: its instructions (and chosen documents) are added to your context so you can follow them.

        Args:
            skill: the skill's name, as listed under "Available skills"
            docs: documents of the skill to load with it (see skill_list_docs)
            include_all_docs: load every document of the skill
        """
        found = await self._get(skill)
        selection: list[str] | Literal["*"] = keys.ALL_DOCS if include_all_docs else self._known_docs(found, docs or [])
        context.state_delta.update(keys.load_delta(context.agent_name, skill, selection, context.state))
        available = found.docs
        if available and selection != keys.ALL_DOCS and not selection:
            return f"loaded: {skill} (documents available: {', '.join(available)}; choose with skill_select_docs)"
        return f"loaded: {skill}"

    @staticmethod
    def _known_docs(skill: Skill, docs: Sequence[str]) -> list[str]:
        unknown = [d for d in docs if d not in skill.docs]
        if unknown:
            raise SkillToolError(f"skill {skill.name!r} has no documents {unknown!r}; it has {skill.docs!r}")
        return list(dict.fromkeys(docs))

    async def _skill_list_docs(self, context: ToolContext, skill: str) -> dict[str, Any]:
        """List the documents (further .md/.txt files) of a skill.

        Args:
            skill: the skill's name
        """
        found = await self._get(skill)
        return {"skill": skill, "docs": found.docs}

    async def _skill_select_docs(
        self,
        context: ToolContext,
        skill: str,
        docs: list[str] | None = None,
        include_all_docs: bool = False,
        mode: Literal["replace", "add", "clear"] = "replace",
    ) -> dict[str, Any]:
        """Choose which documents of a loaded skill are in your context.

        Args:
            skill: the skill's name
            docs: document paths, as skill_list_docs lists them
            include_all_docs: choose every document
            mode: "replace" the selection, "add" to it, or "clear" it
        """
        found = await self._get(skill)
        current = keys.selected_docs(context.state, context.agent_name, skill)
        if include_all_docs:
            selection: list[str] | Literal["*"] = keys.ALL_DOCS
        elif mode == "clear":
            selection = []
        else:
            chosen = self._known_docs(found, docs or [])
            if mode == "add":
                base = found.docs if current == keys.ALL_DOCS else list(current)
                chosen = list(dict.fromkeys([*base, *chosen]))
            selection = chosen
        context.state_delta.update(keys.docs_delta(context.agent_name, skill, selection))
        if not context.state.get(keys.agent_loaded_key(context.agent_name, skill)):
            context.state_delta.update(keys.load_delta(context.agent_name, skill, selection, context.state))
        return {"skill": skill, "docs": found.docs if selection == keys.ALL_DOCS else selection}

    async def release(self, invocation_id: str) -> None:
        """Remove the run's workspace (its run has ended); nothing when it has none."""
        if self.executor is not None:
            await asyncio.to_thread(self.executor.remove, invocation_id)
