"""Code workspaces: one run's folder and its files (every access through folder fds)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat as stat_module
from collections.abc import Callable, Mapping
from pathlib import Path

from skills_app.core import workspace_fs as fs
from skills_app.core.workspace.results import (
    KIB,
    LAYOUT,
    OutputFile,
    WorkspaceConfig,
    logger,
)
from skills_app.core.workspace.uids import UidLease
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
