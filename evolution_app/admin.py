"""Admin: the human gate (DESIGN 8.4).

A reviewer opens a candidate and reads its status, why it was proposed, the evidence
(each item linked to its ledger event in the admin), a diff against the skill's current
files, and every gate's result; then approves or rejects it with a reason (the actions
ask for the reason on an intermediate page). Approval publishes a `SkillRevision`
(source `evolution`); rollback is the skills admin's "roll back" action. Nothing here
edits a candidate: its decision and audit trail are written by `evolution_app.services`.
"""

from __future__ import annotations

import difflib
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from evolution_app import models as orm
from evolution_app.services import CandidateError, candidate_approve, candidate_reject
from sessions_app import models as sessions


class GateResultInline(admin.TabularInline):
    model = orm.GateResult
    extra = 0
    can_delete = False
    fields = ["position", "gate", "status", "detail", "findings", "actor", "created_at"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class CandidateAuditInline(admin.TabularInline):
    model = orm.CandidateAudit
    extra = 0
    can_delete = False
    verbose_name_plural = "audit trail"
    fields = ["at", "action", "actor", "comment"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class DecisionForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), required=False)


def file_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """An HTML side-by-side diff of two sets of files (one table per changed file)."""
    parts: list[str] = []
    differ = difflib.HtmlDiff(wrapcolumn=90)
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path, ""), after.get(path, "")
        if old == new:
            continue
        table = differ.make_table(
            old.splitlines(), new.splitlines(), fromdesc=f"{path} (current)" if path in before else "(absent)",
            todesc=f"{path} (candidate)" if path in after else "(removed)", context=False,
        )
        parts.append(table)
    return "".join(parts)


@admin.register(orm.SkillCandidate)
class SkillCandidateAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "action", "status", "has_conflict", "session_key", "created_at", "decided_by"]
    list_filter = ["status", "action", "app"]
    search_fields = ["name", "session_key"]
    fields = [
        "name", "action", "status", "conflict", "reason", "session_link", "evidence_view", "diff_view", "files_view",
        "decided_by", "decided_at", "decision_reason", "revision", "created_at",
    ]
    readonly_fields = fields
    inlines = [GateResultInline, CandidateAuditInline]
    actions = ["approve", "reject"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # candidates come from the review job

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the audit trail stays

    @admin.display(description="conflict", boolean=True)
    def has_conflict(self, candidate: orm.SkillCandidate) -> bool:
        return bool(candidate.conflict)

    @admin.display(description="session")
    def session_link(self, candidate: orm.SkillCandidate) -> str:
        if candidate.session_id is None:
            return f"{candidate.session_key} (deleted)"
        url = reverse("admin:sessions_app_session_change", args=[candidate.session_id])
        return format_html('<a href="{}">{}</a>', url, candidate.session_id)

    @admin.display(description="evidence")
    def evidence_view(self, candidate: orm.SkillCandidate) -> str:
        items = list(candidate.evidence or [])
        if not items:
            return "-"
        # Evidence may come from several sessions (the same procedure learned again).
        session_of = {i["event_id"]: i.get("session_id") or candidate.session_key for i in items}
        rows = {
            (e.session_id, e.event_id): e.pk
            for e in sessions.Event.objects.filter(session_id__in=set(session_of.values()), event_id__in=list(session_of))
        }
        cells = []
        for item in items:
            pk = rows.get((session_of[item["event_id"]], item["event_id"]))
            link = (format_html('<a href="{}">#{}</a>', reverse("admin:sessions_app_event_change", args=[pk]), item["seq"])
                    if pk is not None else f"#{item['seq']} (gone)")
            cells.append((link, item.get("kind", ""), item.get("excerpt", "")))
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{} <em>{}</em> <code>{}</code></li>", cells))

    @admin.display(description="diff against the current revision")
    def diff_view(self, candidate: orm.SkillCandidate) -> str:
        diff = file_diff(dict(candidate.base_files or {}), dict(candidate.files or {}))
        if not diff:
            return "no change"
        # difflib escapes the file text itself; the table markup is its own.
        return mark_safe(f'<div class="evolution-diff">{diff}</div>')

    @admin.display(description="files")
    def files_view(self, candidate: orm.SkillCandidate) -> str:
        return format_html_join(
            "", "<details><summary><code>{}</code></summary><pre>{}</pre></details>",
            sorted((candidate.files or {}).items()),
        )

    def _decide(self, request: HttpRequest, queryset: QuerySet[orm.SkillCandidate], verb: str) -> HttpResponse | None:
        form = DecisionForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            reason = form.cleaned_data["reason"]
            for candidate in queryset:
                try:
                    if verb == "approve":
                        revision = candidate_approve(candidate=candidate, user=request.user, reason=reason)
                        self.message_user(request, f"{candidate.name}: published as revision {revision.revision}")
                    else:
                        candidate_reject(candidate=candidate, user=request.user, reason=reason)
                        self.message_user(request, f"{candidate.name}: rejected")
                except CandidateError as exc:
                    self.message_user(request, f"{candidate.name}: {exc}", level=messages.ERROR)
            return None
        return TemplateResponse(request, "admin/evolution_app/decide.html", {
            **self.admin_site.each_context(request),
            "title": f"{verb.capitalize()} skill candidates",
            "verb": verb,
            "candidates": queryset,
            "form": form,
            "action": verb,
            "opts": self.model._meta,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        })

    @admin.action(description="Approve and publish the selected candidates (with a reason)")
    def approve(self, request: HttpRequest, queryset: QuerySet[orm.SkillCandidate]) -> HttpResponse | None:
        return self._decide(request, queryset, "approve")

    @admin.action(description="Reject the selected candidates (with a reason)")
    def reject(self, request: HttpRequest, queryset: QuerySet[orm.SkillCandidate]) -> HttpResponse | None:
        return self._decide(request, queryset, "reject")


@admin.register(orm.Review)
class ReviewAdmin(admin.ModelAdmin):
    list_display = ["id", "session", "from_seq", "to_seq", "status", "reason", "created_at"]
    list_filter = ["status"]
    search_fields = ["session__id", "reason"]
    readonly_fields = ["session", "from_seq", "to_seq", "status", "reason", "notes", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
