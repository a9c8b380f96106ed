"""Skill specs: what a reviewer proposes, and how it becomes a skill's files.

A `SkillSpec` (SPEC 9.3: name, description, when to use, steps, pitfalls; Agentsite adds an
optional script and the evidence event ids) is rendered as a SKILL.md the skill
repository parses (`skills_app.core.skill`): front matter `name` / `description`, then
"# Title", "## When to use", numbered "## Steps", optional "## Pitfalls"; a script is a
file under `scripts/`. `LibraryEntry` is an existing skill as the reviewer and the
reconciler see it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from skills_app.core.skill import MAX_NAME_CHARS, SKILL_FILE

SkillOrigin = Literal["fs", "evolution", "admin"]
_NAME_CHARS = re.compile(r"[^a-z0-9._-]+")
_SCRIPT_PATH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def sanitize_name(name: str) -> str:
    """A skill name from free text: lower case, spaces to `-`, only `[a-z0-9._-]`, at most
    64 characters, starting with a letter or digit (SPEC 9.5; empty: `unnamed-skill`)."""
    text = _NAME_CHARS.sub("-", name.strip().lower())
    text = re.sub(r"-{2,}", "-", text).strip("-._")[:MAX_NAME_CHARS].strip("-._")
    return text or "unnamed-skill"


@dataclass(frozen=True, kw_only=True)
class ScriptSpec:
    """A script shipped with the skill, stored as `scripts/<path>`."""

    path: str
    content: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "content": self.content}


@dataclass(frozen=True, kw_only=True)
class SkillSpec:
    """A proposed skill (see the module docstring); `evidence` holds ledger event ids."""

    name: str
    description: str
    when_to_use: str
    steps: tuple[str, ...]
    pitfalls: tuple[str, ...] = ()
    script: ScriptSpec | None = None
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "when_to_use": self.when_to_use,
            "steps": list(self.steps),
            "pitfalls": list(self.pitfalls),
            "evidence": list(self.evidence),
        }
        if self.script is not None:
            data["script"] = self.script.to_dict()
        return data

    @property
    def text(self) -> str:
        """Every word of the spec, for the checks that read it all (privacy, safety)."""
        parts = [self.name, self.description, self.when_to_use, *self.steps, *self.pitfalls]
        if self.script is not None:
            parts += [self.script.path, self.script.content]
        return "\n".join(parts)


@dataclass(frozen=True, kw_only=True)
class LibraryEntry:
    """An existing skill: what the reviewer is shown and the reconciler compares with.

    `origin` says who wrote the live version (a folder, evolution, a person in the admin);
    `files` are its current files (for the diff and the no-change check); `revision` the
    published database revision (None for a folder skill)."""

    name: str
    description: str
    body: str = ""
    origin: SkillOrigin = "fs"
    revision: int | None = None
    files: Mapping[str, str] = field(default_factory=dict)

    def excerpt(self, limit: int = 600) -> str:
        """SPEC 9.2: the body cut at `limit` characters, marked when cut."""
        body = self.body.strip()
        return body if len(body) <= limit else body[:limit].rstrip() + "\n... [truncated]"


def _title(name: str) -> str:
    return " ".join(part.capitalize() for part in re.split(r"[-_.]+", name) if part) or name


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_files(spec: SkillSpec) -> dict[str, str]:
    """The files of the skill a spec describes: SKILL.md, and the script if any."""
    lines = [
        "---",
        f"name: {spec.name}",
        f"description: {_one_line(spec.description)}",
    ]
    if spec.script is not None:
        lines.append(
            f"command: python scripts/{spec.script.path}"
            if spec.script.path.endswith(".py")
            else f"command: sh scripts/{spec.script.path}"
        )
    lines += [
        "---",
        f"# {_title(spec.name)}",
        "",
        "## When to use",
        "",
        _one_line(spec.when_to_use),
        "",
        "## Steps",
        "",
    ]
    lines += [f"{i}. {_one_line(step)}" for i, step in enumerate(spec.steps, 1)]
    if spec.pitfalls:
        lines += ["", "## Pitfalls", ""]
        lines += [f"- {_one_line(p)}" for p in spec.pitfalls]
    files = {SKILL_FILE: "\n".join(lines) + "\n"}
    if spec.script is not None:
        files[f"scripts/{spec.script.path}"] = spec.script.content
    return files


def valid_script_path(path: str) -> bool:
    """A plain file name (no directories, no `..`)."""
    return bool(_SCRIPT_PATH.match(path)) and ".." not in path
