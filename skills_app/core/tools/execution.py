"""Skill execution (SPEC 8.2): `skill_run` and `workspace_exec` in the run's sandboxed
workspace, the inputs staged for them and the outputs saved as artifacts.

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
import mimetypes
import re
from collections.abc import Mapping, Sequence
from typing import Any

from runs.core.tools.base import ToolContext
from sessions_app.core.artifact_tools import ARTIFACT_SERVICE, artifact_descriptor
from sessions_app.core.artifacts import ArtifactError, ArtifactScope, ArtifactService
from sessions_app.core.session import SessionKey
from skills_app.core import state as keys
from skills_app.core.repository import SkillRepository
from skills_app.core.tools.config import _SKILL_TOOL_NAMES, SkillsConfig, SkillToolError
from skills_app.core.workspace import CommandResult, Workspace, WorkspaceExecutor
from skills_app.core.workspace_fs import SANDBOX_ROOT, WorkspaceError

TOOL_RESULTS_INPUT = "work/inputs/tool_results.json"
SESSIONS_SERVICE = "sessions"
"""The key of a `SessionService` in the runner's services: `skill_run` reads the session's
earlier tool results from the ledger through it (the run's loaded window may start after a
summary boundary). Without it, the loaded window is used."""
_LEDGER_EVENTS = 400
_MAX_STAGED_RESULTS = 30
_MAX_STAGED_BYTES = 256 * 1024
_MAX_INLINE_FILES = 5
_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9._-]+")


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


class SkillExecution:
    """The execution tools of a `SkillToolset` whose profile (or allowed list) has them."""

    def __init__(
        self, repository: SkillRepository, *, config: SkillsConfig, executor: WorkspaceExecutor | None
    ) -> None:
        self.repository = repository
        self.config = config
        self.executor = executor

    def _workspace(self, context: ToolContext) -> tuple[WorkspaceExecutor, Workspace]:
        if self.executor is None:
            raise SkillToolError("code execution is not configured for this agent")
        return self.executor, self.executor.workspace(context.invocation_id)

    async def skill_run(
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
        found = await self.repository.get(skill)
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

    async def workspace_exec(
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
