"""Skill tools and profiles (SPEC 8.2, 8.3) and the skills block of the system prompt.

Profiles: `knowledge_only` (the default) gives `skill_load`, `skill_list_docs` and
`skill_select_docs`, which never execute anything; `full` adds `skill_run` and
`workspace_exec`, which run commands in the run's sandboxed workspace
(`skills_app.core.workspace`). `allowed_tools` overrides the profile (empty: none).

`SkillToolset.instruction_block` is the skills request processor: "Available skills:"
(name and description, the first `max_overview_skills`, the rest as names), what the
agent can do with them, then for each loaded skill (per the load mode, see
`skills_app.core.state`) its SKILL.md body and the documents chosen for it.

`skill_run` stages the skill into `skills/<name>/` (read-only inside), the session's
earlier tool results into `work/inputs/tool_results.json` (so a script can render what
the agent found), named artifacts into `work/inputs/`, runs the command (the skill's
default `command` when none is given) with the skill's folder as working directory,
then saves new or changed files under `out/` as artifacts (at most 20).
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import json
import logging
import mimetypes
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from runs.core.llm.base import ToolSpec
from runs.core.tools.base import Tool, ToolContext
from runs.core.tools.function import FunctionTool
from sessions_app.core.artifact_tools import ARTIFACT_SERVICE, artifact_descriptor
from sessions_app.core.artifacts import ArtifactError, ArtifactScope, ArtifactService
from sessions_app.core.session import SessionKey
from skills_app.core import state as keys
from skills_app.core.repository import SkillRepository
from skills_app.core.skill import Skill, SkillError, SkillSummary
from skills_app.core.state import LoadMode
from skills_app.core.workspace import (
    CommandResult,
    Workspace,
    WorkspaceExecutor,
)
from skills_app.core.workspace_fs import SANDBOX_ROOT, WorkspaceError

logger = logging.getLogger(__name__)

SkillProfile = Literal["knowledge_only", "full"]
PROFILES: tuple[SkillProfile, ...] = ("knowledge_only", "full")
KNOWLEDGE_TOOLS = ("skill_load", "skill_list_docs", "skill_select_docs")
EXECUTION_TOOLS = ("skill_run", "workspace_exec")
TOOL_RESULTS_INPUT = "work/inputs/tool_results.json"
SESSIONS_SERVICE = "sessions"
"""The key of a `SessionService` in the runner's services: `skill_run` reads the session's
earlier tool results from the ledger through it (the run's loaded window may start after a
summary boundary). Without it, the loaded window is used."""
_LEDGER_EVENTS = 400
_SKILL_TOOL_NAMES = frozenset(KNOWLEDGE_TOOLS + EXECUTION_TOOLS)
_MAX_STAGED_RESULTS = 30
_MAX_STAGED_BYTES = 256 * 1024
_MAX_INLINE_FILES = 5
_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9._-]+")


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


class _SkillTool:
    """A FunctionTool whose `skill` parameter lists the repository's skills (an enum the
    model, and the offline planner, can pick from) and whose description may name them."""

    def __init__(self, inner: FunctionTool, toolset: SkillToolset, *, list_in_description: bool) -> None:
        self._inner = inner
        self._toolset = toolset
        self._list_in_description = list_in_description
        self.name = inner.name

    @property
    def description(self) -> str:
        base = self._inner.description
        if not self._list_in_description:
            return base
        listing = self._toolset.listing()
        return f"{base} Skills: {listing}" if listing else base

    def spec(self) -> ToolSpec:
        spec = self._inner.spec()
        parameters = json.loads(json.dumps(spec.parameters))
        names = [s.name for s in self._toolset.known]
        skill = parameters.get("properties", {}).get("skill")
        if skill is not None and names:
            skill["enum"] = names
        return ToolSpec(name=spec.name, description=self.description, parameters=parameters)

    async def call(self, context: ToolContext, args: Mapping[str, Any]) -> Any:
        return await self._inner.call(context, args)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def session_tool_results(events: Sequence[Any], *, limit: int = _MAX_STAGED_RESULTS) -> list[dict[str, Any]]:
    """The session's tool results (skill and workspace tools left out), oldest first, as
    `{"tool", "arguments", "result"}` with the result parsed from JSON where it is JSON."""
    calls: dict[str, Any] = {}
    results: list[dict[str, Any]] = []
    for event in events:
        message = getattr(event, "message", None)
        if message is None:
            continue
        for call in message.tool_calls:
            calls[call.id] = call
        if message.role == "tool" and message.tool_name not in _SKILL_TOOL_NAMES:
            if (getattr(event, "extensions", None) or {}).get("tool_error"):
                continue
            call = calls.get(message.tool_call_id or "")
            arguments = _parsed(call.arguments) if call is not None else {}
            results.append(
                {
                    "tool": message.tool_name or (call.name if call is not None else "tool"),
                    "arguments": arguments if isinstance(arguments, dict) else {},
                    "result": _parsed(message.content),
                }
            )
    return results[-limit:]


def _artifact_name(prefix: str, path: str) -> str:
    name = _ARTIFACT_NAME.sub("_", path.replace("/", "_")).strip("._") or "output"
    return f"{_ARTIFACT_NAME.sub('_', prefix)}{name}"[:200]


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
            "skill_run": (self._skill_run, True),
            "workspace_exec": (self._workspace_exec, False),
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

    # -- execution

    def _workspace(self, context: ToolContext) -> tuple[WorkspaceExecutor, Workspace]:
        if self.executor is None:
            raise SkillToolError("code execution is not configured for this agent")
        return self.executor, self.executor.workspace(context.invocation_id)

    async def release(self, invocation_id: str) -> None:
        """Remove the run's workspace (its run has ended); nothing when it has none."""
        if self.executor is not None:
            await asyncio.to_thread(self.executor.remove, invocation_id)

    async def _skill_run(
        self,
        context: ToolContext,
        skill: str,
        command: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 - the tool's parameter, as SPEC 8.2 names it
        output_files: list[str] | None = None,
        inputs: list[str] | None = None,
        save_as_artifacts: bool = True,
        omit_inline_content: bool = False,
        artifact_prefix: str = "",
    ) -> dict[str, Any]:
        """Run a skill's script in a sandboxed workspace (no network) to generate files.

        Args:
            skill: the skill's name
            command: shell command to run in the skill's folder; omit to run the skill's default command
            cwd: working directory relative to the workspace (default: the skill's folder)
            env: extra environment variables
            stdin: text for the command's standard input
            timeout: seconds before the command is killed (default 300)
            output_files: globs of workspace files to return inline, e.g. out/*.md
            inputs: names of session artifacts to copy into work/inputs/
            save_as_artifacts: save new or changed files under out/ as artifacts
            omit_inline_content: leave the content of output_files out of the result
            artifact_prefix: prefix for the saved artifacts' names
        """
        found = await self._get(skill)
        if self.config.require_load_before_run and not context.state.get(
            keys.agent_loaded_key(context.agent_name, skill)
        ):
            raise SkillToolError("skill_run requires skill_load first")
        run = command or found.command
        if not run:
            raise SkillToolError(f"skill {skill!r} has no default command; give one (see its SKILL.md)")
        executor, workspace = await asyncio.to_thread(self._workspace, context)
        sandbox_dir = await asyncio.to_thread(workspace.stage_skill, skill, found.files)
        staged = await self._stage_inputs(context, workspace, inputs or [])
        result = await executor.run(
            workspace,
            run,
            cwd=cwd or sandbox_dir,
            env=env,
            stdin=stdin,
            timeout_s=timeout,
            extra_env={"SKILL_NAME": skill, "SKILL_DIR": sandbox_dir},
        )
        return await self._finish(
            context,
            workspace,
            result,
            staged=staged,
            output_files=output_files or [],
            save=save_as_artifacts,
            omit_inline=omit_inline_content,
            prefix=artifact_prefix,
            extra={"skill": skill, "command": run},
        )

    async def _workspace_exec(
        self,
        context: ToolContext,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 - the tool's parameter, as SPEC 8.2 names it
    ) -> dict[str, Any]:
        """Run a shell command in this run's sandboxed workspace (no network); files written under out/ are saved as artifacts.

        Args:
            command: the shell command
            cwd: working directory relative to the workspace root
            env: extra environment variables
            stdin: text for the command's standard input
            timeout: seconds before the command is killed (default 300)
        """
        executor, workspace = await asyncio.to_thread(self._workspace, context)
        result = await executor.run(workspace, command, cwd=cwd or "", env=env, stdin=stdin, timeout_s=timeout)
        return await self._finish(
            context,
            workspace,
            result,
            staged=[],
            output_files=[],
            save=True,
            omit_inline=False,
            prefix="",
            extra={"command": command},
        )

    async def _stage_inputs(self, context: ToolContext, workspace: Workspace, names: Sequence[str]) -> list[str]:
        staged: list[str] = []
        results = session_tool_results(await self._ledger_events(context))
        data = json.dumps(results, ensure_ascii=False, indent=1, default=str).encode("utf-8")
        while len(data) > _MAX_STAGED_BYTES and results:
            results = results[1:]  # the oldest go first
            data = json.dumps(results, ensure_ascii=False, indent=1, default=str).encode("utf-8")
        await asyncio.to_thread(workspace.write_file, TOOL_RESULTS_INPUT, data)
        staged.append(TOOL_RESULTS_INPUT)
        if names:
            service, scope = self._artifacts(context)
            if service is None or scope is None:
                raise SkillToolError("inputs need artifacts, which are not configured for this agent")
            for name in names:
                artifact = await service.load(scope, name)
                if artifact is None:
                    raise SkillToolError(f"no artifact {name!r} to stage")
                path = f"work/inputs/{_artifact_name('', name.removeprefix('user:'))}"
                await asyncio.to_thread(workspace.write_file, path, artifact.data)
                staged.append(path)
        return staged

    @staticmethod
    async def _ledger_events(context: ToolContext) -> list[Any]:
        """The session's newest events from the ledger (plus any of the loaded window it
        does not have yet), oldest first."""
        session = context.session
        loaded = list(session.events)
        sessions = context.services.get(SESSIONS_SERVICE)
        if sessions is None:
            return loaded
        key = SessionKey(app=session.app, user_id=session.user_id, session_id=session.id)
        after = max(0, session.last_seq - _LEDGER_EVENTS)
        stored = await sessions.list_events(key, after_seq=after, limit=_LEDGER_EVENTS)
        seen = {e.id for e in stored}
        return [*stored, *(e for e in loaded if e.id not in seen)]

    @staticmethod
    def _artifacts(context: ToolContext) -> tuple[ArtifactService | None, ArtifactScope | None]:
        service = context.services.get(ARTIFACT_SERVICE)
        if service is None:
            return None, None
        session = context.session
        return service, ArtifactScope(app=session.app, user_id=session.user_id, session_id=session.id)

    async def _finish(
        self,
        context: ToolContext,
        workspace: Workspace,
        result: CommandResult,
        *,
        staged: list[str],
        output_files: Sequence[str],
        save: bool,
        omit_inline: bool,
        prefix: str,
        extra: Mapping[str, Any],
    ) -> dict[str, Any]:
        warnings = list(result.warnings)
        outputs, collect_warnings = await asyncio.to_thread(workspace.collect_outputs)
        warnings += collect_warnings
        failed = result.timed_out or result.exit_code != 0
        if failed:
            outputs = [o for o in outputs if o.data]  # SPEC 8.2: empty outputs of a failed command are dropped
        saved: list[dict[str, Any]] = []
        if save and outputs:
            saved = await self._export(context, workspace, outputs, prefix, warnings)
        payload: dict[str, Any] = {
            **extra,
            **result.to_dict(),
            "warnings": warnings,
            "staged_inputs": staged,
            "output_files": await asyncio.to_thread(self._inline_files, workspace, output_files, omit_inline, warnings),
            "artifact_files": saved,
        }
        return payload

    async def _export(
        self, context: ToolContext, workspace: Workspace, outputs: Sequence[Any], prefix: str, warnings: list[str]
    ) -> list[dict[str, Any]]:
        service, scope = self._artifacts(context)
        if service is None or scope is None:
            warnings.append("artifacts are not configured: outputs stay in the workspace")
            return []
        exported = workspace.exported()
        saved: list[dict[str, Any]] = []
        marks: dict[str, str] = {}
        for output in outputs:
            digest = hashlib.sha256(output.data).hexdigest()
            if exported.get(output.path) == digest:
                continue  # unchanged since an earlier command of this run exported it
            name = _artifact_name(prefix, output.path)
            mime = mimetypes.guess_type(output.path, strict=False)[0]
            try:
                info = await service.save(scope, name, output.data, mime=mime)
            except ArtifactError as exc:
                warnings.append(f"out/{output.path}: not saved: {exc}")
                continue
            marks[output.path] = digest
            saved.append(
                {**artifact_descriptor(scope.session_id, info), "name": info.filename, "path": f"out/{output.path}"}
            )
        if marks:
            await asyncio.to_thread(workspace.mark_exported, marks)
        if saved:
            # The UI links the tool-result event's artifact (the first one) and lists them all.
            context.extensions["artifact"] = {k: v for k, v in saved[0].items() if k not in ("name", "path")}
            context.extensions["artifacts"] = saved
            context.state_delta[keys.ARTIFACTS_KEY] = json.dumps(
                {
                    "tool_call_id": context.tool_call_id,
                    "files": [{"name": s["name"], "version": s["version"]} for s in saved],
                }
            )
        return saved

    def _inline_files(
        self, workspace: Workspace, globs: Sequence[str], omit: bool, warnings: list[str]
    ) -> list[dict[str, Any]]:
        if not globs:
            return []
        limit = self.executor.config.limits.output_limit_bytes if self.executor else 16 * 1024
        patterns: list[str] = []
        for pattern in globs:
            pattern = (
                pattern.removeprefix(SANDBOX_ROOT + "/").replace("$OUTPUT_DIR", "out").replace("${OUTPUT_DIR}", "out")
            )
            pattern = pattern.replace("$WORK_DIR", "work").replace("${WORK_DIR}", "work")
            try:
                workspace.resolve(pattern.split("*", 1)[0] or ".")
            except WorkspaceError as exc:
                warnings.append(str(exc))
                continue
            patterns.append(pattern)
        # Read from folder fds, never by name: the sandbox may have linked anything anywhere.
        found = (
            workspace.read_files(
                ".",
                max_files=_MAX_INLINE_FILES + 1,
                max_file_bytes=limit,
                cut=True,
                warnings=[],
                accept=lambda path: any(fnmatch.fnmatch(path, p) for p in patterns),
            )
            if patterns
            else []
        )
        if len(found) > _MAX_INLINE_FILES:
            warnings.append(f"more than {_MAX_INLINE_FILES} output files matched; the rest left out")
        files: list[dict[str, Any]] = []
        for output in found[:_MAX_INLINE_FILES]:
            entry: dict[str, Any] = {
                "name": output.path,
                "mime_type": mimetypes.guess_type(output.path, strict=False)[0] or "application/octet-stream",
                "size_bytes": output.size,
                "truncated": output.size > limit,
            }
            if not omit:
                entry["content"] = output.data[:limit].decode("utf-8", errors="replace")
            files.append(entry)
        return files
