"""Host-side access to a workspace the sandbox writes (issue 17): never follow what it made.

A sandboxed command can turn any folder or file of its workspace into a symlink, a FIFO or
a hard link, at any moment, also between our check and our read. The process here runs
as root, so one path opened by name could read or write any file of the host. Hence:

- Paths are split lexically (`split`): no NUL, control characters, absolute paths or `..`
  leading out. They are never resolved by the kernel from a name.
- Folders are opened one component at a time from a directory fd (`open_dir`), each with
  `O_NOFOLLOW | O_DIRECTORY`: a symlink anywhere fails with ELOOP or ENOTDIR.
- Files are opened with `O_NOFOLLOW | O_NONBLOCK` from their folder's fd and judged by
  `fstat` of what was opened: only regular files with one link, on the workspace's own
  filesystem, are read (`iter_files`). A swap after the listing changes nothing: the fd
  we hold is the folder we listed.

The quota helpers mount a size-limited tmpfs per workspace (`mount_tmpfs`), or, where this
process may not mount, measure a tree without following anything (`usage`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import posixpath
import re
import shutil
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

SANDBOX_ROOT = "/workspace"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
MAX_DEPTH = 32
# Control characters (a newline forges lines in logs and listings) and undecodable bytes
# (os.listdir returns them as lone surrogates).
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MNT_DETACH = 0x2


class WorkspaceError(ValueError):
    """A request the workspace refuses: a path outside it, a command the policy denies, ..."""


class MissingPathError(WorkspaceError):
    """A workspace path that does not exist (as opposed to one refused)."""


def split(relative: str) -> tuple[str, ...]:
    """The components of a workspace path (relative, or absolute under `/workspace`),
    normalised without asking the filesystem; `()` is the workspace itself."""
    text = (relative or ".").strip()
    if text == SANDBOX_ROOT or text.startswith(SANDBOX_ROOT + "/"):
        text = text[len(SANDBOX_ROOT) :].lstrip("/") or "."
    bad = _BAD_NAME.search(text)
    if bad:
        raise WorkspaceError(f"path {relative!r} contains the control character {bad.group(0)!r}")
    if text.startswith("/"):
        raise WorkspaceError(f"path {relative!r} is outside the workspace (use a path under {SANDBOX_ROOT})")
    normal = posixpath.normpath(text)
    if normal == ".":
        return ()
    if normal == ".." or normal.startswith("../"):
        raise WorkspaceError(f"path {relative!r} leads outside the workspace")
    return tuple(normal.split("/"))


def open_root(path: Path) -> int:
    """An fd of a workspace's own folder (a path this process made; the sandbox cannot
    replace it: it is the bind mount's root)."""
    return os.open(path, DIR_FLAGS)


def open_dir(
    root_fd: int, parts: tuple[str, ...], *, relative: str, create: bool = False, owner: tuple[int, int] | None = None
) -> int:
    """Open the folder `parts` under `root_fd`, one component at a time, never following a
    link; with `create`, missing folders are made (and given to `owner`, when set)."""
    current = os.dup(root_fd)
    try:
        for name in parts:
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=current)
            except FileNotFoundError:
                if not create:
                    raise MissingPathError(f"path {relative!r} does not exist in the workspace") from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=current)
                child = _open_child_dir(current, name, relative)
                if owner is not None:
                    os.fchown(child, *owner)
            except OSError as exc:
                raise _refusal(exc, relative) from None
            os.close(current)
            current = child
        return current
    except BaseException:
        os.close(current)
        raise


def _open_child_dir(parent: int, name: str, relative: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise _refusal(exc, relative) from None


def _refusal(exc: OSError, relative: str) -> WorkspaceError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return WorkspaceError(f"path {relative!r} leads outside the workspace (through a symlink or a file)")
    return WorkspaceError(f"path {relative!r} cannot be opened in the workspace: {exc.strerror}")


def write_file(
    root_fd: int, parts: tuple[str, ...], data: bytes, *, relative: str, owner: tuple[int, int] | None
) -> None:
    """Replace the file `parts` with `data` (folders made as needed), never writing
    through a link: whatever is at the name is unlinked, and the file is created anew
    with `O_EXCL | O_NOFOLLOW`."""
    if not parts:
        raise WorkspaceError(f"path {relative!r} is a folder, not a file")
    folder = open_dir(root_fd, parts[:-1], relative=relative, create=True, owner=owner)
    try:
        name = parts[-1]
        for _ in range(3):  # a sandboxed command may put something back in between
            with contextlib.suppress(FileNotFoundError):
                found = os.stat(name, dir_fd=folder, follow_symlinks=False)
                if stat.S_ISDIR(found.st_mode):
                    raise WorkspaceError(f"path {relative!r} is a folder, not a file")
                os.unlink(name, dir_fd=folder)
            try:
                fd = os.open(
                    name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder
                )
            except FileExistsError:
                continue
            with os.fdopen(fd, "wb") as handle:
                if owner is not None:
                    os.fchown(handle.fileno(), *owner)
                handle.write(data)
            return
        raise WorkspaceError(f"path {relative!r} keeps changing in the workspace; not written")
    finally:
        os.close(folder)


def remove_entry(parent_fd: int, name: str) -> None:
    """Remove `name` under `parent_fd` (a folder with all it holds), following nothing."""
    with contextlib.suppress(FileNotFoundError):
        found = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if stat.S_ISDIR(found.st_mode):
            shutil.rmtree(name, dir_fd=parent_fd)
        else:
            os.unlink(name, dir_fd=parent_fd)


def shown(relative: str) -> str:
    """A path for a message: quoted (`!r`) when it holds anything odd, so that a name
    cannot forge a line of a log or a listing."""
    return repr(relative) if _BAD_NAME.search(relative) else relative


@dataclass(frozen=True, kw_only=True)
class TreeFile:
    """A regular file met by `iter_files`: `fd` is open for reading until the walk resumes."""

    path: str
    fd: int
    size: int


def iter_files(folder_fd: int, *, prefix: str, warnings: list[str]) -> Generator[TreeFile, None, None]:
    """The regular files under `folder_fd`, depth first (a folder's files by name, then its
    subfolders by name). Symlinks, hard links, special files, other filesystems, odd names
    and folders deeper than `MAX_DEPTH` are left out, each with a warning that starts
    with `prefix` + its path."""
    device = os.fstat(folder_fd).st_dev
    yield from _walk(folder_fd, "", device=device, prefix=prefix, warnings=warnings, depth=0)


def _walk(
    folder_fd: int, base: str, *, device: int, prefix: str, warnings: list[str], depth: int
) -> Iterator[TreeFile]:
    files: list[str] = []
    folders: list[str] = []
    for name in sorted(os.listdir(folder_fd)):
        relative = f"{base}{name}"
        if _BAD_NAME.search(name):
            warnings.append(f"{prefix}{relative!r}: a name with control characters, refused")
            continue
        try:
            found = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        except OSError:
            continue  # gone since the listing
        if stat.S_ISLNK(found.st_mode):
            warnings.append(f"{prefix}{relative}: symlink refused (links are never followed)")
        elif stat.S_ISDIR(found.st_mode):
            folders.append(name)
        elif stat.S_ISREG(found.st_mode):
            files.append(name)
        else:
            warnings.append(f"{prefix}{relative}: not a regular file (a FIFO, socket or device), refused")
    for name in files:
        relative = f"{base}{name}"
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=folder_fd)
        except OSError:
            warnings.append(f"{prefix}{relative}: symlink or unreadable file refused")
            continue
        try:
            # Judge what was opened, not what was listed: it may have been swapped since.
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                warnings.append(f"{prefix}{relative}: not a regular file (a FIFO, socket or device), refused")
            elif opened.st_nlink != 1:
                warnings.append(f"{prefix}{relative}: a hard link ({opened.st_nlink} names), refused")
            elif opened.st_dev != device:
                warnings.append(f"{prefix}{relative}: on another filesystem, refused")
            else:
                yield TreeFile(path=relative, fd=fd, size=opened.st_size)
        finally:
            os.close(fd)
    for name in folders:
        relative = f"{base}{name}"
        if depth + 1 >= MAX_DEPTH:
            warnings.append(f"{prefix}{relative}: folders nested deeper than {MAX_DEPTH}, left out")
            continue
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=folder_fd)
        except OSError:
            warnings.append(f"{prefix}{relative}: symlink or unreadable folder refused")
            continue
        try:
            if os.fstat(child).st_dev != device:
                warnings.append(f"{prefix}{relative}: on another filesystem, refused")
                continue
            yield from _walk(child, f"{relative}/", device=device, prefix=prefix, warnings=warnings, depth=depth + 1)
        finally:
            os.close(child)


def read_fd(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes of an open file, from its start."""
    chunks: list[bytes] = []
    left = limit
    offset = 0
    while left > 0:
        chunk = os.pread(fd, min(left, 1024 * 1024), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- quota -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Usage:
    """What a workspace holds: bytes on disk and entries (files and folders)."""

    bytes: int
    files: int


def usage(folder_fd: int) -> Usage:
    """Measure a tree from its fd without following anything (hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    count = 0
    stack = [os.dup(folder_fd)]
    try:
        while stack:
            current = stack.pop()
            try:
                for name in os.listdir(current):
                    with contextlib.suppress(OSError):
                        found = os.stat(name, dir_fd=current, follow_symlinks=False)
                        count += 1
                        if (found.st_dev, found.st_ino) not in seen:
                            seen.add((found.st_dev, found.st_ino))
                            total += found.st_blocks * 512
                        if stat.S_ISDIR(found.st_mode) and len(stack) < 4 * MAX_DEPTH:
                            stack.append(os.open(name, DIR_FLAGS, dir_fd=current))
            finally:
                os.close(current)
    finally:
        for fd in stack:
            os.close(fd)
    return Usage(bytes=total, files=count)


def tmpfs_usage(path: Path) -> Usage:
    """What a mounted tmpfs holds (its root folder not counted)."""
    found = os.statvfs(path)
    return Usage(bytes=(found.f_blocks - found.f_bfree) * found.f_frsize, files=found.f_files - found.f_ffree - 1)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def mount_tmpfs(path: Path, *, max_bytes: int, max_inodes: int, uid: int, gid: int) -> None:
    """Mount a tmpfs of at most `max_bytes` and `max_inodes` on `path` (nosuid, nodev).
    Raises OSError (EPERM where this process may not mount)."""
    options = f"size={max_bytes},nr_inodes={max_inodes},mode=0755,uid={uid},gid={gid}"
    done = _libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode())
    if done != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(path))


def unmount(path: Path) -> None:
    """Detach a mount on `path`; nothing when none is there."""
    if os.path.ismount(path):
        _libc().umount2(os.fsencode(path), _MNT_DETACH)
