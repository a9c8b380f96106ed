"""The skill repository over the database: the published revision of each managed skill."""

from __future__ import annotations

import dataclasses

from django.db.models import Prefetch

from sessions_app.backends import db_call
from skills_app import models as orm
from skills_app.core.repository import skill_from_files
from skills_app.core.skill import Skill, SkillError, SkillNotFoundError, SkillSummary


def _published() -> Prefetch[orm.SkillRevision]:
    return Prefetch("revisions", queryset=orm.SkillRevision.objects.filter(status="published"), to_attr="live")


def skill_from_revision(revision: orm.SkillRevision, name: str) -> Skill:
    """A core `Skill` from a stored revision (its files hold the SKILL.md)."""
    files = dict(revision.files or {})
    if "SKILL.md" not in files:
        files["SKILL.md"] = f"---\nname: {name}\ndescription: {revision.description}\n---\n{revision.body}"
    skill = skill_from_files(files, source="db", revision=revision.revision, default_name=name)
    if skill.name != name:  # the row's name is authoritative (its SKILL.md may have been edited)
        skill = dataclasses.replace(skill, name=name)
    return skill


class DjangoSkillRepository:
    """`SkillRepository` over `Skill` rows of an app shared by all its users (no owner)."""

    def __init__(self, *, app: str) -> None:
        self.app = app

    def summaries_sync(self) -> list[SkillSummary]:
        rows = (
            orm.Skill.objects.filter(app=self.app, owner__isnull=True, revisions__status="published")
            .prefetch_related(_published())
            .order_by("name")
        )
        return [
            SkillSummary(name=row.name, description=row.live[0].description, source="db") for row in rows if row.live
        ]

    def get_sync(self, name: str) -> Skill:
        revision = (
            orm.SkillRevision.objects.select_related("skill")
            .filter(skill__app=self.app, skill__owner__isnull=True, skill__name=name, status="published")
            .first()
        )
        if revision is None:
            raise SkillNotFoundError(name)
        try:
            return skill_from_revision(revision, name)
        except SkillError:
            raise SkillNotFoundError(name) from None

    async def summaries(self) -> list[SkillSummary]:
        return await db_call(self.summaries_sync)()

    async def get(self, name: str) -> Skill:
        return await db_call(self.get_sync)(name)

    async def refresh(self) -> None:
        return None  # every call reads the database
