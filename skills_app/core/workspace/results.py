"""Code workspaces: configuration, command results and the workspace root."""

from __future__ import annotations

import logging
import os
import re
import stat as stat_module
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skills_app.core.workspace_fs import WorkspaceError

logger = logging.getLogger(__name__)

KIB = 1024
MIB = 1024 * 1024
LAYOUT = ("skills", "work", "out", "runs")
TRUNCATION_MARKER = "...[output truncated]..."
_READ_CHUNK = 64 * KIB
_WATCH_EVERY_S = 0.25
_SWEEP_EVERY_S = 60.0
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_RESERVED_ENV = ("LD_", "BASH_FUNC_")
_WORKSPACE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

# Programs that run other programs or shells: a command policy can never allow them.
SHELL_WRAPPERS = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "zsh",
        "ksh",
        "fish",
        "eval",
        "exec",
        "xargs",
        "env",
        "sudo",
        "su",
        "doas",
        "nohup",
        "setsid",
        "timeout",
        "nice",
        "chroot",
        "unshare",
        "nsenter",
        "busybox",
        "command",
        "builtin",
        "source",
        ".",
        "setpriv",
        "runuser",
        "script",
    }
)
_FORBIDDEN_IN_POLICY = re.compile(r"[`$<>(){}\\\n]")
_OPERATORS = frozenset({"|", "&&", "||", ";"})


class IsolationUnavailableError(RuntimeError):
    """The sandbox cannot be set up on this machine; nothing is executed."""


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    """Per-command limits (DESIGN 6: 5 min wall clock, 16 KiB of each stream inline)."""

    timeout_s: float = 300.0
    cpu_s: int = 60
    memory_bytes: int = 512 * MIB
    file_size_bytes: int = 64 * MIB
    max_processes: int = 64
    output_limit_bytes: int = 16 * KIB


@dataclass(frozen=True, kw_only=True)
class WorkspaceConfig:
    """Where workspaces live, how commands are confined, what may run."""

    root: Path
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    # Each live workspace runs its commands as a uid (and the gid of the same number) of its
    # own, leased from this pool (`uids.lease_uid`), so the process limit binds each on its
    # own. The default starts at 2,000,000,000: past login accounts (1000-60000), nobody
    # (65534), the subordinate ranges useradd hands out (100000-600100000) and systemd's
    # container range (524288-1879048191), below 2**31 (where signed uid_t bugs lurk).
    # 4096 uids: more workspaces than one host serves at once (each may hold 64 processes
    # and a tmpfs); a lock file is made only for a uid tried. Hosts whose user namespace
    # maps fewer uids need a pool inside the map (the probe says so when it is not).
    uid_pool: range = range(2_000_000_000, 2_000_000_000 + 4096)
    # Where the leases are (lock files, one per uid): `<root>/.uids` unless set. Every
    # process that leases from the pool must use the same folder.
    uid_locks: Path | None = None
    allowed_commands: tuple[str, ...] = ()
    denied_commands: tuple[str, ...] = ()
    max_artifacts: int = 20
    max_output_file_bytes: int = 4 * MIB
    # The quota of one workspace: bytes on disk, and files and folders in it.
    max_bytes: int = 256 * MIB
    max_files: int = 10_000
    # A size-limited tmpfs per workspace (the kernel enforces the quota) where this process
    # may mount one; otherwise, or when False, a checked quota (see `WorkspaceExecutor.run`).
    tmpfs: bool = True
    # Workspaces unused for longer are removed, also those of this process.
    ttl_s: int = 24 * 3600
    bwrap: str = "/usr/bin/bwrap"
    prlimit: str = "/usr/bin/prlimit"
    setpriv: str = "/usr/bin/setpriv"
    python: str = "/usr/bin/python3"
    # Host paths bound read-only into the sandbox (the system's programs and libraries).
    ro_binds: tuple[str, ...] = ("/usr",)

    def __post_init__(self) -> None:
        pool = self.uid_pool
        if not pool or pool.step != 1 or pool[0] < 1 or pool[-1] >= 2**32 - 1:
            raise WorkspaceError(f"the sandbox uid pool {pool!r} must be consecutive uids between 1 and {2**32 - 2}")

    @property
    def uid_lock_folder(self) -> Path:
        return self.uid_locks if self.uid_locks is not None else self.root / ".uids"


@dataclass(frozen=True, kw_only=True)
class Isolation:
    """Whether commands can run confined here, and how or why not."""

    available: bool
    mechanism: str
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.available, "mechanism": self.mechanism, "reason": self.reason}


@dataclass(frozen=True, kw_only=True)
class CommandResult:
    """What one command did. `stdout` / `stderr` are the first `output_limit_bytes` of each
    stream (decoded, invalid UTF-8 replaced); `*_bytes` the full sizes."""

    exit_code: int | None
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_ms: int
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timed_out": self.timed_out,
            "duration_ms": self.duration_ms,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, kw_only=True)
class OutputFile:
    """A regular file read from the workspace (slash path relative to the folder read)."""

    path: str
    data: bytes
    size: int = 0  # of the file, when `data` was cut


def prepare_root(root: Path) -> None:
    """Make the folder of all workspaces (0700), and refuse one that another user could
    have planted or could swap: a symlink, not ours, writable by group or others, or
    below a folder such a user could rename things in (this process works in it as root)."""
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        found = os.lstat(root)
    except OSError as exc:
        raise WorkspaceError(f"the workspace root {str(root)!r} cannot be made: {exc.strerror}") from None
    if not stat_module.S_ISDIR(found.st_mode):
        raise WorkspaceError(f"the workspace root {str(root)!r} is not a folder (a symlink?)")
    if found.st_uid != os.geteuid() or found.st_mode & 0o022:
        raise WorkspaceError(
            f"the workspace root {str(root)!r} must belong to uid {os.geteuid()} and not be writable by others"
        )
    for folder in Path(os.path.realpath(root)).parents:
        held = os.stat(folder)
        shared = held.st_mode & 0o022 and not held.st_mode & stat_module.S_ISVTX
        if held.st_uid not in (0, os.geteuid()) or shared:
            raise WorkspaceError(
                f"the workspace root {str(root)!r} is inside {str(folder)!r}, which another user can change"
            )
