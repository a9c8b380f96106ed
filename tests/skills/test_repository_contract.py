"""The SkillRepository contract, over every backend (STYLE: contract suites define a
backend), and what only managed skills do: publish and roll back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from skills_app.core.repository import (
    ChainedSkillRepository,
    FolderSkillRepository,
    InMemorySkillRepository,
    skill_from_files,
)
from skills_app.core.skill import SkillNotFoundError
from tests.skills.conftest import skill_md

SKILLS = {
    "alpha": {
        "SKILL.md": skill_md("alpha", "First skill.", body="Alpha body.\n"),
        "docs/guide.md": "Guide.",
        "scripts/go.py": "print('go')",
    },
    "beta": {"SKILL.md": skill_md("beta", "Second skill.", body="Beta body.\n", command="python3 run.py")},
}


def _folder(tmp_path: Path) -> FolderSkillRepository:
    for name, files in SKILLS.items():
        for path, text in files.items():
            target = tmp_path / "skills" / name / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    return FolderSkillRepository([tmp_path / "skills"])


def _memory(tmp_path: Path) -> InMemorySkillRepository:
    return InMemorySkillRepository(skill_from_files(files) for files in SKILLS.values())


def _django(tmp_path: Path) -> Any:
    from skills_app.backends import DjangoSkillRepository
    from skills_app.services import skill_revision_create

    for files in SKILLS.values():
        skill_revision_create(app="test", files=files, source="fs", status="published")
    # A draft and a rejected revision of another skill: never visible to agents.
    skill_revision_create(app="test", files={"SKILL.md": skill_md("gamma", "Draft.")}, status="draft")
    return DjangoSkillRepository(app="test")


@pytest.fixture(params=["folder", "memory", pytest.param("django", marks=pytest.mark.django_db(transaction=True))])
def repository(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return {"folder": _folder, "memory": _memory, "django": _django}[request.param](tmp_path)


async def test_summaries_are_sorted_names_and_descriptions(repository: Any) -> None:
    summaries = await repository.summaries()

    assert [(s.name, s.description) for s in summaries] == [("alpha", "First skill."), ("beta", "Second skill.")]


async def test_get_returns_body_docs_files_and_default_command(repository: Any) -> None:
    alpha = await repository.get("alpha")
    beta = await repository.get("beta")

    assert alpha.body == "Alpha body.\n"
    assert alpha.docs == ["docs/guide.md"]
    assert alpha.files["scripts/go.py"] == "print('go')"
    assert (alpha.command, beta.command) == (None, "python3 run.py")


async def test_an_unknown_skill_is_reported_by_name(repository: Any) -> None:
    with pytest.raises(SkillNotFoundError, match="unknown skill: gamma"):
        await repository.get("gamma")
    await repository.refresh()
    assert len(await repository.summaries()) == 2


async def test_a_chained_repository_serves_a_name_from_the_first_that_has_it(tmp_path: Path) -> None:
    override = InMemorySkillRepository([skill_from_files({"SKILL.md": skill_md("beta", "Override.")})])
    chained = ChainedSkillRepository([override, _folder(tmp_path)])

    assert [(s.name, s.description) for s in await chained.summaries()] == [
        ("alpha", "First skill."),
        ("beta", "Override."),
    ]
    assert (await chained.get("beta")).description == "Override."
    assert (await chained.get("alpha")).body == "Alpha body.\n"


@pytest.mark.django_db
def test_agents_load_the_published_revision_and_rollback_publishes_the_previous_one(alice: Any) -> None:
    from skills_app.backends import DjangoSkillRepository
    from skills_app.services import SkillServiceError, skill_revision_create, skill_revision_publish, skill_rollback

    repository = DjangoSkillRepository(app="test")
    first = skill_revision_create(app="test", files={"SKILL.md": skill_md("s", "v1", body="one")}, status="published")
    second = skill_revision_create(
        app="test", files={"SKILL.md": skill_md("s", "v2", body="two")}, source="evolution", status="pending_review"
    )
    assert repository.get_sync("s").body == "one"  # pending review: not live

    skill_revision_publish(revision=second, user=alice)
    second.refresh_from_db()
    first.refresh_from_db()
    assert (repository.get_sync("s").body, repository.get_sync("s").revision) == ("two", 2)
    assert (first.status, second.status, second.approved_by) == ("retired", "published", alice)

    skill_rollback(skill=first.skill)
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == ("published", "retired")
    assert repository.get_sync("s").body == "one"
    with pytest.raises(SkillServiceError, match="no earlier published revision"):
        skill_rollback(skill=first.skill)


@pytest.mark.django_db
def test_importing_folders_twice_adds_one_revision_until_the_folder_changes(
    tmp_path: Path, make_skill: Callable[..., Path]
) -> None:
    from skills_app import models as orm
    from skills_app.services import skill_import_folders

    folder = make_skill("root/s", skill_md("s", "v1"))
    assert len(skill_import_folders(app="test", roots=[str(tmp_path / "root")])) == 1
    assert skill_import_folders(app="test", roots=[str(tmp_path / "root")]) == []
    (folder / "SKILL.md").write_text(skill_md("s", "version 2"))
    skill_import_folders(app="test", roots=[str(tmp_path / "root")])

    revisions = orm.SkillRevision.objects.filter(skill__name="s").order_by("revision")
    assert [(r.revision, r.status, r.source, r.description) for r in revisions] == [
        (1, "retired", "fs", "v1"),
        (2, "published", "fs", "version 2"),
    ]
