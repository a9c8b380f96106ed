"""Database-managed skills (DESIGN 4): a `Skill` and its numbered `SkillRevision`s.

At most one revision of a skill is `published` (a partial unique constraint guards it);
agents load that one. Publishing another revision retires the current one; rolling back
publishes an earlier revision again. Revisions are never edited after they are reviewed:
a change is a new revision.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

SOURCE_CHOICES = [
    ("fs", "imported from a folder"),
    ("evolution", "learned by evolution"),
    ("admin", "written in the admin"),
]
STATUS_CHOICES = [
    ("draft", "draft"),
    ("pending_review", "pending review"),
    ("published", "published"),
    ("rejected", "rejected"),
    ("retired", "retired"),
]


class Skill(models.Model):
    app = models.CharField(max_length=64, db_index=True, verbose_name=_("app"))
    name = models.CharField(max_length=64, verbose_name=_("name"))
    # None: every user of the app may use it; else only this user (and staff in the admin).
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="skills",
        verbose_name=_("owner"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("skill")
        verbose_name_plural = _("skills")
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["app", "name"], name="skill_unique_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def published(self) -> SkillRevision | None:
        return self.revisions.filter(status="published").first()


class SkillRevision(models.Model):
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="revisions", verbose_name=_("skill"))
    revision = models.PositiveIntegerField(verbose_name=_("revision"))
    description = models.CharField(max_length=1024, blank=True, default="", verbose_name=_("description"))
    body = models.TextField(blank=True, default="", verbose_name=_("body"))
    # Every file of the skill, SKILL.md included: {"relative/path": "text"}.
    files = models.JSONField(default=dict, blank=True, verbose_name=_("files"))
    source = models.CharField(max_length=16, choices=SOURCE_CHOICES, default="admin", verbose_name=_("source"))
    status = models.CharField(
        max_length=16, choices=STATUS_CHOICES, default="draft", db_index=True, verbose_name=_("status")
    )
    gate_results = models.JSONField(default=list, blank=True, verbose_name=_("gate results"))
    note = models.TextField(blank=True, default="", verbose_name=_("note"))
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approved_skill_revisions",
        verbose_name=_("approved by"),
    )
    approved_at = models.DateTimeField(null=True, blank=True, verbose_name=_("approved at"))
    published_at = models.DateTimeField(null=True, blank=True, verbose_name=_("published at"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("skill revision")
        verbose_name_plural = _("skill revisions")
        ordering = ["skill", "-revision"]
        constraints = [
            models.UniqueConstraint(fields=["skill", "revision"], name="skill_revision_unique"),
            models.UniqueConstraint(fields=["skill"], condition=Q(status="published"), name="skill_one_published"),
        ]

    def __str__(self) -> str:
        return f"{self.skill.name} r{self.revision} ({self.status})"
