"""Admin: the human gate (DESIGN 8.4).

A reviewer opens a candidate and reads its status, why it was proposed, the evidence
(each item linked to its ledger event in the admin), a diff against the skill's current
files (a new skill's files as documents), and every gate's result; then approves or rejects
it with a reason, from the candidate's page itself or from the list's actions (which ask
for the reason on an intermediate page). Approval publishes a `SkillRevision`
(source `evolution`); rollback is the skills admin's "roll back" action. Nothing here
edits a candidate: its decision and audit trail are written by `evolution_app.services`.
"""

from __future__ import annotations

import difflib
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from evolution_app import models as orm
from evolution_app.services import CandidateError, candidate_approve, candidate_reject
from sessions_app import models as sessions


class GateResultInline(admin.TabularInline):
    """Each gate's verdict; a failed gate's findings are listed one per line (why it failed:
    for the Effectiveness gate, what the replay with the candidate did worse than without)."""

    model = orm.GateResult
    extra = 0
    can_delete = False
    fields = ["position", "gate", "status", "detail", "findings_list", "actor", "created_at"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description=gettext_lazy("findings"))
    def findings_list(self, result: orm.GateResult) -> str:
        findings = [str(f) for f in result.findings or []]
        if not findings:
            return "-"
        return format_html(
            '<ul class="gate-findings">{}</ul>', format_html_join("", "<li>{}</li>", ((f,) for f in findings))
        )


class CandidateAuditInline(admin.TabularInline):
    model = orm.CandidateAudit
    extra = 0
    can_delete = False
    verbose_name_plural = gettext_lazy("audit trail")
    fields = ["at", "action", "actor", "comment"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class DecisionForm(forms.Form):
    # Both decisions need a reason (the services refuse one without): it is the audit's why.
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        error_messages={"required": gettext_lazy("Give a reason: it is kept with the decision in the audit trail.")},
    )


def file_diff(before: dict[str, str], after: dict[str, str]) -> str:
    """An HTML side-by-side diff of two sets of files (one table per changed file); long
    lines scroll rather than wrap mid-word."""
    parts: list[str] = []
    differ = difflib.HtmlDiff()
    for filename in sorted(set(before) | set(after)):
        old, new = before.get(filename, ""), after.get(filename, "")
        if old == new:
            continue
        table = differ.make_table(
            old.splitlines(),
            new.splitlines(),
            fromdesc=_("%(file)s (current)") % {"file": filename} if filename in before else _("(absent)"),
            todesc=_("%(file)s (candidate)") % {"file": filename} if filename in after else _("(removed)"),
            context=False,
        )
        parts.append(table)
    return "".join(parts)


def file_documents(files: dict[str, str]) -> str:
    """A new skill's files as documents to read: SKILL.md first, each whole, wrapped at
    spaces (a diff against nothing would show every line as added, in half the width)."""
    ordered = sorted(files.items(), key=lambda item: (item[0] != "SKILL.md", item[0]))
    return format_html(
        '<div class="evolution-documents">{}</div>',
        format_html_join(
            "",
            "<h4><code>{}</code></h4><pre>{}</pre>",
            ordered,
        ),
    )


def evidence_by_session(items: list[dict[str, Any]], *, default_session: str) -> dict[str, list[dict[str, Any]]]:
    """Evidence items grouped by session in first-cited order, each event once (a step that
    made several tool calls is cited once per call), its kinds merged."""
    grouped: dict[str, dict[str, dict[str, Any]]] = {}
    for item in items:
        session_id = item.get("session_id") or default_session
        events = grouped.setdefault(session_id, {})
        seen = events.get(item["event_id"])
        if seen is None:
            events[item["event_id"]] = {**item, "kinds": [item.get("kind", "")]}
        elif item.get("kind", "") not in seen["kinds"]:
            seen["kinds"].append(item.get("kind", ""))
    return {
        session_id: sorted(events.values(), key=lambda e: e.get("seq", 0)) for session_id, events in grouped.items()
    }


@admin.register(orm.SkillCandidate)
class SkillCandidateAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "action", "status", "has_conflict", "session_key", "created_at", "decided_by"]
    list_filter = ["status", "action", "app"]
    search_fields = ["name", "session_key"]
    fields = [
        "name",
        "action",
        "status",
        "conflict",
        "reason",
        "session_link",
        "learned",
        "evidence_view",
        "diff_view",
        "files_view",
        "decided_by",
        "decided_at",
        "decision_reason",
        "revision",
        "created_at",
    ]
    readonly_fields = fields
    inlines = [GateResultInline, CandidateAuditInline]
    actions = ["approve", "reject"]
    change_form_template = "admin/evolution_app/skillcandidate/change_form.html"

    def get_urls(self) -> list[URLPattern]:
        decide = path(
            "<int:candidate_id>/decide/",
            self.admin_site.admin_view(self.decide_view),
            name="evolution_app_skillcandidate_decide",
        )
        return [decide, *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        candidate = self.get_object(request, object_id)
        # Every field is read-only: the page's only writes are the decision buttons.
        context = {"show_save": False, "show_save_and_continue": False, **(extra_context or {})}
        if (
            candidate is not None
            and candidate.status == "pending_review"
            and self.has_change_permission(request, candidate)
        ):
            context["decision_form"] = DecisionForm()
            context["decide_url"] = reverse("admin:evolution_app_skillcandidate_decide", args=[candidate.pk])
        return super().change_view(request, object_id, form_url, extra_context=context)

    def decide_view(self, request: HttpRequest, candidate_id: int) -> HttpResponse:
        """The Approve and Reject buttons of a candidate's page: one decision, with its reason."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        candidate = get_object_or_404(orm.SkillCandidate, pk=candidate_id)
        page = reverse("admin:evolution_app_skillcandidate_change", args=[candidate.pk])
        if not self.has_change_permission(request, candidate):
            return HttpResponseRedirect(page)
        verb = "approve" if "_approve" in request.POST else "reject" if "_reject" in request.POST else None
        form = DecisionForm(request.POST)
        if verb is None or not form.is_valid():
            problem = _("Choose Approve or Reject.") if verb is None else form.errors["reason"][0]
            self.message_user(request, _("Nothing decided: %(problem)s") % {"problem": problem}, level=messages.ERROR)
            return HttpResponseRedirect(page)
        self._apply(request, [candidate], verb, form.cleaned_data["reason"])
        return HttpResponseRedirect(page)

    def _apply(self, request: HttpRequest, candidates: Any, verb: str, reason: str) -> None:
        for candidate in candidates:
            try:
                if verb == "approve":
                    revision = candidate_approve(candidate=candidate, user=request.user, reason=reason)
                    self.message_user(
                        request,
                        _("%(name)s: published as revision %(revision)s")
                        % {"name": candidate.name, "revision": revision.revision},
                    )
                else:
                    candidate_reject(candidate=candidate, user=request.user, reason=reason)
                    self.message_user(request, _("%(name)s: rejected") % {"name": candidate.name})
            except CandidateError as exc:
                self.message_user(request, f"{candidate.name}: {exc}", level=messages.ERROR)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # candidates come from the review job

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the audit trail stays

    @admin.display(description=gettext_lazy("conflict"), boolean=True)
    def has_conflict(self, candidate: orm.SkillCandidate) -> bool:
        return bool(candidate.conflict)

    @admin.display(description=gettext_lazy("session"))
    def session_link(self, candidate: orm.SkillCandidate) -> str:
        if candidate.session_id is None:
            return _("%(session)s (deleted)") % {"session": candidate.session_key}
        url = reverse("admin:sessions_app_session_change", args=[candidate.session_id])
        return format_html('<a href="{}">{}</a>', url, candidate.session_id)

    @admin.display(description=gettext_lazy("evidence"))
    def evidence_view(self, candidate: orm.SkillCandidate) -> str:
        items = list(candidate.evidence or [])
        if not items:
            return "-"
        # Evidence may come from several sessions (the same procedure learned again).
        grouped = evidence_by_session(items, default_session=candidate.session_key)
        found = sessions.Session.objects.filter(pk__in=list(grouped)).select_related("user")
        named = {s.pk: s for s in found}
        rows = {
            (e.session_id, e.event_id): e.pk
            for e in sessions.Event.objects.filter(
                session_id__in=list(grouped),
                event_id__in=[e["event_id"] for events in grouped.values() for e in events],
            )
        }
        blocks = []
        for session_id, events in grouped.items():
            session = named.get(session_id)
            if session is None:
                heading = format_html(_("Session <code>{}</code> (deleted)"), session_id)
            else:
                heading = format_html(
                    # Translators: the session's admin URL, title, id, owner and the number of events cited.
                    _('Session <a href="{}">{}</a> <code>{}</code>, {}, {} event(s) cited'),
                    reverse("admin:sessions_app_session_change", args=[session.pk]),
                    session.title or _("(untitled)"),
                    session.pk,
                    session.user.get_username(),
                    len(events),
                )
            cells = []
            for item in events:
                pk = rows.get((session_id, item["event_id"]))
                link = (
                    format_html(
                        '<a href="{}">#{}</a>', reverse("admin:sessions_app_event_change", args=[pk]), item["seq"]
                    )
                    if pk is not None
                    else _("#%(seq)s (gone)") % {"seq": item["seq"]}
                )
                cells.append((link, ", ".join(k for k in item["kinds"] if k), item.get("excerpt", "")))
            blocks.append(
                format_html(
                    "<h4>{}</h4><ul>{}</ul>",
                    heading,
                    format_html_join("", "<li>{} <em>{}</em> <code>{}</code></li>", cells),
                )
            )
        return format_html(
            '<div class="evolution-evidence">{}</div>', format_html_join("", "{}", ((b,) for b in blocks))
        )

    @admin.display(description=gettext_lazy("proposed text"))
    def diff_view(self, candidate: orm.SkillCandidate) -> str:
        if not candidate.base_files:
            return file_documents(dict(candidate.files or {}))  # a new skill: nothing to diff against
        diff = file_diff(dict(candidate.base_files or {}), dict(candidate.files or {}))
        if not diff:
            return _("no change")
        # difflib escapes the file text itself; the table markup is its own.
        return mark_safe(f'<div class="evolution-diff">{diff}</div>')

    @admin.display(description=gettext_lazy("files"))
    def files_view(self, candidate: orm.SkillCandidate) -> str:
        return format_html_join(
            "",
            "<details><summary><code>{}</code></summary><pre>{}</pre></details>",
            sorted((candidate.files or {}).items()),
        )

    def _decide(self, request: HttpRequest, queryset: QuerySet[orm.SkillCandidate], verb: str) -> HttpResponse | None:
        form = DecisionForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            self._apply(request, queryset, verb, form.cleaned_data["reason"])
            return None
        return TemplateResponse(
            request,
            "admin/evolution_app/decide.html",
            {
                **self.admin_site.each_context(request),
                "title": _("Approve skill candidates") if verb == "approve" else _("Reject skill candidates"),
                "verb": verb,
                "candidates": queryset,
                "form": form,
                "action": verb,
                "opts": self.model._meta,
                "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
            },
        )

    @admin.action(description=gettext_lazy("Approve and publish the selected candidates (with a reason)"))
    def approve(self, request: HttpRequest, queryset: QuerySet[orm.SkillCandidate]) -> HttpResponse | None:
        return self._decide(request, queryset, "approve")

    @admin.action(description=gettext_lazy("Reject the selected candidates (with a reason)"))
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
