"""Fixtures of the skill tests: skill folders on disk and a sandboxed executor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from skills_app.core.workspace import SandboxLimits, WorkspaceConfig, WorkspaceExecutor
from tests.support.sandbox_uids import TEST_UID_LOCKS

DEMO_SKILLS = Path(__file__).resolve().parents[2] / "agentsite" / "demo" / "skills"


def skill_md(name: str | None, description: str = "", body: str = "Body.\n", **extra: str) -> str:
    lines = ["---"]
    if name is not None:
        lines.append(f"name: {name}")
    if description:
        lines.append(f"description: {description}")
    lines += [f"{k}: {v}" for k, v in extra.items()]
    return "\n".join([*lines, "---", body])


@pytest.fixture
def make_skill(tmp_path: Path) -> Callable[..., Path]:
    """Write a skill folder: `make_skill("root/dir", SKILL.md text, {"docs/a.md": "..."})`."""

    def make(relative: str, text: str, files: dict[str, str] | None = None) -> Path:
        folder = tmp_path / relative
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(text)
        for path, content in (files or {}).items():
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(content)
        return folder

    return make


@pytest.fixture
def executor(tmp_path: Path) -> WorkspaceExecutor:
    """A sandbox with short limits; the tests that need it skip (saying why) where it cannot work."""
    config = WorkspaceConfig(
        root=tmp_path / "workspaces",
        limits=SandboxLimits(timeout_s=3, cpu_s=3, memory_bytes=256 * 1024 * 1024, max_processes=32),
        uid_locks=TEST_UID_LOCKS,
    )
    found = WorkspaceExecutor(config)
    isolation = found.isolation()
    if not isolation.available:
        print(f"sandbox unavailable here: {isolation.reason}")
        pytest.skip(f"sandbox unavailable: {isolation.reason}")
    return found
