"""The workspace executor: creates workspaces, sweeps stale ones and runs commands in them,
confined (the package doc says how)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

from skills_app.core.workspace.confined import run_confined
from skills_app.core.workspace.policy import CommandPolicy
from skills_app.core.workspace.probe import probe_isolation, sandbox_argv
from skills_app.core.workspace.results import (
    _ENV_NAME,
    _RESERVED_ENV,
    _SWEEP_EVERY_S,
    _WORKSPACE_ID,
    CommandResult,
    Isolation,
    IsolationUnavailableError,
    WorkspaceConfig,
    prepare_root,
)
from skills_app.core.workspace.uids import lease_uid
from skills_app.core.workspace.workspaces import Workspace
from skills_app.core.workspace_fs import SANDBOX_ROOT, WorkspaceError


class WorkspaceExecutor:
    """Creates workspaces and runs commands in them, confined (see the module doc)."""

    def __init__(self, config: WorkspaceConfig) -> None:
        self.config = config
        self.policy = CommandPolicy(
            allowed=frozenset(config.allowed_commands), denied=frozenset(config.denied_commands)
        )
        self._workspaces: dict[str, Workspace] = {}
        self._busy: dict[str, int] = {}
        self._swept_at = 0.0
        self._lock = threading.Lock()
        # What this process made goes with it (a tmpfs holds memory until it is unmounted).
        weakref.finalize(self, _destroy_all, self._workspaces)

    def isolation(self) -> Isolation:
        """The (cached) probe result; the first call runs the probe (about 50 ms)."""
        return probe_isolation(self.config)

    async def isolation_async(self) -> Isolation:
        return await asyncio.to_thread(self.isolation)

    def workspace(self, workspace_id: str) -> Workspace:
        """The workspace of a run (created on first use; old ones swept)."""
        if not _WORKSPACE_ID.match(workspace_id) or workspace_id.startswith("."):
            raise WorkspaceError(f"bad workspace id {workspace_id!r}")
        with self._lock:
            prepare_root(self.config.root)
            if time.monotonic() - self._swept_at > _SWEEP_EVERY_S or workspace_id not in self._workspaces:
                self._sweep()
            found = self._workspaces.get(workspace_id)
            if found is None:
                # A uid of its own (raises WorkspaceError naming the limit when the pool is full).
                lease = lease_uid(self.config.uid_lock_folder, self.config.uid_pool, holder=workspace_id)
                found = Workspace(
                    id=workspace_id, path=self.config.root / workspace_id, config=self.config, lease=lease
                )
                try:
                    found.create(tmpfs=self.config.tmpfs)
                except BaseException:
                    lease.release()
                    raise
                self._workspaces[workspace_id] = found
            found.touch()
            return found

    def _sweep(self) -> None:
        """Remove the workspaces unused for longer than the TTL: any process's, this one's
        too, but none running a command. Called with the lock held."""
        self._swept_at = time.monotonic()
        cutoff = time.time() - self.config.ttl_s
        with os.scandir(self.config.root) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if not entry.is_dir(follow_symlinks=False) or self._busy.get(entry.name):
                        continue
                    if Path(entry.path) == self.config.uid_lock_folder:
                        continue  # the uid leases, not a workspace
                    if entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                        continue
                    mine = self._workspaces.pop(entry.name, None)
                    if mine is not None:
                        mine.destroy()
                    else:
                        Workspace(id=entry.name, path=Path(entry.path), config=self.config).destroy()

    def remove(self, workspace_id: str) -> None:
        """Remove a workspace of this process (when its run ends)."""
        with self._lock:
            workspace = self._workspaces.pop(workspace_id, None)
        if workspace is not None:
            workspace.destroy()

    def sandbox_env(self, env: Mapping[str, str] | None, *, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A scrubbed environment: nothing of this process leaks in; the caller's
        variables are checked by name."""
        base = {
            "PATH": "/opt/sandbox/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": "/tmp",
            "WORKSPACE_DIR": SANDBOX_ROOT,
            "SKILLS_DIR": f"{SANDBOX_ROOT}/skills",
            "WORK_DIR": f"{SANDBOX_ROOT}/work",
            "OUTPUT_DIR": f"{SANDBOX_ROOT}/out",
            "RUN_DIR": f"{SANDBOX_ROOT}/runs",
        }
        base.update(extra or {})
        for key, value in (env or {}).items():
            if not _ENV_NAME.match(str(key)) or str(key).startswith(_RESERVED_ENV):
                raise WorkspaceError(f"environment variable name {key!r} is not allowed")
            if key in ("PATH", "HOME", "WORKSPACE_DIR", "OUTPUT_DIR", "WORK_DIR", "SKILLS_DIR", "RUN_DIR"):
                raise WorkspaceError(f"environment variable {key!r} is set by the workspace")
            if "\x00" in str(value):
                raise WorkspaceError(f"environment variable {key!r} contains a NUL character")
            base[str(key)] = str(value)
        return base

    async def run(
        self,
        workspace: Workspace,
        command: str,
        *,
        cwd: str = "",
        env: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float | None = None,
    ) -> CommandResult:
        """Run a shell command confined in the workspace.

        Raises `WorkspaceError` (policy, paths, environment) and
        `IsolationUnavailableError`; a command that fails, times out or overruns its
        output is a normal result.
        """
        self.policy.check(command)
        isolation = await self.isolation_async()
        if not isolation.available:
            raise IsolationUnavailableError(
                f"code execution is disabled: the sandbox is unavailable ({isolation.reason})"
            )
        directory = workspace.directory(cwd or ".")
        variables = self.sandbox_env(env, extra=extra_env)
        limits = self.config.limits
        timeout = min(float(timeout_s), limits.timeout_s) if timeout_s else limits.timeout_s
        argv = sandbox_argv(
            self.config,
            workspace.files,
            uid=workspace.uid,
            cwd=directory,
            env=variables,
            argv=["/bin/sh", "-c", command],
        )
        with self._lock:
            self._busy[workspace.id] = self._busy.get(workspace.id, 0) + 1
        try:
            result = await run_confined(
                argv,
                stdin=stdin,
                timeout_s=timeout,
                output_limit=limits.output_limit_bytes,
                # A tmpfs refuses writes past the quota; a checked quota is watched while the command runs.
                watchdog=None if workspace.quota == "tmpfs" else workspace.over_quota,
            )
            quota = await asyncio.to_thread(workspace.enforce_quota)
        finally:
            with self._lock:
                self._busy[workspace.id] -= 1
                if not self._busy[workspace.id]:
                    del self._busy[workspace.id]
            workspace.touch()
        if not quota:
            return result
        # A checked workspace over its quota was emptied: whatever the command said, it failed.
        failed = result.exit_code if result.exit_code or result.timed_out or workspace.quota == "tmpfs" else 1
        return dataclasses.replace(result, exit_code=failed, warnings=(*result.warnings, *quota))


def _destroy_all(workspaces: dict[str, Workspace]) -> None:
    for workspace in list(workspaces.values()):
        workspace.destroy()
    workspaces.clear()
