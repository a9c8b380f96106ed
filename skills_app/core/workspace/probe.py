"""Code workspaces: the isolation probe and the sandbox command line."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat as stat_module
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from skills_app.core.workspace.results import Isolation, WorkspaceConfig, logger, prepare_root
from skills_app.core.workspace.uids import lease_uid
from skills_app.core.workspace_fs import SANDBOX_ROOT, WorkspaceError

# -- isolation probe -------------------------------------------------------------------------


def sandbox_argv(
    config: WorkspaceConfig, workspace: Path, *, uid: int, cwd: str, env: Mapping[str, str], argv: Sequence[str]
) -> list[str]:
    """The full command line that runs `argv` confined in `workspace` as `uid` (and the
    gid of the same number: the workspace's lease, see `uids`; see the module doc)."""
    limits = config.limits
    line = [
        config.prlimit,
        f"--cpu={max(1, int(limits.cpu_s))}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_size_bytes}",
        f"--nproc={limits.max_processes}",
        "--core=0",
        "--",
        config.bwrap,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
    ]
    for path in config.ro_binds:
        line += ["--ro-bind", path, path]
    for link, target in (("/bin", "usr/bin"), ("/sbin", "usr/sbin"), ("/lib", "usr/lib"), ("/lib64", "usr/lib64")):
        if os.path.exists(f"/{target}"):
            line += ["--symlink", target, link]
    line += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        "--bind",
        str(workspace),
        SANDBOX_ROOT,
    ]
    # bwrap follows a symlinked source: bind `skills` only when it is a real folder (inside
    # every sandbox it is a mount point, so a command cannot swap it afterwards).
    with contextlib.suppress(OSError):
        if stat_module.S_ISDIR(os.lstat(workspace / "skills").st_mode):
            line += ["--ro-bind", str(workspace / "skills"), f"{SANDBOX_ROOT}/skills"]
    # `python` is what models type; the sandbox has the system's python3 under that name too.
    line += ["--dir", "/opt/sandbox/bin", "--symlink", config.python, "/opt/sandbox/bin/python"]
    line += ["--chdir", cwd, "--clearenv"]
    for key, value in env.items():
        line += ["--setenv", key, value]
    line += [
        "--",
        config.setpriv,
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--",
        *argv,
    ]
    return line


_PROBE_SCRIPT = (
    "import os\n"
    "ifaces = [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]\n"
    "print(os.getuid(), os.getgid(), ','.join(sorted(ifaces)))\n"
)


def _probe(config: WorkspaceConfig) -> Isolation:
    mechanism = "bwrap+setpriv+prlimit"
    if not os.access(config.bwrap, os.X_OK):
        return Isolation(
            available=False,
            mechanism=mechanism,
            reason=f"bubblewrap is not installed ({config.bwrap} not found; on Debian or Ubuntu: apt install bubblewrap)",
        )
    for tool in (config.prlimit, config.setpriv, config.python):
        if not os.access(tool, os.X_OK):
            return Isolation(available=False, mechanism=mechanism, reason=f"{tool} is not installed")
    if os.geteuid() != 0:
        return Isolation(
            available=False,
            mechanism=mechanism,
            reason=f"the sandbox starts as root to drop to a uid of its pool; this process runs as uid {os.geteuid()}",
        )
    try:
        prepare_root(config.root)
    except WorkspaceError as exc:
        return Isolation(available=False, mechanism=mechanism, reason=str(exc))
    # The probe leases a uid of the pool like a workspace (another's could be at its process
    # limit). A full pool is not a verdict on the sandbox: `probe_isolation` asks again later.
    try:
        lease = lease_uid(config.uid_lock_folder, config.uid_pool, holder=".probe")
    except OSError as exc:
        reason = f"the sandbox uids cannot be leased in {str(config.uid_lock_folder)!r}: {exc.strerror}"
        return Isolation(available=False, mechanism=mechanism, reason=reason)
    uid = lease.uid
    probe_dir = config.root / f".probe-{os.getpid()}-{threading.get_ident()}"
    try:
        workspace = probe_dir / "ws"
        workspace.mkdir(parents=True, exist_ok=True)
        os.chown(workspace, uid, uid)
        argv = sandbox_argv(
            config,
            workspace,
            uid=uid,
            cwd=SANDBOX_ROOT,
            env={"PATH": "/usr/bin:/bin"},
            argv=[config.python, "-c", _PROBE_SCRIPT],
        )
        done = subprocess.run(argv, capture_output=True, timeout=20, env={}, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return Isolation(available=False, mechanism=mechanism, reason=f"the sandbox could not start: {exc}")
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
        lease.release()
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()[-400:]
        return Isolation(available=False, mechanism=mechanism, reason=f"the sandbox failed to start: {detail}")
    words = done.stdout.decode(errors="replace").split()
    expected = [str(uid), str(uid)]
    if words[:2] != expected:
        return Isolation(
            available=False, mechanism=mechanism, reason=f"the sandbox runs as uid/gid {words[:2]!r}, not {expected!r}"
        )
    interfaces = words[2].split(",") if len(words) > 2 else []
    if [i for i in interfaces if i and i != "lo"]:
        return Isolation(
            available=False, mechanism=mechanism, reason=f"the sandbox still sees network interfaces {interfaces!r}"
        )
    return Isolation(available=True, mechanism=mechanism)


_probe_lock = threading.Lock()


@functools.cache
def _cached_probe(config: WorkspaceConfig) -> Isolation:
    with _probe_lock:
        isolation = _probe(config)
    if isolation.available:
        pool = config.uid_pool
        logger.info(
            "workspace sandbox ready (%s, a uid per workspace from %s-%s, no network)",
            isolation.mechanism,
            pool[0],
            pool[-1],
        )
    else:
        logger.warning(
            "workspace sandbox UNAVAILABLE: %s. Code execution (skill_run, workspace_exec) is refused.",
            isolation.reason,
        )
    return isolation


def probe_isolation(config: WorkspaceConfig) -> Isolation:
    """Whether the sandbox works here; checked once per process and configuration (but for
    a full uid pool, which says nothing of the sandbox: asked again next time)."""
    try:
        return _cached_probe(config)
    except WorkspaceError as exc:
        return Isolation(available=False, mechanism="bwrap+setpriv+prlimit", reason=str(exc))
