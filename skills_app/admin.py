"""Admin: skills and their revisions (body, files, source, status); publish and roll back.

Publishing here is the human gate (DESIGN 8.4): the admin who publishes is recorded as
the approver. Rolling back publishes the revision that was live before the current one.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from skills_app import models as orm
from skills_app.core.skill import SkillError
from skills_app.services import skill_revision_publish, skill_rollback


class SkillRevisionInline(admin.TabularInline):
    model = orm.SkillRevision
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ["revision", "status", "source", "description", "approved_by", "approved_at", "published_at"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(orm.Skill)
class SkillAdmin(admin.ModelAdmin):
    list_display = ["name", "app", "owner", "live_revision", "updated_at"]
    search_fields = ["name"]
    list_filter = ["app"]
    inlines = [SkillRevisionInline]
    actions = ["rollback"]

    @admin.display(description=_("published revision"))
    def live_revision(self, skill: orm.Skill) -> str:
        published = skill.published
        return f"r{published.revision}" if published is not None else "-"

    @admin.action(description=_("Roll back to the previously published revision"))
    def rollback(self, request: HttpRequest, queryset: QuerySet[orm.Skill]) -> None:
        for skill in queryset:
            try:
                revision = skill_rollback(skill=skill, user=request.user)
            except SkillError as exc:
                self.message_user(request, str(exc), level=messages.ERROR)
            else:
                self.message_user(request, f"{skill.name}: revision {revision.revision} is published again")


@admin.register(orm.SkillRevision)
class SkillRevisionAdmin(admin.ModelAdmin):
    list_display = ["skill", "revision", "status", "source", "approved_by", "published_at", "created_at"]
    list_filter = ["status", "source"]
    search_fields = ["skill__name", "description"]
    fields = [
        "skill",
        "revision",
        "status",
        "source",
        "description",
        "body",
        "files_view",
        "gate_results_view",
        "note",
        "approved_by",
        "approved_at",
        "published_at",
        "created_at",
    ]
    readonly_fields = [
        "skill",
        "revision",
        "status",
        "source",
        "description",
        "body",
        "files_view",
        "gate_results_view",
        "approved_by",
        "approved_at",
        "published_at",
        "created_at",
    ]
    actions = ["publish"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # revisions come from folders, evolution or the services

    @admin.display(description=_("files"))
    def files_view(self, revision: orm.SkillRevision) -> str:
        files = sorted((revision.files or {}).items())
        if not files:
            return "-"
        return format_html_join(
            "",
            "<details><summary><code>{}</code> ({} chars)</summary><pre>{}</pre></details>",
            ((path, len(text), text) for path, text in files),
        )

    @admin.display(description=_("gate results"))
    def gate_results_view(self, revision: orm.SkillRevision) -> str:
        return format_html("<pre>{}</pre>", json.dumps(revision.gate_results, indent=2, ensure_ascii=False))

    @admin.action(description=_("Publish the selected revision (approve it)"))
    def publish(self, request: HttpRequest, queryset: QuerySet[orm.SkillRevision]) -> None:
        chosen = list(queryset.select_related("skill"))
        if len({r.skill_id for r in chosen}) != len(chosen):
            self.message_user(request, "choose at most one revision per skill", level=messages.ERROR)
            return
        for revision in chosen:
            if revision.status == "rejected":
                self.message_user(request, f"{revision}: a rejected revision cannot be published", level=messages.ERROR)
                continue
            published = skill_revision_publish(revision=revision, user=request.user)
            self.message_user(request, f"{published.skill.name}: revision {published.revision} published")
