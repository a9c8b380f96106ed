"""The skill repository (SPEC 8.1): one interface over folder skills and managed ones.

- `FolderSkillRepository` scans roots on disk: every directory holding a regular
  `SKILL.md` is a skill; the first occurrence of a name wins (roots in order, then paths
  sorted); a SKILL.md is re-parsed only when its size or mtime changed; `refresh()`
  rescans and swaps the index in one assignment.
- `InMemorySkillRepository` holds skills given to it (tests, embedding).
- `ChainedSkillRepository` puts several together, the first one holding a name winning
  (the composition root puts the database first, so a published revision overrides the
  folder it was imported from).

The Django side (`skills_app.backends.DjangoSkillRepository`) serves the published
revision of each database-managed skill.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from skills_app.core.skill import (
    SKILL_FILE,
    ParsedSkillFile,
    Skill,
    SkillNotFoundError,
    SkillParseError,
    SkillSummary,
    parse_skill_file,
)

logger = logging.getLogger(__name__)

MAX_SKILL_FILES = 200
MAX_SKILL_BYTES = 2 * 1024 * 1024
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", "node_modules", ".venv"})


@runtime_checkable
class SkillRepository(Protocol):
    """Where agents find skills."""

    async def summaries(self) -> list[SkillSummary]:
        """Every skill's name and description, sorted by name."""
        ...

    async def get(self, name: str) -> Skill:
        """The whole skill (body, documents, files); raises `SkillNotFoundError`."""
        ...

    async def refresh(self) -> None:
        """Re-read the sources (a rescan of the folders; nothing for the database)."""
        ...


class InMemorySkillRepository:
    """Skills held in memory; the first one given a name wins."""

    def __init__(self, skills: Iterable[Skill] = ()) -> None:
        self._skills: dict[str, Skill] = {}
        for skill in skills:
            self._skills.setdefault(skill.name, skill)

    def add(self, skill: Skill) -> None:
        self._skills[skill.name] = skill

    async def summaries(self) -> list[SkillSummary]:
        return sorted((s.summary for s in self._skills.values()), key=lambda s: s.name)

    async def get(self, name: str) -> Skill:
        try:
            return self._skills[name]
        except KeyError:
            raise SkillNotFoundError(name) from None

    async def refresh(self) -> None:
        return None


@dataclass(frozen=True, kw_only=True)
class _Entry:
    directory: Path
    signature: tuple[int, int]
    parsed: ParsedSkillFile


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_size, stat.st_mtime_ns)


def read_skill_files(directory: Path) -> dict[str, str]:
    """Every readable text file of a skill folder (relative slash paths), symlinks that
    lead outside the folder and binary files left out, within the size limits."""
    root = directory.resolve()
    files: dict[str, str] = {}
    total = 0
    for current, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(names):
            path = Path(current) / name
            try:
                resolved = path.resolve()
                if not resolved.is_relative_to(root) or not resolved.is_file():
                    continue
                data = resolved.read_bytes()
            except OSError:
                continue  # SPEC 8.1: unreadable entries are ignored
            total += len(data)
            if len(files) >= MAX_SKILL_FILES or total > MAX_SKILL_BYTES:
                logger.warning("skill folder %s is larger than the limits; files after %s left out", root, name)
                return files
            try:
                files[path.relative_to(root).as_posix()] = data.decode("utf-8")
            except UnicodeDecodeError:
                logger.info("skill file %s is not UTF-8 text; left out", path)
    return files


class FolderSkillRepository:
    """Skills from folders on disk (SPEC 8.1's FSRepository), local paths only."""

    def __init__(self, roots: Sequence[str | Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self._lock = threading.Lock()
        self._index: dict[str, _Entry] = {}
        # SKILL.md path -> (signature, parsed or the parse error), so that an unchanged
        # file is never parsed twice and a broken one is not re-reported on every scan.
        self._cache: dict[Path, tuple[tuple[int, int], ParsedSkillFile | SkillParseError]] = {}
        self._scanned = False
        self.parse_count = 0
        self.errors: dict[str, str] = {}

    # -- scanning (synchronous; the async methods run it in a thread)

    def _skill_dirs(self) -> list[Path]:
        found: list[Path] = []
        seen_roots: set[Path] = set()
        seen_dirs: set[Path] = set()
        for root in self.roots:
            try:
                resolved = root.resolve()
            except OSError:
                continue
            if resolved in seen_roots or not resolved.is_dir():
                continue
            seen_roots.add(resolved)
            for current, dirs, names in os.walk(resolved, followlinks=True):
                here = Path(current).resolve()
                if here in seen_dirs:  # a symlink loop or a directory reached twice
                    dirs[:] = []
                    continue
                seen_dirs.add(here)
                dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
                if SKILL_FILE in names and (Path(current) / SKILL_FILE).is_file():
                    found.append(Path(current))
        return found

    def _parse(self, skill_file: Path, signature: tuple[int, int]) -> ParsedSkillFile | SkillParseError:
        cached = self._cache.get(skill_file)
        if cached is not None and cached[0] == signature:
            return cached[1]
        self.parse_count += 1
        try:
            text = skill_file.read_text(encoding="utf-8")
            result: ParsedSkillFile | SkillParseError = parse_skill_file(
                text, default_name=skill_file.parent.name, where=str(skill_file)
            )
        except (OSError, UnicodeDecodeError) as exc:
            result = SkillParseError(f"{skill_file}: cannot read: {exc}")
        except SkillParseError as exc:
            result = exc
        if isinstance(result, SkillParseError):
            logger.warning("skipping skill: %s", result)
        self._cache[skill_file] = (signature, result)
        return result

    def scan(self) -> None:
        """Rescan every root and replace the index (SPEC 8.1 `Refresh`)."""
        with self._lock:
            index: dict[str, _Entry] = {}
            errors: dict[str, str] = {}
            for directory in self._skill_dirs():
                skill_file = directory / SKILL_FILE
                signature = _signature(skill_file)
                if signature is None:
                    continue
                parsed = self._parse(skill_file, signature)
                if isinstance(parsed, SkillParseError):
                    errors[str(skill_file)] = str(parsed)
                    continue
                if parsed.name in index:
                    logger.info(
                        "skill %r in %s ignored: the one in %s came first",
                        parsed.name,
                        directory,
                        index[parsed.name].directory,
                    )
                    continue
                index[parsed.name] = _Entry(directory=directory, signature=signature, parsed=parsed)
            self._index = index  # one assignment: readers see the old index or the new one
            self.errors = errors
            self._scanned = True

    def _current(self) -> dict[str, _Entry]:
        if not self._scanned:
            self.scan()
            return self._index
        # Re-parse only what changed (SPEC 8.1 signature cache); a change of name or a
        # vanished file means the index itself may change, so rescan then.
        if any(_signature(e.directory / SKILL_FILE) != e.signature for e in self._index.values()):
            self.scan()
        return self._index

    def summaries_sync(self) -> list[SkillSummary]:
        index = self._current()
        return [
            SkillSummary(name=name, description=entry.parsed.description, source="fs")
            for name, entry in sorted(index.items())
        ]

    def get_sync(self, name: str) -> Skill:
        entry = self._current().get(name)
        if entry is None:
            raise SkillNotFoundError(name)
        # SPEC 8.1: Get re-reads the SKILL.md (and collects the documents) every time.
        files = read_skill_files(entry.directory)
        text = files.get(SKILL_FILE)
        if text is None:
            raise SkillNotFoundError(name)
        parsed = parse_skill_file(text, default_name=entry.directory.name, where=str(entry.directory / SKILL_FILE))
        return Skill(
            name=name,
            description=parsed.description,
            body=parsed.body,
            files=files,
            command=parsed.command,
            source="fs",
            path=str(entry.directory),
        )

    def path(self, name: str) -> Path:
        """The skill's folder (SPEC 8.1 `Path`)."""
        entry = self._current().get(name)
        if entry is None:
            raise SkillNotFoundError(name)
        return entry.directory

    # -- the async contract

    async def summaries(self) -> list[SkillSummary]:
        return await asyncio.to_thread(self.summaries_sync)

    async def get(self, name: str) -> Skill:
        return await asyncio.to_thread(self.get_sync, name)

    async def refresh(self) -> None:
        await asyncio.to_thread(self.scan)


class ChainedSkillRepository:
    """Several repositories as one; for a name held by several, the first one wins."""

    def __init__(self, repositories: Sequence[SkillRepository]) -> None:
        self.repositories = list(repositories)

    async def summaries(self) -> list[SkillSummary]:
        merged: dict[str, SkillSummary] = {}
        for repository in self.repositories:
            for summary in await repository.summaries():
                merged.setdefault(summary.name, summary)
        return [merged[name] for name in sorted(merged)]

    async def get(self, name: str) -> Skill:
        for repository in self.repositories:
            try:
                return await repository.get(name)
            except SkillNotFoundError:
                continue
        raise SkillNotFoundError(name)

    async def refresh(self) -> None:
        for repository in self.repositories:
            await repository.refresh()


def skill_from_files(
    files: Mapping[str, str], *, source: str = "db", revision: int | None = None, default_name: str | None = None
) -> Skill:
    """A skill from its files (SKILL.md among them), as a database revision stores it."""
    text = files.get(SKILL_FILE)
    if text is None:
        raise SkillParseError(f"a skill needs a {SKILL_FILE}; got files {sorted(files)!r}")
    parsed = parse_skill_file(text, default_name=default_name)
    return Skill(
        name=parsed.name,
        description=parsed.description,
        body=parsed.body,
        files=dict(files),
        command=parsed.command,
        source="db" if source == "db" else "fs",
        revision=revision,
    )
