"""A uid of its own per workspace: one workspace's process limit never stops another's.

RLIMIT_NPROC counts the processes of a real uid on the whole machine. When every
workspace ran as uid 65534, a command holding its limit (sleeping children, nothing else)
made every other user's commands fail to start: a cross-user denial of service. Each live
workspace now leases a uid of `WorkspaceConfig.uid_pool`, with a lock file per uid that
holds across processes. The tests that run commands skip, saying why, where the sandbox
cannot work; the lease tests need none.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from skills_app.core.workspace import (
    SandboxLimits,
    WorkspaceConfig,
    WorkspaceError,
    WorkspaceExecutor,
    lease_uid,
    probe_isolation,
)
from tests.support.sandbox_uids import TEST_UID_LOCKS
from tests.support.waiting import until

IS_ROOT = os.geteuid() == 0
ROOT_ONLY = pytest.mark.skipif(not IS_ROOT, reason="workspaces give their files to the sandbox uid: needs root")
# A pool of its own for the lease tests (their leases are in their own folder anyway).
SMALL_POOL = range(2_100_000_000, 2_100_000_002)


def _sandboxed(root: Path, **limits: int) -> WorkspaceExecutor:
    config = WorkspaceConfig(
        root=root,
        limits=SandboxLimits(timeout_s=10, cpu_s=5, memory_bytes=256 * 1024 * 1024, **limits),
        uid_locks=TEST_UID_LOCKS,
    )
    executor = WorkspaceExecutor(config)
    isolation = executor.isolation()
    if not isolation.available:
        pytest.skip(f"sandbox unavailable: {isolation.reason}")
    return executor


@pytest.fixture
def executor(tmp_path: Path) -> WorkspaceExecutor:
    return _sandboxed(tmp_path / "workspaces", max_processes=32)


def _py(code: str) -> str:
    return f"python3 - <<'EOF'\n{textwrap.dedent(code)}\nEOF"


# -- commands ---------------------------------------------------------------------------------


async def test_two_workspaces_run_as_two_uids_each_its_own(executor: WorkspaceExecutor) -> None:
    first = executor.workspace("inv-uid-a")
    second = executor.workspace("inv-uid-b")

    results = [await executor.run(w, "id -u; id -g; echo x > out/mine.txt") for w in (first, second)]

    assert first.uid != second.uid
    assert all(w.uid in executor.config.uid_pool for w in (first, second))
    for workspace, result in zip((first, second), results, strict=True):
        assert result.exit_code == 0, result.stderr
        assert result.stdout.split() == [str(workspace.uid), str(workspace.uid)]
        written = os.stat(workspace.files / "out" / "mine.txt")
        assert (written.st_uid, written.st_gid) == (workspace.uid, workspace.uid)


async def test_a_workspace_holding_its_process_limit_does_not_stop_another_workspaces_commands(
    tmp_path: Path,
) -> None:
    executor = _sandboxed(tmp_path / "workspaces", max_processes=8)
    hog = executor.workspace("inv-hog")
    other = executor.workspace("inv-other")
    # Fork sleeping children until the kernel refuses (EAGAIN: the limit), say so, then wait.
    holding = asyncio.ensure_future(
        executor.run(
            hog,
            _py(
                """
                import os, time
                n = 0
                try:
                    while True:
                        if os.fork() == 0:
                            time.sleep(60)
                            os._exit(0)
                        n += 1
                except OSError as e:
                    open('/workspace/out/full.tmp', 'w').write(f'{n} {e.errno}')
                    os.rename('/workspace/out/full.tmp', '/workspace/out/full')
                time.sleep(60)
                """
            ),
        )
    )
    marker = hog.files / "out" / "full"
    try:
        await until(lambda: marker.exists() or holding.done(), "the hog reached its process limit", timeout_s=8)
        assert marker.exists(), holding.result() if holding.done() else "no marker"
        children, code = marker.read_text().split()
        assert code == "11" and int(children) < 8  # EAGAIN: every process it may have is in use

        # Another workspace's command starts, and forks, while the hog holds its limit.
        result = await executor.run(other, "sleep 0 & sleep 0 & wait; id -u; echo ran", timeout_s=5)

        assert not holding.done()  # the hog still held its processes throughout
        assert result.exit_code == 0, result.stdout + result.stderr
        assert result.stdout.split() == [str(other.uid), "ran"]
    finally:
        holding.cancel()  # kills the hog's process group; its pid namespace dies with it
        with contextlib.suppress(asyncio.CancelledError):
            await holding


# -- leases: release, exhaustion, across processes -------------------------------------------


@ROOT_ONLY
def test_a_removed_workspaces_uid_is_leased_again_and_a_full_pool_is_a_clear_error(tmp_path: Path) -> None:
    executor = WorkspaceExecutor(WorkspaceConfig(root=tmp_path / "workspaces", uid_pool=SMALL_POOL))
    first = executor.workspace("inv-one")
    second = executor.workspace("inv-two")
    assert [first.uid, second.uid] == list(SMALL_POOL)

    with pytest.raises(WorkspaceError, match=r"no sandbox uid is free: all 2 of the pool 2100000000-2100000001"):
        executor.workspace("inv-three")
    assert not (tmp_path / "workspaces" / "inv-three").exists()

    executor.remove("inv-one")
    with pytest.raises(WorkspaceError, match="holds no sandbox uid"):
        _ = first.uid  # a removed workspace can run nothing
    third = executor.workspace("inv-three")
    assert third.uid == SMALL_POOL[0]
    assert os.stat(third.files / "work").st_uid == SMALL_POOL[0]


@ROOT_ONLY
def test_two_executors_sharing_a_root_never_lease_the_same_uid(tmp_path: Path) -> None:
    # Two executors of one process: like two web processes, their leases are separate open files.
    config = WorkspaceConfig(root=tmp_path / "workspaces", uid_pool=SMALL_POOL)
    one, two = WorkspaceExecutor(config), WorkspaceExecutor(config)

    assert one.workspace("inv-a").uid != two.workspace("inv-b").uid
    with pytest.raises(WorkspaceError, match="no sandbox uid is free"):
        one.workspace("inv-c")


_HOLDER = """
import sys
from pathlib import Path
from skills_app.core.workspace import lease_uid
lease = lease_uid(Path(sys.argv[1]), range(int(sys.argv[2]), int(sys.argv[3])), holder="child")
print(lease.uid, flush=True)
sys.stdin.read()  # holds the lease until its stdin closes, then exits
"""


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait(timeout=10)


def _hold(folder: Path, pool: range, started: list[subprocess.Popen[str]]) -> int:
    """Start a process that leases a uid of `pool` from `folder` and holds it; its uid."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(folder), str(pool.start), str(pool.stop)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    started.append(process)
    assert process.stdout is not None
    return int(process.stdout.readline())


def test_processes_leasing_from_one_folder_get_different_uids_and_a_dead_ones_uid_comes_back(
    tmp_path: Path, holders: list[subprocess.Popen[str]]
) -> None:
    folder = tmp_path / "leases"
    pool = range(2_100_000_000, 2_100_000_003)

    first = _hold(folder, pool, holders)
    second = _hold(folder, pool, holders)
    mine = lease_uid(folder, pool, holder="test")

    assert sorted([first, second, mine.uid]) == list(pool)
    with pytest.raises(WorkspaceError, match="no sandbox uid is free"):
        lease_uid(folder, pool, holder="test")

    # The kernel drops a process's locks when it ends, however it ends.
    holders[0].kill()
    holders[0].wait(timeout=10)
    again = lease_uid(folder, pool, holder="test")
    assert again.uid == first
    mine.release()
    again.release()
    assert lease_uid(folder, pool, holder="test").uid == pool[0]


@ROOT_ONLY
def test_a_workspace_left_by_a_dead_process_is_given_to_its_new_uid(tmp_path: Path) -> None:
    root = tmp_path / "workspaces"
    config = WorkspaceConfig(root=root, uid_pool=SMALL_POOL)
    # A process made it, wrote in it as its uid, and died without removing it.
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from skills_app.core.workspace import WorkspaceConfig, WorkspaceExecutor
        config = WorkspaceConfig(root=Path({str(root)!r}), uid_pool=range({SMALL_POOL.start}, {SMALL_POOL.stop}))
        executor = WorkspaceExecutor(config)
        workspace = executor.workspace("inv-left")
        workspace.write_file("work/data/notes.txt", b"left")
        print(workspace.uid, flush=True)
        os._exit(0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    dead_uid = int(done.stdout)
    assert os.stat(root / "inv-left" / "ws" / "work" / "data" / "notes.txt").st_uid == dead_uid
    executor = WorkspaceExecutor(config)
    holding = executor.workspace("inv-holds-the-first")  # the dead process's uid, now another's

    reopened = executor.workspace("inv-left")

    try:
        assert holding.uid == dead_uid and reopened.uid != dead_uid
        for path in ("", "work", "work/data", "work/data/notes.txt", "out"):
            found = os.stat(reopened.files / path)
            assert (found.st_uid, found.st_gid) == (reopened.uid, reopened.uid), path
        assert os.stat(reopened.files / "skills").st_uid == 0  # staged skills stay root's
    finally:
        executor.remove("inv-left")  # its tmpfs, where the dead process mounted one


async def test_the_probe_leases_a_uid_and_a_full_pool_is_not_remembered_as_a_broken_sandbox(
    tmp_path: Path,
) -> None:
    config = WorkspaceConfig(root=tmp_path / "workspaces", uid_pool=range(2_100_000_000, 2_100_000_001))
    executor = WorkspaceExecutor(config)
    held = lease_uid(config.uid_lock_folder, config.uid_pool, holder="test")

    full = probe_isolation(config)

    assert not full.available and "no sandbox uid is free" in full.reason, full
    held.release()
    isolation = probe_isolation(config)
    if not isolation.available:
        pytest.skip(f"sandbox unavailable: {isolation.reason}")
    result = await executor.run(executor.workspace("inv-after"), "id -u")
    assert result.stdout.split() == [str(config.uid_pool[0])]
