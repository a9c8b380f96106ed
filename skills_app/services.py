"""Writes on database-managed skills: create a revision, publish, roll back, import folders.

Each service locks the skill's row first, so two publishes of one skill serialise and the
"one published revision" rule holds (the partial unique constraint is the last guard).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from skills_app import models as orm
from skills_app.core.repository import FolderSkillRepository, read_skill_files
from skills_app.core.skill import SKILL_FILE, SkillError, parse_skill_file

logger = logging.getLogger(__name__)


class SkillServiceError(SkillError):
    """A write the skill services refuse; the message names the offending value."""


def _locked(skill_id: int) -> orm.Skill:
    return orm.Skill.objects.select_for_update().get(pk=skill_id)


def skill_revision_create(
    *,
    app: str,
    files: Mapping[str, str],
    source: str = "admin",
    status: str = "draft",
    owner: Any = None,
    note: str = "",
    gate_results: list[Any] | None = None,
) -> orm.SkillRevision:
    """A new revision (the next number) of the skill its SKILL.md names; the skill is
    created on its first revision. A `published` status publishes it at once."""
    if SKILL_FILE not in files:
        raise SkillServiceError(f"a skill revision needs a {SKILL_FILE}; got files {sorted(files)!r}")
    parsed = parse_skill_file(files[SKILL_FILE])
    with transaction.atomic():
        skill, _ = orm.Skill.objects.get_or_create(app=app, name=parsed.name, defaults={"owner": owner})
        skill = _locked(skill.pk)
        latest = skill.revisions.aggregate(latest=Max("revision"))["latest"] or 0
        revision = orm.SkillRevision.objects.create(
            skill=skill,
            revision=latest + 1,
            description=parsed.description,
            body=parsed.body,
            files=dict(files),
            source=source,
            status="draft" if status == "published" else status,
            note=note,
            gate_results=list(gate_results or []),
        )
        if status == "published":
            revision = skill_revision_publish(revision=revision)
    return revision


def skill_revision_publish(*, revision: orm.SkillRevision, user: Any = None) -> orm.SkillRevision:
    """Make this revision the one agents load; the previously published one is retired."""
    with transaction.atomic():
        _locked(revision.skill_id)
        revision = orm.SkillRevision.objects.select_for_update().get(pk=revision.pk)
        if revision.status == "published":
            return revision
        orm.SkillRevision.objects.filter(skill_id=revision.skill_id, status="published").update(status="retired")
        now = timezone.now()
        revision.status = "published"
        revision.published_at = now
        if user is not None and getattr(user, "is_authenticated", False):
            revision.approved_by = user
            revision.approved_at = now
        revision.save(update_fields=["status", "published_at", "approved_by", "approved_at"])
        orm.Skill.objects.filter(pk=revision.skill_id).update(updated_at=now)
    return revision


def skill_rollback(*, skill: orm.Skill, user: Any = None) -> orm.SkillRevision:
    """Publish again the revision that was published before the current one."""
    with transaction.atomic():
        _locked(skill.pk)
        current = skill.revisions.filter(status="published").first()
        earlier = skill.revisions.filter(status="retired", published_at__isnull=False)
        if current is not None:
            earlier = earlier.filter(revision__lt=current.revision)
        previous = earlier.order_by("-revision").first()
        if previous is None:
            raise SkillServiceError(f"skill {skill.name!r} has no earlier published revision to roll back to")
        return skill_revision_publish(revision=previous, user=user)


def skill_import_folders(*, app: str, roots: list[str]) -> list[orm.SkillRevision]:
    """Import every folder skill as a published revision (source `fs`), unless the
    skill's latest revision already holds the same files: running it twice adds nothing."""
    repository = FolderSkillRepository(roots)
    imported: list[orm.SkillRevision] = []
    for summary in repository.summaries_sync():
        files = read_skill_files(repository.path(summary.name))
        skill = orm.Skill.objects.filter(app=app, name=summary.name).first()
        latest = skill.revisions.order_by("-revision").first() if skill is not None else None
        if latest is not None and latest.files == files:
            continue
        imported.append(
            skill_revision_create(
                app=app, files=files, source="fs", status="published", note="imported from the skill folder"
            )
        )
        logger.info("imported skill %r from its folder", summary.name)
    return imported
