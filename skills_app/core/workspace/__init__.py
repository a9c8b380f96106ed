"""The code workspace (SPEC 8.3, 8.4): a folder per run, and a sandbox to run commands in it.

Layout of a workspace (`<root>/<id>/`): `ws/` is what the sandbox sees as `/workspace`,
with `skills/` (staged skills, read-only inside), `work/` (inputs and scratch), `out/`
(outputs: exported as artifacts) and `runs/`. Bookkeeping (which outputs were exported)
lives beside `ws/`, where the sandbox cannot reach it.

Each command is one subprocess, started as

    prlimit --cpu --as --fsize --nproc --core=0 -- \
      bwrap --unshare-net --unshare-pid --unshare-ipc --unshare-uts --die-with-parent \
            --ro-bind /usr /usr (+ /bin, /lib, /lib64, /sbin symlinks) --proc /proc --dev /dev \
            --tmpfs /tmp --bind ws /workspace --ro-bind ws/skills /workspace/skills --clearenv ... -- \
      setpriv --reuid UID --regid UID --clear-groups --no-new-privs -- sh -c COMMAND

where UID is the workspace's own: each live workspace leases one uid (gid the same number)
of `WorkspaceConfig.uid_pool` (`uids`), so no two workspaces share one, whichever process
of the host made them.

Why this shape (facts checked on these machines): a process started by root inside bwrap
still reads root-only files, so the command drops to an unprivileged uid (and RLIMIT_NPROC
only binds a non-root uid). RLIMIT_NPROC counts every process of that uid on the machine,
so a shared uid would let one workspace's command, holding its limit, stop every other
workspace's commands from starting; hence a uid per workspace. The lease is a lock file
per uid in `<root>/.uids` (root-only), held with `flock` while the workspace lives,
given back when it is removed or its process dies; a full pool is a `WorkspaceError`
naming the limit, never a shared uid. Limits are set by the `prlimit` command because `preexec_fn`
is unsafe in threaded servers; only `/usr` (the system interpreter: a virtualenv under
/root would be unreadable to that uid anyway), the workspace and a private /tmp exist
inside; the new network namespace has nothing but a loopback of its own, so every
connection is refused or unreachable. The wall-clock timeout kills the whole process
group (and bwrap's pid namespace dies with it). Output is read incrementally and only the
first 16 KiB of each stream is kept.

`probe_isolation` checks once per process that all this works (uid dropped to a leased
one, no network interface but loopback); when it does not, `WorkspaceExecutor.run` refuses to run
anything and says why.

What a command leaves in `ws/` is the untrusted side of a trust boundary (issue 17): it
can make any name there a symlink, a hard link or a FIFO, at any time. The host reads and
writes it only from folder fds with O_NOFOLLOW at every component (`workspace_fs`), so
exports, staged inputs and skills never follow a link out. Each workspace has a quota of
bytes and files: a size-limited tmpfs mounted on `ws/` where this process may mount one
(the kernel refuses writes past it, and the sandbox's mountinfo then shows no host path),
otherwise a checked quota (watched while a command runs, the workspace emptied when over).
A workspace is removed when its run ends (`SkillToolset.release`), and any unused for
`ttl_s` (this process's too) by the sweep.
"""

from __future__ import annotations

from skills_app.core.workspace.confined import run_confined
from skills_app.core.workspace.executor import WorkspaceExecutor
from skills_app.core.workspace.policy import CommandPolicy
from skills_app.core.workspace.probe import probe_isolation, sandbox_argv
from skills_app.core.workspace.results import (
    KIB,
    LAYOUT,
    MIB,
    SHELL_WRAPPERS,
    TRUNCATION_MARKER,
    CommandResult,
    Isolation,
    IsolationUnavailableError,
    OutputFile,
    SandboxLimits,
    WorkspaceConfig,
    logger,
    prepare_root,
)
from skills_app.core.workspace.uids import UidLease, lease_uid
from skills_app.core.workspace.workspaces import Workspace
from skills_app.core.workspace_fs import SANDBOX_ROOT, WorkspaceError

__all__ = [
    "KIB",
    "LAYOUT",
    "MIB",
    "SANDBOX_ROOT",
    "SHELL_WRAPPERS",
    "TRUNCATION_MARKER",
    "CommandPolicy",
    "CommandResult",
    "Isolation",
    "IsolationUnavailableError",
    "OutputFile",
    "SandboxLimits",
    "UidLease",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceError",
    "WorkspaceExecutor",
    "lease_uid",
    "logger",
    "prepare_root",
    "probe_isolation",
    "run_confined",
    "sandbox_argv",
]
