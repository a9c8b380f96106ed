"""Code workspaces: a uid (and gid) of their own for each, from a pool shared by processes.

RLIMIT_NPROC counts the processes of a real uid on the whole machine, so sandboxes that
share a uid share one process limit: a command holding its limit would stop every other
workspace's commands from starting. Each live workspace therefore leases one uid of
`WorkspaceConfig.uid_pool`. A lease is a lock file per uid in a root-only folder
(`<root>/.uids/<uid>`, out of every sandbox's reach) held with `flock` for the
workspace's life: several web processes and workers sharing the folder never hold the
same uid, and a process that dies gives its leases back with its file descriptors.
`flock` locks belong to an open file, not a process, so the same process opening the
file again is refused too (POSIX `fcntl` locks would not be).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from skills_app.core.workspace.results import prepare_root
from skills_app.core.workspace_fs import WorkspaceError

_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


class UidLease:
    """One uid of the pool, held until `release` (or until this process ends)."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = uid
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the uid back (closing the lock file drops its lock); nothing the second time."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __repr__(self) -> str:
        return f"UidLease(uid={self.uid}, held={self.held})"


def lease_uid(folder: Path, pool: range, *, holder: str) -> UidLease:
    """Lease the first free uid of `pool`, its lock file in `folder` (made root-only; see
    `prepare_root`). `holder` (a workspace id) is written in the lock file for operators.
    Raises `WorkspaceError` when every uid of the pool is held: never a shared uid."""
    if not pool:
        raise WorkspaceError("the sandbox uid pool is empty")
    prepare_root(folder)
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for uid in pool:
            fd = os.open(str(uid), _LOCK_FLAGS, 0o600, dir_fd=directory)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {holder}\n".encode(), 0)
            return UidLease(uid, fd)
    finally:
        os.close(directory)
    raise WorkspaceError(
        f"no sandbox uid is free: all {len(pool)} of the pool {pool[0]}-{pool[-1]} are held by live "
        f"workspaces on this host, the limit of workspaces at once (wait for runs to end, or enlarge the pool)"
    )
