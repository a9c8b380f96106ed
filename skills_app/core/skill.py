"""Skills (SPEC 8.1): a capability packaged as instructions, documents and scripts.

A skill is a folder (or a database revision laid out the same way) with a `SKILL.md`:

    ---
    name: diagnostic-report
    description: Render the diagnosis as a Markdown and HTML report.
    ---
    The body: how to use the skill.

The front matter is parsed strictly and line-wise as `key: value` (SPEC 8.1), with YAML
block scalars (`|` keeps newlines, `>` folds them) for a multi-line value. Keys used:
`name`, `description` and, an Agentsite extension, `command` (what `skill_run` runs when a
call names no command). Other keys are kept in `metadata` and otherwise ignored.
Every other `*.md` / `*.txt` file of the skill is a *document*; every file is staged into
the workspace when the skill runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

SKILL_FILE = "SKILL.md"
DOC_SUFFIXES = (".md", ".txt")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024

SkillSource = Literal["fs", "db"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:(.*)$")


class SkillError(ValueError):
    """Base of the skill errors a caller (or the model) can act on."""


class SkillNotFoundError(SkillError, LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown skill: {name}")
        self.name = name


class SkillParseError(SkillError):
    """A SKILL.md that cannot be read as a skill; the message says where and why."""


@dataclass(frozen=True, kw_only=True)
class SkillSummary:
    """What the skill overview shows: a name and what the skill is for."""

    name: str
    description: str
    source: SkillSource = "fs"


@dataclass(frozen=True, kw_only=True)
class Skill:
    """A whole skill: its SKILL.md body, its documents and every file (path -> text).

    `files` holds every file of the skill, SKILL.md included, under relative slash paths;
    `docs` lists the document paths (sorted). `revision` is the database revision a
    managed skill was loaded from (None for a folder skill); `path` the folder of a
    folder skill.
    """

    name: str
    description: str
    body: str
    files: Mapping[str, str] = field(default_factory=dict)
    command: str | None = None
    source: SkillSource = "fs"
    revision: int | None = None
    path: str | None = None

    @property
    def docs(self) -> list[str]:
        return doc_paths(self.files)

    @property
    def summary(self) -> SkillSummary:
        return SkillSummary(name=self.name, description=self.description, source=self.source)


@dataclass(frozen=True, kw_only=True)
class ParsedSkillFile:
    """A parsed SKILL.md: front matter keys and the body after it."""

    name: str
    description: str
    body: str
    command: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


def doc_paths(files: Mapping[str, str]) -> list[str]:
    """The documents among a skill's files: every `*.md` / `*.txt` but SKILL.md, sorted."""
    return sorted(p for p in files if p != SKILL_FILE and p.lower().endswith(DOC_SUFFIXES))


def validate_name(name: str, *, where: str = "skill") -> str:
    """Lowercase letters, digits, `.`, `_` and `-`, at most 64 characters."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise SkillParseError(
            f"{where}: name {name!r} must be 1-{MAX_NAME_CHARS} characters of a-z, 0-9, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def parse_front_matter(text: str, *, where: str = SKILL_FILE) -> tuple[dict[str, str], str]:
    """(keys, body) of a document that starts with a `---` front matter block.

    Raises `SkillParseError` when the block is missing or unclosed, or a line is neither
    `key: value`, a continuation of a block scalar, a comment nor blank.
    """
    text = text.replace("\r\n", "\n").removeprefix("\ufeff")
    if not text.startswith("---\n"):
        raise SkillParseError(f"{where}: missing front matter (the file must start with a '---' line)")
    end = text.find("\n---\n", 3)
    if end < 0:
        if text.endswith("\n---"):
            end = len(text) - 4
        else:
            raise SkillParseError(f"{where}: front matter is not closed by a '---' line")
    header = text[4 : end + 1] if end >= 4 else ""
    body = text[end + 5 :] if end + 5 <= len(text) else ""
    keys: dict[str, str] = {}
    lines = header.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _KEY.match(line)
        if match is None or line[0].isspace():
            raise SkillParseError(f"{where}: front matter line {i} is not 'key: value': {line!r}")
        key, value = match.group(1), match.group(2).strip()
        if key in keys:
            raise SkillParseError(f"{where}: front matter key {key!r} appears twice")
        if value[:1] in ("|", ">") and value[1:].strip() in ("", "-", "+"):
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i][0].isspace()):
                block.append(lines[i])
                i += 1
            indents = [len(b) - len(b.lstrip()) for b in block if b.strip()]
            indent = min(indents) if indents else 0
            block_lines = [b[indent:] for b in block]
            while block_lines and not block_lines[-1].strip():
                block_lines.pop()
            keys[key] = (
                "\n".join(block_lines) if value[0] == "|" else " ".join(b.strip() for b in block_lines if b.strip())
            )
        else:
            if value[:1] in ("[", "{"):
                raise SkillParseError(
                    f"{where}: front matter key {key!r}: flow collections are not supported, got {value!r}"
                )
            keys[key] = _unquote(value)
    return keys, body.lstrip("\n")


def parse_skill_file(text: str, *, default_name: str | None = None, where: str = SKILL_FILE) -> ParsedSkillFile:
    """A SKILL.md as a skill. Name: the front matter's `name`, else `default_name` (the
    folder's name); raises `SkillParseError` when neither gives a valid name."""
    keys, body = parse_front_matter(text, where=where)
    name = keys.pop("name", "").strip() or (default_name or "")
    if not name:
        raise SkillParseError(f"{where}: front matter has no 'name'")
    validate_name(name, where=where)
    description = " ".join(keys.pop("description", "").split())
    if len(description) > MAX_DESCRIPTION_CHARS:
        description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
    command = keys.pop("command", "").strip() or None
    return ParsedSkillFile(name=name, description=description, body=body, command=command, metadata=keys)
