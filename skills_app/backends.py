"""The skill repository over the database: the published revision of each managed skill."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from django.db import connection
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


@functools.lru_cache(maxsize=4)
def _fingerprint_sql(vendor: str) -> str:
    """The statement that says whether an app's published skills changed (`_fingerprint`)."""
    del vendor  # part of the cache key: quoting and functions are the same on both backends
    skill, revision = orm.Skill._meta, orm.SkillRevision._meta

    def column(meta: Any, name: str) -> str:
        return '"' + str(meta.get_field(name).column) + '"'

    return (
        f'SELECT COUNT(*), COALESCE(SUM("r".{column(revision, "id")}), 0), MAX("r".{column(revision, "published_at")}),'
        f' MAX("s".{column(skill, "updated_at")})'
        f' FROM "{revision.db_table}" "r" INNER JOIN "{skill.db_table}" "s"'
        f' ON ("r".{column(revision, "skill")} = "s".{column(skill, "id")})'
        f' WHERE "s".{column(skill, "app")} = %s AND "s".{column(skill, "owner")} IS NULL'
        f" AND \"r\".{column(revision, 'status')} = 'published'"
    )


def _fingerprint(app: str) -> tuple[Any, ...]:
    """What the app's shared published revisions are, in one small statement: how many, the
    sum of their ids (a revision published or retired, a skill deleted or handed to an
    owner), the latest publication (every publish, a rollback too, stamps a new time) and
    the latest change of their skills (a rename). Any process's change moves one of them."""
    with connection.cursor() as cursor:
        cursor.execute(_fingerprint_sql(connection.vendor), [app])
        return tuple(cursor.fetchone() or ())


class DjangoSkillRepository:
    """`SkillRepository` over `Skill` rows of an app shared by all its users (no owner).

    The summaries (every run's request lists them) are kept with the fingerprint of the
    published revisions they were read with; each call reads only the fingerprint, and the
    summaries again when it moved (issue 23: they cost a join and a prefetch per run). A
    change made by any process (the admin, evolution, an import) shows on the next call."""

    def __init__(self, *, app: str) -> None:
        self.app = app
        self._kept: tuple[tuple[Any, ...], list[SkillSummary]] | None = None

    def summaries_sync(self) -> list[SkillSummary]:
        fingerprint = _fingerprint(self.app)
        kept = self._kept  # one read: another thread may replace it meanwhile
        if kept is not None and kept[0] == fingerprint:
            return list(kept[1])
        # Read after the fingerprint: a change that commits in between moves the next
        # fingerprint too, so what is kept is never older than its fingerprint says.
        summaries = self._read_summaries()
        self._kept = (fingerprint, summaries)
        return list(summaries)

    def _read_summaries(self) -> list[SkillSummary]:
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
