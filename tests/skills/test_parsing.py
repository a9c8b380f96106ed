"""SKILL.md parsing and the folder repository (SPEC 8.1)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from skills_app.core.repository import FolderSkillRepository
from skills_app.core.skill import SkillNotFoundError, SkillParseError, parse_front_matter, parse_skill_file
from tests.skills.conftest import skill_md


def test_front_matter_keys_and_body_are_read() -> None:
    parsed = parse_skill_file(
        skill_md("pdf-tools", "Work with PDF files.", body="# Use\nRun it.\n", command="python3 x.py")
    )

    assert (parsed.name, parsed.description, parsed.command) == ("pdf-tools", "Work with PDF files.", "python3 x.py")
    assert parsed.body == "# Use\nRun it.\n"


def test_block_scalars_keep_or_fold_lines_and_quotes_are_dropped() -> None:
    text = (
        "---\nname: 'quoted'\ndescription: >\n  folded over\n  two lines\nnotes: |\n  line one\n  line two\n---\nbody"
    )

    keys, body = parse_front_matter(text)

    assert keys == {"name": "quoted", "description": "folded over two lines", "notes": "line one\nline two"}
    assert body == "body"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# no front matter\nname: x\n", "missing front matter"),
        ("---\nname: x\ndescription: never closed\n", "not closed"),
        ("---\nname: x\nthis line is no key\n---\nbody", "is not 'key: value'"),
        ("---\nname: x\nname: y\n---\nbody", "appears twice"),
        ("---\nname: x\ntags: [a, b]\n---\nbody", "flow collections"),
        ("---\n  name: indented\n---\nbody", "is not 'key: value'"),
    ],
)
def test_bad_front_matter_is_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(SkillParseError, match=message):
        parse_skill_file(text, default_name="fallback")


def test_a_missing_name_falls_back_to_the_folder_name_and_an_invalid_one_is_refused() -> None:
    assert parse_skill_file(skill_md(None, "d"), default_name="from-folder").name == "from-folder"
    with pytest.raises(SkillParseError, match="no 'name'"):
        parse_skill_file(skill_md(None, "d"))
    with pytest.raises(SkillParseError, match="must be 1-64 characters"):
        parse_skill_file(skill_md("Bad Name!", "d"))


def test_folder_repository_lists_sorted_skills_first_name_wins_and_broken_ones_are_skipped(
    tmp_path: Path, make_skill: Callable[..., Path]
) -> None:
    make_skill("a/zeta", skill_md("zeta", "Z skill"))
    make_skill("a/one", skill_md("dup", "first occurrence"))
    make_skill("b/two", skill_md("dup", "second occurrence"))
    make_skill("b/unnamed", skill_md(None, "named by its folder"))
    make_skill("b/broken", "no front matter at all")
    repository = FolderSkillRepository([tmp_path / "a", tmp_path / "b", tmp_path / "a"])

    summaries = repository.summaries_sync()

    assert [(s.name, s.description) for s in summaries] == [
        ("dup", "first occurrence"),
        ("unnamed", "named by its folder"),
        ("zeta", "Z skill"),
    ]
    assert repository.path("dup") == tmp_path / "a" / "one"
    assert any("missing front matter" in e for e in repository.errors.values())


def test_get_reads_body_docs_and_files_and_leaves_out_escaping_symlinks(
    tmp_path: Path, make_skill: Callable[..., Path]
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    folder = make_skill(
        "root/s",
        skill_md("s", "d", body="Do this.\n"),
        {
            "docs/guide.md": "guide",
            "notes.txt": "notes",
            "scripts/run.py": "print(1)",
        },
    )
    os.symlink(secret, folder / "leak.txt")

    skill = FolderSkillRepository([tmp_path / "root"]).get_sync("s")

    assert skill.body == "Do this.\n"
    assert skill.docs == ["docs/guide.md", "notes.txt"]
    assert set(skill.files) == {"SKILL.md", "docs/guide.md", "notes.txt", "scripts/run.py"}
    with pytest.raises(SkillNotFoundError, match="unknown skill: nope"):
        FolderSkillRepository([tmp_path / "root"]).get_sync("nope")


def test_skill_files_are_reparsed_only_when_they_change_and_refresh_finds_new_folders(
    tmp_path: Path, make_skill: Callable[..., Path]
) -> None:
    folder = make_skill("root/s", skill_md("s", "v1"))
    repository = FolderSkillRepository([tmp_path / "root"])
    repository.summaries_sync()
    repository.summaries_sync()
    assert repository.parse_count == 1

    (folder / "SKILL.md").write_text(skill_md("s", "version two, longer"))
    assert [s.description for s in repository.summaries_sync()] == ["version two, longer"]
    assert repository.parse_count == 2

    make_skill("root/t", skill_md("t", "new"))
    assert [s.name for s in repository.summaries_sync()] == ["s"]  # not rescanned yet
    repository.scan()
    assert [s.name for s in repository.summaries_sync()] == ["s", "t"]
    assert repository.parse_count == 3  # s was unchanged: only t was parsed
