"""Code workspaces: one run's folder, its files and its commands."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import stat as stat_module
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from skills_app.core import workspace_fs as fs
from skills_app.core.workspace.policy import CommandPolicy
from skills_app.core.workspace.probe import probe_isolation, sandbox_argv
from skills_app.core.workspace.results import (
    _ENV_NAME,
    _READ_CHUNK,
    _RESERVED_ENV,
    _SWEEP_EVERY_S,
    _WATCH_EVERY_S,
    _WORKSPACE_ID,
    KIB,
    LAYOUT,
    TRUNCATION_MARKER,
    CommandResult,
    Isolation,
    IsolationUnavailableError,
    OutputFile,
    WorkspaceConfig,
    logger,
    prepare_root,
)
from skills_app.core.workspace.uids import UidLease, lease_uid
from skills_app.core.workspace_fs import SANDBOX_ROOT, WorkspaceError

# -- workspaces ------------------------------------------------------------------------------


class Workspace:
    """One run's folder. Paths given to it are relative to `/workspace` (or absolute
    under it); anything that leads outside, through `..` or a symlink, is refused.

    Everything under `files` may have been made by a sandboxed command, so this process
    (root) never opens a path there by name: every read and write walks from a folder fd
    with O_NOFOLLOW (`skills_app.core.workspace_fs`).
    """

    def __init__(self, *, id: str, path: Path, config: WorkspaceConfig, lease: UidLease | None = None) -> None:
        self.id = id
        self.path = path
        self.files = path / "ws"
        self.config = config
        self.quota: str = "none"
        self._manifest = path / "exported.json"
        # The uid this workspace's commands run as, its own while the workspace lives (see `uids`).
        self._lease = lease

    @property
    def uid(self) -> int:
        """The workspace's own uid (also its gid); refused once the workspace is removed."""
        if self._lease is None or not self._lease.held:
            raise WorkspaceError(f"workspace {self.id!r} holds no sandbox uid (it was removed)")
        return self._lease.uid

    @property
    def _owner(self) -> tuple[int, int]:
        return (self.uid, self.uid)

    def create(self, *, tmpfs: bool = True) -> None:
        """Make the folder and its layout; with `tmpfs`, try a size-limited tmpfs (the
        quota) and fall back to a checked quota where this process may not mount."""
        reopened = os.path.isdir(self.files)
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        os.makedirs(self.files, mode=0o755, exist_ok=True)
        self.quota = "checked"
        if tmpfs and os.path.ismount(self.files):
            self.quota = "tmpfs"
        elif tmpfs:
            try:
                fs.mount_tmpfs(
                    self.files,
                    max_bytes=self.config.max_bytes,
                    max_inodes=self.config.max_files + len(LAYOUT) + 1,
                    uid=self.uid,
                    gid=self.uid,
                )
                self.quota = "tmpfs"
            except OSError as exc:
                logger.debug("workspace %s: no tmpfs (%s); the quota is checked after each command", self.id, exc)
        root = fs.open_root(self.files)
        try:
            # The sandbox user owns what it may write; staged skills stay root's (read-only bind anyway).
            with contextlib.suppress(PermissionError):
                os.fchown(root, *self._owner)
            if reopened:
                # Left by another process (which died): what its commands wrote belongs to
                # the uid it held, maybe another workspace's now. Give it to this one's.
                _chown_tree(root, self._owner, keep=("skills",))
            for sub in LAYOUT:
                os.close(
                    fs.open_dir(root, (sub,), relative=sub, create=True, owner=None if sub == "skills" else self._owner)
                )
        finally:
            os.close(root)

    def resolve(self, relative: str, *, must_exist: bool = False) -> Path:
        """The host path of a workspace path, checked: no `..` out of it, no symlink on the
        way (raises `WorkspaceError`). For messages only: never open it by name, the
        sandbox can change what it names at any time."""
        parts = fs.split(relative)
        root = fs.open_root(self.files)
        try:
            try:
                folder = fs.open_dir(root, parts[:-1], relative=relative)
            except fs.MissingPathError:
                if must_exist:
                    raise
                return self.files.joinpath(*parts)
            try:
                if parts:
                    found = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
                    if stat_module.S_ISLNK(found.st_mode):
                        raise WorkspaceError(f"path {relative!r} leads outside the workspace (through a symlink)")
            except FileNotFoundError:
                if must_exist:
                    raise fs.MissingPathError(f"path {relative!r} does not exist in the workspace") from None
            finally:
                os.close(folder)
        finally:
            os.close(root)
        return self.files.joinpath(*parts)

    def directory(self, relative: str) -> str:
        """The sandbox path of an existing folder of the workspace (a working directory)."""
        parts = fs.split(relative)
        root = fs.open_root(self.files)
        try:
            os.close(fs.open_dir(root, parts, relative=relative))
        except fs.MissingPathError:
            raise WorkspaceError(f"working directory {relative!r} does not exist in the workspace") from None
        finally:
            os.close(root)
        return "/".join((SANDBOX_ROOT, *parts))

    def write_file(self, relative: str, data: bytes, *, readonly: bool = False) -> Path:
        """Put a file in the workspace (folders made as needed), owned by the sandbox user
        unless `readonly`; whatever the sandbox left at that name is replaced, never
        written through."""
        parts = fs.split(relative)
        root = fs.open_root(self.files)
        try:
            fs.write_file(root, parts, data, relative=relative, owner=None if readonly else self._owner)
        except OSError as exc:
            raise WorkspaceError(f"path {relative!r} cannot be written: {exc.strerror}") from None
        finally:
            os.close(root)
        return self.files.joinpath(*parts)

    def stage_skill(self, name: str, files: Mapping[str, str]) -> str:
        """Copy a skill's files to `skills/<name>/` (replacing an earlier copy); returns
        the skill's folder inside the sandbox."""
        parts = fs.split(f"skills/{name}")
        if len(parts) != 2 or parts[0] != "skills":
            raise WorkspaceError(f"bad skill name {name!r}")
        root = fs.open_root(self.files)
        try:
            skills = fs.open_dir(root, parts[:1], relative="skills", create=True)
            try:
                fs.remove_entry(skills, parts[1])
            finally:
                os.close(skills)
            for relative, text in files.items():
                self.write_file(f"skills/{name}/{relative}", text.encode("utf-8"), readonly=True)
            os.close(fs.open_dir(root, parts, relative=f"skills/{name}", create=True))
        finally:
            os.close(root)
        return "/".join((SANDBOX_ROOT, *parts))

    def read_files(
        self,
        folder: str,
        *,
        max_files: int,
        max_file_bytes: int,
        warnings: list[str],
        accept: Callable[[str], bool] = lambda _path: True,
        cut: bool = False,
    ) -> list[OutputFile]:
        """The regular files under `folder` that `accept` takes (paths relative to it, in
        walk order), read without following anything; what was left out is explained in
        `warnings`. Symlinks, hard links and special files are refused. A file over
        `max_file_bytes` is left out, or with `cut` read up to that size."""
        parts = fs.split(folder)
        prefix = "/".join(parts) + "/" if parts else ""
        found: list[OutputFile] = []
        root = fs.open_root(self.files)
        try:
            top = fs.open_dir(root, parts, relative=folder)
        except fs.MissingPathError:
            return found
        except WorkspaceError:
            warnings.append(f"{prefix or './'}: a symlink or not a folder, refused (links are never followed)")
            return found
        finally:
            os.close(root)
        try:
            with contextlib.closing(fs.iter_files(top, prefix=prefix, warnings=warnings)) as walk:
                for entry in walk:
                    if not accept(entry.path):
                        continue
                    if entry.size > max_file_bytes and not cut:
                        warnings.append(f"{prefix}{entry.path}: {entry.size} bytes, over the limit of {max_file_bytes}")
                        continue
                    if len(found) >= max_files:
                        warnings.append(
                            f"more than {max_files} output files: {prefix}{entry.path} and later ones not collected"
                        )
                        break
                    found.append(
                        OutputFile(path=entry.path, data=fs.read_fd(entry.fd, max_file_bytes), size=entry.size)
                    )
        finally:
            os.close(top)
        return found

    def collect_outputs(self, *, max_files: int | None = None) -> tuple[list[OutputFile], list[str]]:
        """Regular files under `out/` (sorted, depth first), and warnings for what was left
        out: symlinks (never followed, `out/` itself included: one could point at any
        file of the host), hard links, special files, files over the size limit, files
        past the count limit."""
        warnings: list[str] = []
        found = self.read_files(
            "out",
            max_files=self.config.max_artifacts if max_files is None else max_files,
            max_file_bytes=self.config.max_output_file_bytes,
            warnings=warnings,
        )
        return found, warnings

    # -- quota

    def usage(self) -> fs.Usage:
        """What the workspace holds now (bytes on disk; files and folders, the layout's
        folders not counted)."""
        if self.quota == "tmpfs":
            held = fs.tmpfs_usage(self.files)
        else:
            root = fs.open_root(self.files)
            try:
                held = fs.usage(root)
            finally:
                os.close(root)
        return fs.Usage(bytes=held.bytes, files=max(0, held.files - len(LAYOUT)))

    def over_quota(self) -> str | None:
        """Why the workspace is over its quota, or None."""
        held = self.usage()
        if held.bytes > self.config.max_bytes:
            return f"the workspace holds {held.bytes} bytes, over its quota of {self.config.max_bytes}"
        if held.files > self.config.max_files:
            return f"the workspace holds {held.files} files and folders, over its quota of {self.config.max_files}"
        return None

    def enforce_quota(self) -> list[str]:
        """Warnings about the quota after a command. A tmpfs refused the writes past it
        (ENOSPC); a checked workspace over its quota is emptied (`work/`, `out/`, `runs/`),
        so that nothing of it is exported and the disk is given back."""
        if self.quota == "tmpfs":
            held = fs.tmpfs_usage(self.files)
            free = os.statvfs(self.files)
            if free.f_bavail * free.f_frsize < 64 * KIB or free.f_favail == 0:
                return [
                    f"the workspace is full ({held.bytes} of {self.config.max_bytes} bytes, {held.files} of "
                    f"{self.config.max_files} files): writes past its quota failed with 'No space left on device'"
                ]
            return []
        reason = self.over_quota()
        if reason is None:
            return []
        self.clear()
        return [
            f"{reason}: its work/, out/ and runs/ folders were emptied, nothing is exported, and the command counts as failed"
        ]

    def clear(self) -> None:
        """Empty the folders the sandbox writes."""
        root = fs.open_root(self.files)
        try:
            for sub in LAYOUT:
                if sub == "skills":
                    continue
                fs.remove_entry(root, sub)
                os.close(fs.open_dir(root, (sub,), relative=sub, create=True, owner=self._owner))
        finally:
            os.close(root)

    def destroy(self) -> None:
        """Unmount and remove the whole workspace, then give its uid back (none of its
        processes is left: each command's pid namespace died with it)."""
        with contextlib.suppress(OSError):
            fs.unmount(self.files)
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lease is not None:
            self._lease.release()

    def touch(self) -> None:
        """Mark the workspace used now (its age for the sweep; the sandbox cannot reach it)."""
        with contextlib.suppress(OSError):
            os.utime(self.path)

    # -- bookkeeping (beside ws/: out of the sandbox's reach)

    def exported(self) -> dict[str, str]:
        """Output path -> sha256 of what was last exported from it."""
        try:
            return dict(json.loads(self._manifest.read_text()))
        except (OSError, ValueError):
            return {}

    def mark_exported(self, entries: Mapping[str, str]) -> None:
        merged = {**self.exported(), **entries}
        self._manifest.write_text(json.dumps(merged, sort_keys=True))


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


def _chown_tree(folder_fd: int, owner: tuple[int, int], *, keep: tuple[str, ...] = ()) -> None:
    """Give everything under a folder to `owner` without following anything (links
    themselves are re-owned); the top-level names in `keep` are left as they are, and so
    is a file with other hard links (it could be any file of that filesystem's)."""
    stack = [os.dup(folder_fd)]
    top = True
    try:
        while stack:
            current = stack.pop()
            try:
                for name in os.listdir(current):
                    if top and name in keep:
                        continue
                    with contextlib.suppress(OSError):
                        found = os.stat(name, dir_fd=current, follow_symlinks=False)
                        if not stat_module.S_ISDIR(found.st_mode) and found.st_nlink > 1:
                            continue
                        os.chown(name, *owner, dir_fd=current, follow_symlinks=False)
                        if stat_module.S_ISDIR(found.st_mode) and len(stack) < 4 * fs.MAX_DEPTH:
                            stack.append(os.open(name, fs.DIR_FLAGS, dir_fd=current))
            finally:
                os.close(current)
                top = False
    finally:
        for fd in stack:
            os.close(fd)


def _destroy_all(workspaces: dict[str, Workspace]) -> None:
    for workspace in list(workspaces.values()):
        workspace.destroy()
    workspaces.clear()


async def _read_capped(stream: asyncio.StreamReader | None, limit: int) -> tuple[bytes, int]:
    """Read a stream to its end, keeping the first `limit` bytes: the rest is counted,
    never buffered (a command may write gigabytes)."""
    if stream is None:
        return b"", 0
    kept = bytearray()
    total = 0
    while True:
        chunk = await stream.read(_READ_CHUNK)
        if not chunk:
            return bytes(kept), total
        total += len(chunk)
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _feed(process: asyncio.subprocess.Process, data: bytes) -> None:
    if process.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            process.stdin.write(data)
            await process.stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError, RuntimeError):
        process.stdin.close()


def _decode(data: bytes, total: int, limit: int, stream: str) -> tuple[str, bool, str | None]:
    text = data.decode("utf-8", errors="replace")
    if total <= limit:
        return text, False, None
    note = f"\n{TRUNCATION_MARKER} ({stream}: {total} bytes in all, the first {limit} shown)"
    return text + note, True, f"{stream} truncated: {total} bytes, {limit} kept inline"


async def _watch(process: asyncio.subprocess.Process, watchdog: Callable[[], str | None], stopped: list[str]) -> None:
    while process.returncode is None:
        await asyncio.sleep(_WATCH_EVERY_S)
        reason = await asyncio.to_thread(watchdog)
        if reason is not None:
            stopped.append(reason)
            _kill_group(process)
            return


async def run_confined(
    argv: Sequence[str],
    *,
    stdin: str | None,
    timeout_s: float,
    output_limit: int,
    watchdog: Callable[[], str | None] | None = None,
) -> CommandResult:
    """Start `argv` in a new session, feed stdin, read both streams capped, and kill the
    whole process group at the deadline (or when the caller is cancelled, or when
    `watchdog`, asked every quarter second, gives a reason)."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={},
        start_new_session=True,
    )
    readers = asyncio.gather(
        _read_capped(process.stdout, output_limit),
        _read_capped(process.stderr, output_limit),
        _feed(process, (stdin or "").encode("utf-8")),
    )
    timed_out = False
    stopped: list[str] = []
    watcher = asyncio.ensure_future(_watch(process, watchdog, stopped)) if watchdog is not None else None
    try:
        try:
            await asyncio.wait_for(asyncio.shield(readers), timeout=timeout_s)
            await asyncio.wait_for(process.wait(), timeout=max(0.1, timeout_s - (time.monotonic() - started)))
        except TimeoutError:
            timed_out = True
            _kill_group(process)
    except BaseException:
        _kill_group(process)
        readers.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(process.wait(), timeout=2)
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
    # After a kill the pipes close when the pid namespace is gone; never wait forever.
    try:
        (out, out_total), (err, err_total), _ = await asyncio.wait_for(readers, timeout=5)
    except TimeoutError:
        readers.cancel()
        out, out_total, err, err_total = b"", 0, b"", 0
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), timeout=5)
    duration_ms = int((time.monotonic() - started) * 1000)
    stdout, out_cut, out_warning = _decode(out, out_total, output_limit, "stdout")
    stderr, err_cut, err_warning = _decode(err, err_total, output_limit, "stderr")
    warnings = [w for w in (out_warning, err_warning) if w]
    exit_code = process.returncode
    if stopped:
        warnings.append(f"stopped: {stopped[0]}")
    elif timed_out:
        warnings.append(f"timed out after {timeout_s:g} s: the command and all its processes were killed")
    elif exit_code is not None and exit_code < 0:
        warnings.append(
            f"killed by signal {signal.Signals(-exit_code).name if -exit_code in signal.valid_signals() else -exit_code}"
        )
    elif exit_code in (128 + signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGXFSZ):
        warnings.append(f"the command was stopped by a resource limit (exit status {exit_code})")
    return CommandResult(
        exit_code=None if timed_out else exit_code,
        stdout=stdout,
        stderr=stderr,
        stdout_bytes=out_total,
        stderr_bytes=err_total,
        stdout_truncated=out_cut,
        stderr_truncated=err_cut,
        timed_out=timed_out,
        duration_ms=duration_ms,
        warnings=tuple(warnings),
    )
