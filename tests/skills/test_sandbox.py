"""The code workspace's sandbox: every escape attempt is contained, with a clear error.

These run real commands under bwrap + setpriv + prlimit (skipped, saying why, where the
sandbox cannot work); each is bounded by the fixture's 3-second limits.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from skills_app.core.workspace import (
    TRUNCATION_MARKER,
    CommandPolicy,
    IsolationUnavailableError,
    SandboxLimits,
    WorkspaceConfig,
    WorkspaceError,
    WorkspaceExecutor,
)
from tests.support.waiting import until


def _py(code: str) -> str:
    """A shell command that runs `code` with the sandbox's python3."""
    return f"python3 - <<'EOF'\n{code}\nEOF"


# Every workspace runs as a uid of its own from this pool.
SANDBOX_UIDS = WorkspaceConfig(root=Path("/nonexistent")).uid_pool


def _own_sandbox_processes() -> list[int]:
    """The sandbox user's processes that descend from this test process. Not the machine's:
    another test process (an xdist worker, another checkout's run) has sandboxes of its own.
    bwrap's pid namespace keeps every process a command starts under its bwrap, our child,
    until the namespace dies, and the kernel kills what is left in it then."""
    parents: dict[int, int] = {}
    sandboxed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines() if ":" in line)
        except OSError:  # ended meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(fields["PPid"])
        if int(fields["Uid"].split()[0]) in SANDBOX_UIDS:
            sandboxed.append(pid)
    me = os.getpid()

    def descends(pid: int) -> bool:
        seen: set[int] = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False

    return [pid for pid in sandboxed if descends(pid)]


def _no_sandbox_processes_left() -> bool:
    return not _own_sandbox_processes()


async def _sandbox_processes_gone(within_s: float = 5.0) -> bool:
    """Whether the sandbox's processes are gone, waiting up to `within_s` for the kernel to reap them."""
    deadline = time.monotonic() + within_s
    while not _no_sandbox_processes_left():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)  # poll interval
    return True


async def test_the_leak_check_sees_a_running_commands_processes_and_not_after(executor: WorkspaceExecutor) -> None:
    running = asyncio.ensure_future(executor.run(executor.workspace("inv-seen"), "sleep 2; echo done"))

    await until(_own_sandbox_processes, "the running command's processes are seen", timeout_s=10)
    result = await running

    assert "done" in result.stdout, result.stdout + result.stderr
    assert await _sandbox_processes_gone()


async def test_a_command_runs_as_an_unprivileged_user_in_the_workspace(executor: WorkspaceExecutor) -> None:
    workspace = executor.workspace("inv-basic")

    result = await executor.run(workspace, "id -u; pwd; echo hello > out/hello.txt; echo $OUTPUT_DIR")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == [str(workspace.uid), "/workspace", "/workspace/out"]
    assert workspace.uid in SANDBOX_UIDS
    assert (workspace.files / "out" / "hello.txt").read_text() == "hello\n"


async def test_writing_outside_the_workspace_fails_and_changes_nothing_on_the_host(
    executor: WorkspaceExecutor, tmp_path: Path
) -> None:
    workspace = executor.workspace("inv-write")
    target = tmp_path / "escaped.txt"

    result = await executor.run(
        workspace,
        _py(
            f"for p in ['/usr/escaped.txt', '/escaped.txt', '{target}', '../escaped.txt']:\n"
            "    try:\n        open(p, 'w').write('x'); print('WROTE', p)\n"
            "    except OSError as e:\n        print('refused', p, type(e).__name__)"
        ),
    )

    assert "WROTE" not in result.stdout
    assert result.stdout.count("refused") == 4, result.stdout + result.stderr
    assert not target.exists()
    assert not await asyncio.to_thread(os.path.exists, "/usr/escaped.txt")


async def test_reading_files_outside_the_workspace_is_refused(executor: WorkspaceExecutor, tmp_path: Path) -> None:
    secret = tmp_path / "root-only.txt"
    secret.write_text("top secret")
    secret.chmod(0o600)
    workspace = executor.workspace("inv-read")
    # A root-only file inside the workspace too: starting as root must not help.
    inside = workspace.files / "work" / "root-only.txt"
    inside.write_text("top secret")
    inside.chmod(0o600)

    result = await executor.run(
        workspace,
        _py(
            f"for p in ['{secret}', '/etc/shadow', '/root/.bashrc', 'work/root-only.txt', '/proc/1/environ']:\n"
            "    try:\n        print('READ', p, open(p).read()[:20])\n"
            "    except OSError as e:\n        print('refused', p, type(e).__name__)"
        ),
        cwd="",
    )

    assert "top secret" not in result.stdout
    assert "READ" not in result.stdout.replace("READ /proc/1/environ", ""), result.stdout
    assert "refused work/root-only.txt PermissionError" in result.stdout
    assert f"refused {secret} FileNotFoundError" in result.stdout


@pytest.mark.parametrize("port", [5432, 6379, 80])
async def test_sockets_cannot_reach_the_database_redis_or_anything(executor: WorkspaceExecutor, port: int) -> None:
    workspace = executor.workspace(f"inv-net-{port}")

    result = await executor.run(
        workspace,
        _py(
            "import socket\n"
            f"for host in ['127.0.0.1', '10.0.0.1', '1.1.1.1']:\n"
            "    s = socket.socket(); s.settimeout(1)\n"
            "    try:\n"
            f"        s.connect((host, {port})); print('CONNECTED', host)\n"
            "    except OSError as e:\n        print('blocked', host, e.errno)"
        ),
    )

    assert "CONNECTED" not in result.stdout
    # "connection refused" (the sandbox's own loopback) and "network unreachable" both mean blocked.
    assert result.stdout.count("blocked") == 3, result.stdout + result.stderr


async def test_a_fork_bomb_is_bounded_by_the_process_limit_and_ends(executor: WorkspaceExecutor) -> None:
    workspace = executor.workspace("inv-fork")
    started = time.monotonic()

    counted = await executor.run(
        workspace,
        _py(
            "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
            "            time.sleep(30)\n            os._exit(0)\n        n += 1\n"
            "except OSError as e:\n    print('stopped after', n, e.errno)"
        ),
    )
    # The process limit counts every process of the sandbox user: let the first command's
    # sleeping children die before the bomb starts.
    assert await _sandbox_processes_gone()
    bomb = await executor.run(workspace, "bomb() { bomb | bomb & }; bomb; echo started")

    assert time.monotonic() - started < 5
    words = counted.stdout.split()
    assert words[:2] == ["stopped", "after"], counted.stdout + counted.stderr
    assert int(words[2]) < executor.config.limits.max_processes and words[3] == "11"  # EAGAIN
    # Bounded either way: it ran to its end or timeout, or the limit refused its forks at once
    # (the limit is per user, so another sandbox running meanwhile, such as another xdist
    # worker's, shares it).
    assert bomb.timed_out or "started" in bomb.stdout or "Cannot fork" in bomb.stderr, bomb
    assert await _sandbox_processes_gone()  # the sleeping children died with the sandbox


async def test_allocating_a_gigabyte_fails(executor: WorkspaceExecutor) -> None:
    workspace = executor.workspace("inv-mem")

    result = await executor.run(workspace, _py("data = bytearray(1024 ** 3)\nprint('ALLOCATED', len(data))"))

    assert "ALLOCATED" not in result.stdout
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr


async def test_an_endless_loop_is_killed_at_the_timeout_with_all_its_processes(executor: WorkspaceExecutor) -> None:
    workspace = executor.workspace("inv-loop")
    started = time.monotonic()

    result = await executor.run(workspace, "(while true; do :; done) & sleep 100; while true; do :; done", timeout_s=1)

    elapsed = time.monotonic() - started
    assert result.timed_out and result.exit_code is None
    assert 0.9 <= elapsed < 3
    assert any("timed out after 1 s" in w for w in result.warnings)
    assert await _sandbox_processes_gone()


async def test_a_cpu_bound_command_is_stopped_by_its_cpu_limit(tmp_path: Path) -> None:
    executor = WorkspaceExecutor(WorkspaceConfig(root=tmp_path / "ws", limits=SandboxLimits(timeout_s=10, cpu_s=1)))
    if not executor.isolation().available:
        pytest.skip(executor.isolation().reason)

    result = await executor.run(executor.workspace("inv-cpu"), "python3 -c 'while True: pass'")

    assert not result.timed_out
    assert result.exit_code != 0 and result.duration_ms < 5000


async def test_a_hundred_megabytes_of_stdout_is_capped_inline_quickly(executor: WorkspaceExecutor) -> None:
    workspace = executor.workspace("inv-out")
    started = time.monotonic()

    result = await executor.run(
        workspace,
        _py("import sys\nchunk = b'x' * (1024 * 1024)\nfor _ in range(100):\n    sys.stdout.buffer.write(chunk)"),
    )

    assert time.monotonic() - started < 3
    assert result.exit_code == 0
    assert result.stdout_bytes == 100 * 1024 * 1024
    assert result.stdout.startswith("x" * 16384) and result.stdout.count("x") == 16384
    assert TRUNCATION_MARKER in result.stdout and result.stdout_truncated
    assert any("stdout truncated" in w for w in result.warnings)


async def test_the_environment_is_scrubbed(executor: WorkspaceExecutor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSITE_TEST_SECRET", "leaked")
    workspace = executor.workspace("inv-env")

    result = await executor.run(workspace, "env", env={"MY_VAR": "mine"})

    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert "AGENTSITE_TEST_SECRET" not in names and "DATABASE_URL" not in names
    assert "MY_VAR=mine" in result.stdout
    with pytest.raises(WorkspaceError, match="LD_PRELOAD"):
        await executor.run(workspace, "true", env={"LD_PRELOAD": "/tmp/x.so"})


async def test_paths_outside_the_workspace_and_symlink_escapes_are_refused(
    executor: WorkspaceExecutor, tmp_path: Path
) -> None:
    workspace = executor.workspace("inv-paths")
    os.symlink(tmp_path, workspace.files / "work" / "escape")

    for cwd in ("../", "/etc", "work/escape", "work/../../.."):
        with pytest.raises(WorkspaceError, match="outside the workspace"):
            await executor.run(workspace, "pwd", cwd=cwd)
    assert (await executor.run(workspace, "pwd", cwd="/workspace/work")).stdout.strip() == "/workspace/work"


async def test_symlinks_in_out_are_never_collected(executor: WorkspaceExecutor, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    workspace = executor.workspace("inv-links")

    result = await executor.run(
        workspace,
        f"echo report > out/report.md && ln -s {secret} out/leak.txt && ln -s /etc out/etc && mkdir -p out/sub "
        "&& echo nested > out/sub/n.txt",
    )
    outputs, warnings = workspace.collect_outputs()

    assert result.exit_code == 0, result.stderr
    assert [(o.path, o.data) for o in outputs] == [("report.md", b"report\n"), ("sub/n.txt", b"nested\n")]
    assert any("leak.txt" in w and "refused" in w for w in warnings)
    assert any("etc" in w and "refused" in w for w in warnings)


def test_the_command_policy_allows_only_listed_programs_and_no_shell_tricks() -> None:
    policy = CommandPolicy(allowed=frozenset({"python3", "ls"}), denied=frozenset({"rm"}))

    policy.check("python3 scripts/run.py --x 1 && ls out | ls")
    for command, reason in [
        ("rm -rf out", "denied"),
        ("curl http://x", "not in the allowed commands"),
        ("bash -c 'ls'", "never allowed"),
        ("env python3 x.py", "never allowed"),
        ("ls $(rm -rf /)", "'\\$'"),
        ("ls > out/x", "'>'"),
        ("ls `rm x`", "'`'"),
        ("X=1 python3 x.py", "leading assignment"),
        ("ls &", "operator"),
    ]:
        with pytest.raises(WorkspaceError, match=reason):
            policy.check(command)
    CommandPolicy().check("anything goes | here > out/x")  # no lists: the sandbox is the protection


async def test_a_machine_without_the_sandbox_refuses_to_execute(tmp_path: Path) -> None:
    executor = WorkspaceExecutor(WorkspaceConfig(root=tmp_path / "ws", bwrap=str(tmp_path / "no-bwrap")))

    isolation = executor.isolation()

    assert (
        not isolation.available
        and "no-bwrap not found" in isolation.reason
        and "apt install bubblewrap" in isolation.reason
    )
    with pytest.raises(IsolationUnavailableError, match="code execution is disabled"):
        await executor.run(executor.workspace("inv-none"), "echo hi")
