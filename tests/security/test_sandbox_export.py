"""Issue 17: the code sandbox must not export, write or name host files.

A sandboxed command can replace anything under its workspace with a symlink, a hard link
or a FIFO, at any moment. Most tests here play that attacker directly on the host (no
bwrap needed): they plant the links in the workspace folder, then ask the web process's
side (running as root) to collect, read or write. The end-to-end tests run real commands
and skip, saying why, where the sandbox cannot work.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from sessions_app.core.inmemory import InMemorySessionService
from skills_app.core.agent import SkillsLLMAgent
from skills_app.core.repository import InMemorySkillRepository
from skills_app.core.tools import SkillsConfig, SkillToolset
from skills_app.core.workspace import (
    MIB,
    SandboxLimits,
    Workspace,
    WorkspaceConfig,
    WorkspaceError,
    WorkspaceExecutor,
)

SECRET = b"HOST-SECRET-do-not-export"
IS_ROOT = os.geteuid() == 0


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A host folder beside the workspaces, holding what an attacker wants."""
    folder = tmp_path / "host"
    folder.mkdir()
    (folder / "secret.txt").write_bytes(SECRET)
    (folder / "report.txt").write_bytes(SECRET)
    (folder / "alpha").mkdir()
    (folder / "alpha" / "keep.txt").write_bytes(SECRET)
    return folder


def _executor(root: Path, **config: Any) -> WorkspaceExecutor:
    return WorkspaceExecutor(WorkspaceConfig(root=root, **config))


@pytest.fixture(params=["tmpfs", "checked"])
def workspace(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workspace]:
    """A workspace with a tmpfs quota (where this process may mount) and one without."""
    executor = _executor(tmp_path / "workspaces", tmpfs=request.param == "tmpfs")
    found = executor.workspace("inv-export")
    yield found
    executor.remove("inv-export")


def _out(workspace: Workspace) -> Path:
    return workspace.files / "out"


def _leaked(outputs: list[Any]) -> bool:
    return any(SECRET in o.data for o in outputs)


# -- collecting outputs: never follow a link -----------------------------------------------------


def test_an_out_folder_replaced_by_a_symlink_to_a_host_folder_exports_nothing(
    workspace: Workspace, host_dir: Path
) -> None:
    _out(workspace).rmdir()
    _out(workspace).symlink_to(host_dir)

    outputs, warnings = workspace.collect_outputs()

    assert outputs == []
    assert any(w.startswith("out/") and "symlink" in w and "refused" in w for w in warnings), warnings


def test_an_out_folder_linked_to_the_root_exports_nothing(workspace: Workspace) -> None:
    _out(workspace).rmdir()
    _out(workspace).symlink_to("/")

    outputs, _ = workspace.collect_outputs()

    assert outputs == []


def test_a_file_in_out_linked_to_a_host_file_is_refused(workspace: Workspace, host_dir: Path) -> None:
    (_out(workspace) / "report.md").write_text("mine")
    (_out(workspace) / "leak.txt").symlink_to(host_dir / "secret.txt")

    outputs, warnings = workspace.collect_outputs()

    assert [(o.path, o.data) for o in outputs] == [("report.md", b"mine")]
    assert any("leak.txt" in w and "symlink refused" in w for w in warnings)


def test_a_subfolder_of_out_linked_to_a_host_folder_is_refused(workspace: Workspace, host_dir: Path) -> None:
    (_out(workspace) / "sub").symlink_to(host_dir)
    (_out(workspace) / "deep").mkdir()
    (_out(workspace) / "deep" / "etc").symlink_to("/etc")

    outputs, warnings = workspace.collect_outputs()

    assert outputs == []
    assert any("out/sub" in w and "refused" in w for w in warnings)
    assert any("out/deep/etc" in w and "refused" in w for w in warnings)


def test_a_hard_link_to_a_file_outside_the_workspace_is_refused(tmp_path: Path, host_dir: Path) -> None:
    # Only possible without the tmpfs (a link cannot cross filesystems); refused either way.
    executor = _executor(tmp_path / "workspaces", tmpfs=False)
    workspace = executor.workspace("inv-hardlink")
    os.link(host_dir / "secret.txt", _out(workspace) / "hard.txt")

    outputs, warnings = workspace.collect_outputs()

    assert outputs == []
    assert any("out/hard.txt" in w and "hard link" in w for w in warnings)


def test_a_folder_swapped_for_a_symlink_after_the_listing_is_still_refused(
    workspace: Workspace, host_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sub = _out(workspace) / "sub"
    sub.mkdir()
    (sub / "report.txt").write_text("ok")
    real_open = os.open
    swapped: list[bool] = []

    def open_after_swap(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        # The attacker wins the race: between the listing and the read, `out/sub` becomes a
        # symlink to a host folder holding a file of the same name.
        if os.fspath(path).endswith("report.txt") and not swapped:
            swapped.append(True)
            sub.rename(_out(workspace) / "sub-moved")
            sub.symlink_to(host_dir)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_after_swap)
    outputs, _ = workspace.collect_outputs()
    monkeypatch.undo()

    assert swapped, "the walk never opened report.txt"
    assert not _leaked(outputs)


@contextlib.contextmanager
def swapping(folder: Path, parked: Path, target: Path) -> Iterator[None]:
    """While the body runs, a thread keeps swapping `folder` for a symlink to `target` and
    back, with threads switched as finely as the interpreter allows: the race an untrusted
    workspace can run against the host's reads and writes."""
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):  # the workspace's side may have made the folder meanwhile
                folder.rename(parked)
                folder.symlink_to(target)
                folder.unlink()
                parked.rename(folder)

    swapper = threading.Thread(target=swap)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    swapper.start()
    try:
        yield
    finally:
        stop.set()
        swapper.join()
        sys.setswitchinterval(interval)


def test_a_racing_swapper_never_gets_a_host_file_exported(workspace: Workspace, host_dir: Path) -> None:
    sub = _out(workspace) / "sub"
    sub.mkdir()
    (sub / "secret.txt").write_text("mine")
    rounds = 0
    with swapping(sub, _out(workspace) / "parked", host_dir):
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            outputs, _ = workspace.collect_outputs()
            assert not _leaked(outputs)
            rounds += 1
    assert rounds > 5


def test_fifos_and_device_files_are_refused_without_blocking(workspace: Workspace) -> None:
    os.mkfifo(_out(workspace) / "pipe")
    if IS_ROOT and workspace.quota != "tmpfs":  # the tmpfs is nodev, and only root may mknod
        os.mknod(_out(workspace) / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    started = time.monotonic()

    outputs, warnings = workspace.collect_outputs()

    assert time.monotonic() - started < 2
    assert outputs == []
    assert any("out/pipe" in w and "not a regular file" in w for w in warnings)
    if IS_ROOT and workspace.quota != "tmpfs":
        assert any("out/null" in w and "not a regular file" in w for w in warnings)


def test_names_with_dots_are_plain_names_and_names_with_newlines_are_refused(workspace: Workspace) -> None:
    for name in ("..hidden", "a..b", "..."):
        (_out(workspace) / name).write_text(name)
    (_out(workspace) / "fake\nout_secret.txt: saved").write_text("forged")

    outputs, warnings = workspace.collect_outputs()

    assert sorted(o.path for o in outputs) == ["...", "..hidden", "a..b"]
    refused = [w for w in warnings if "control characters" in w]
    assert len(refused) == 1 and "\n" not in refused[0] and "'fake\\nout_secret.txt: saved'" in refused[0]


# -- writing and staging: never write through a link ----------------------------------------------


def test_a_write_through_a_symlinked_folder_is_refused_and_the_host_file_untouched(
    workspace: Workspace, host_dir: Path
) -> None:
    (workspace.files / "work" / "inputs").symlink_to(host_dir)

    with pytest.raises(WorkspaceError, match="outside the workspace"):
        workspace.write_file("work/inputs/secret.txt", b"overwritten")

    assert (host_dir / "secret.txt").read_bytes() == SECRET


def test_a_racing_swapper_never_gets_a_host_file_written(workspace: Workspace, host_dir: Path) -> None:
    inputs = workspace.files / "work" / "inputs"
    inputs.mkdir()
    with swapping(inputs, workspace.files / "work" / "parked", host_dir):
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            with contextlib.suppress(WorkspaceError, OSError):  # refused, or lost the race: both fine
                workspace.write_file("work/inputs/secret.txt", b"overwritten")
    assert (host_dir / "secret.txt").read_bytes() == SECRET


def test_a_write_to_a_symlinked_file_replaces_the_link_not_the_host_file(workspace: Workspace, host_dir: Path) -> None:
    (workspace.files / "work" / "inputs").mkdir()
    (workspace.files / "work" / "inputs" / "data.json").symlink_to(host_dir / "secret.txt")

    workspace.write_file("work/inputs/data.json", b"{}")

    assert (host_dir / "secret.txt").read_bytes() == SECRET
    assert not (workspace.files / "work" / "inputs" / "data.json").is_symlink()


def test_staging_a_skill_never_deletes_or_writes_through_a_symlinked_skills_folder(
    workspace: Workspace, host_dir: Path
) -> None:
    skills = workspace.files / "skills"
    skills.rmdir()
    skills.symlink_to(host_dir)

    with pytest.raises(WorkspaceError, match="outside the workspace"):
        workspace.stage_skill("alpha", {"SKILL.md": "overwritten"})

    assert (host_dir / "alpha" / "keep.txt").read_bytes() == SECRET
    assert not (host_dir / "alpha" / "SKILL.md").exists()


@pytest.mark.parametrize("path", ["../x", "work/../../x", "/etc/passwd", "/workspace/../x", "work/a\nb", "out/\x00"])
def test_paths_that_leave_the_workspace_or_hold_control_characters_are_refused(workspace: Workspace, path: str) -> None:
    with pytest.raises(WorkspaceError):
        workspace.write_file(path, b"x")
    with pytest.raises(WorkspaceError):
        workspace.resolve(path)


# -- secrets out of reach: the workspaces' parent holds nothing secret ---------------------------------


def test_the_secret_key_credentials_and_artifacts_live_outside_the_workspaces_parent(settings: Any) -> None:
    parent = Path(settings.AGENTSITE_WORKSPACE_ROOT).resolve().parent
    secrets = {
        "secret key": settings.VAR_DIR / "secret_key",
        "demo credentials": settings.VAR_DIR / "demo_credentials.txt",
        "artifacts": Path(settings.STORAGES["artifacts"]["OPTIONS"].get("location", settings.VAR_DIR / "artifacts")),
        "media": Path(settings.MEDIA_ROOT),
        "var": Path(settings.VAR_DIR),
    }

    for what, path in secrets.items():
        assert not path.resolve().is_relative_to(parent), f"{what} ({path}) is under the workspaces' parent {parent}"
    key_file = settings.VAR_DIR / "secret_key"
    if key_file.exists():
        assert stat.S_IMODE(key_file.stat().st_mode) & 0o077 == 0, "the secret key file is readable by others"


def test_a_workspace_root_that_is_a_symlink_or_writable_by_others_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "open").mkdir(mode=0o777)
    (tmp_path / "open").chmod(0o777)

    for name in ("link", "open"):
        with pytest.raises(WorkspaceError, match="workspace root"):
            _executor(tmp_path / name).workspace("inv-root")


# -- quotas -------------------------------------------------------------------------------------------


def test_a_checked_workspace_over_its_byte_quota_is_emptied_with_a_warning(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "workspaces", tmpfs=False, max_bytes=1 * MIB, max_files=100)
    workspace = executor.workspace("inv-quota")
    for i in range(3):
        (_out(workspace) / f"big{i}.bin").write_bytes(b"x" * 512 * 1024)

    warnings = workspace.enforce_quota()

    assert len(warnings) == 1 and "over its quota of 1048576" in warnings[0], warnings
    assert workspace.collect_outputs() == ([], [])
    assert workspace.usage().bytes < 64 * 1024


def test_a_checked_workspace_over_its_file_quota_is_emptied_with_a_warning(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "workspaces", tmpfs=False, max_bytes=1 * MIB, max_files=20)
    workspace = executor.workspace("inv-files")
    for i in range(25):
        (workspace.files / "work" / f"f{i}").touch()

    warnings = workspace.enforce_quota()

    assert len(warnings) == 1 and "over its quota of 20" in warnings[0], warnings
    assert workspace.usage().files == 0


@pytest.mark.skipif(not IS_ROOT, reason="mounting a tmpfs needs root")
def test_a_tmpfs_workspace_refuses_bytes_and_files_past_its_quota(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "workspaces", max_bytes=1 * MIB, max_files=20)
    workspace = executor.workspace("inv-tmpfs")
    if workspace.quota != "tmpfs":
        pytest.skip("this process may not mount a tmpfs; the checked quota applies (tested above)")

    with pytest.raises(OSError, match="No space left"):
        (_out(workspace) / "big.bin").write_bytes(b"x" * 2 * MIB)
    (_out(workspace) / "big.bin").unlink()
    with pytest.raises(OSError, match="No space left"):
        for i in range(25):
            (workspace.files / "work" / f"f{i}").touch()

    assert any("workspace is full" in w for w in workspace.enforce_quota())
    executor.remove("inv-tmpfs")
    assert not workspace.path.exists() and not os.path.ismount(workspace.files)


# -- removal: at the run's end, and by age -----------------------------------------------------------


def test_the_sweep_removes_old_workspaces_of_this_process_too(tmp_path: Path) -> None:
    executor = _executor(tmp_path / "workspaces", ttl_s=3600)
    old = executor.workspace("inv-old")
    (_out(old) / "left.txt").write_text("stale")
    two_hours_ago = time.time() - 7200
    os.utime(old.path, (two_hours_ago, two_hours_ago))

    executor.workspace("inv-new")

    assert not old.path.exists()
    assert not os.path.ismount(old.files)
    assert executor.workspace("inv-old").collect_outputs() == ([], [])  # a fresh one


async def test_a_runs_workspace_is_removed_when_the_run_ends(tmp_path: Path) -> None:
    root = tmp_path / "workspaces"
    executor = _executor(root, limits=SandboxLimits(timeout_s=3, cpu_s=3))
    toolset = SkillToolset(InMemorySkillRepository([]), config=SkillsConfig(profile="full"), executor=executor)
    model = ScriptedModel.of(ScriptStep.call("workspace_exec", {"command": "echo hi > out/hi.txt"}), "done")
    agent = SkillsLLMAgent(skills=toolset, name="helper", model=model, instruction="You help.")
    runner = Runner(app="test", agents=[agent], session_service=InMemorySessionService())

    events = [e async for e in runner.run(user_id="alice", message="go")]

    assert any(e.is_tool_result for e in events)
    assert [p.name for p in root.iterdir() if not p.name.startswith(".")] == []


# -- end to end, through the sandbox -------------------------------------------------------------


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[WorkspaceExecutor]:
    executor = _executor(
        tmp_path / "workspaces",
        max_bytes=4 * MIB,
        max_files=200,
        limits=SandboxLimits(timeout_s=5, cpu_s=5, memory_bytes=256 * MIB, max_processes=32),
    )
    isolation = executor.isolation()
    if not isolation.available:
        pytest.skip(f"sandbox unavailable: {isolation.reason}")
    yield executor
    executor.remove("inv-e2e")


@pytest.mark.parametrize(
    "command",
    [
        "ln -s /etc out/etc && ln -s /etc/passwd out/passwd && ln -s /workspace/../.. out/up",
        "rm -r out && ln -s / out",
        "rm -r out && ln -s /proc/self/root out",
    ],
)
async def test_links_made_in_the_sandbox_export_nothing_from_outside(sandbox: WorkspaceExecutor, command: str) -> None:
    workspace = sandbox.workspace("inv-e2e")

    result = await sandbox.run(workspace, command)
    outputs, warnings = workspace.collect_outputs()

    assert result.exit_code == 0, result.stderr
    assert outputs == [] and warnings


async def test_the_sandbox_cannot_read_the_workspace_roots_host_path(sandbox: WorkspaceExecutor) -> None:
    workspace = sandbox.workspace("inv-e2e")
    if workspace.quota != "tmpfs":
        pytest.skip("without a tmpfs the bind mount's source path shows in mountinfo")

    result = await sandbox.run(workspace, "cat /proc/self/mountinfo")

    assert result.exit_code == 0, result.stderr
    assert " /workspace " in result.stdout
    assert str(sandbox.config.root) not in result.stdout and str(workspace.path) not in result.stdout


async def test_a_command_writing_past_the_quota_fails_and_leaves_the_workspace_within_it(
    sandbox: WorkspaceExecutor,
) -> None:
    workspace = sandbox.workspace("inv-e2e")
    started = time.monotonic()

    result = await sandbox.run(
        workspace,
        "for i in 1 2 3 4 5 6; do head -c 1048576 /dev/zero > out/f$i.bin || exit 1; done; "
        "for i in $(seq 1 300); do : > work/n$i || exit 2; done",
    )

    assert time.monotonic() - started < 5
    assert result.exit_code != 0
    assert any("quota" in w or "workspace is full" in w for w in result.warnings), result.warnings
    held = workspace.usage()
    assert held.bytes <= sandbox.config.max_bytes and held.files <= sandbox.config.max_files


async def test_a_checked_quota_stops_a_command_that_keeps_writing(tmp_path: Path) -> None:
    executor = _executor(
        tmp_path / "workspaces",
        tmpfs=False,
        max_bytes=2 * MIB,
        limits=SandboxLimits(timeout_s=5, cpu_s=5, file_size_bytes=1 * MIB),
    )
    if not executor.isolation().available:
        pytest.skip(f"sandbox unavailable: {executor.isolation().reason}")
    workspace = executor.workspace("inv-watch")

    result = await executor.run(
        workspace, "i=0; while true; do i=$((i+1)); head -c 524288 /dev/zero > work/f$i; sleep 0.05; done"
    )

    assert not result.timed_out and result.exit_code != 0
    assert any("over its quota" in w for w in result.warnings), result.warnings
    assert workspace.usage().bytes < 64 * 1024  # emptied
    executor.remove("inv-watch")
