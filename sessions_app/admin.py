"""Admin: sessions with their read-only ledger. Nothing here can edit or delete an event."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from sessions_app import models as orm


class ReadOnlyMixin:
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _tool_calls(event: orm.Event) -> str:
    calls = (event.payload.get("message") or {}).get("tool_calls") or []
    return format_html_join(
        "", "<div><code>{}</code>({})</div>", ((c.get("name", "?"), c.get("arguments", "")) for c in calls)
    )


def _attachments(event: orm.Event) -> str:
    """A message's images and files (issue 20): name, type and size, each linked to its
    artifact's admin page (the download API answers the session's owner only)."""
    parts = [p for p in (event.payload.get("message") or {}).get("parts") or () if p.get("type") != "text"]
    rows = []
    for part in parts:
        artifact = part.get("artifact") or {}
        if artifact:
            href = (
                reverse("admin:sessions_app_artifact_changelist") + "?" + urlencode({"q": artifact.get("filename", "")})
            )
        else:
            href = part.get("url") or ""
        rows.append((href, part.get("name") or "attachment", part.get("mime") or "image by URL", part.get("size") or 0))
    return format_html_join("", '<div class="attachment">attached: <a href="{}">{}</a> ({}, {} bytes)</div>', rows)


class EventInline(ReadOnlyMixin, admin.TabularInline):
    model = orm.Event
    extra = 0
    can_delete = False
    show_change_link = False
    ordering = ["seq"]
    fields = ["seq", "author", "role", "object", "text_view", "tool_calls_view", "state_delta_view", "created_at"]
    readonly_fields = fields
    classes = ["ledger"]

    @admin.display(description=_("text"))
    def text_view(self, event: orm.Event) -> str:
        error = event.payload.get("error")
        text = event.text if len(event.text) <= 2000 else event.text[:2000] + " …"
        if error:
            return format_html("<strong>{}</strong>: {}<br>{}", error.get("type"), error.get("message"), text)
        files = _attachments(event)
        return format_html("{}{}", text, files) if files else text

    @admin.display(description=_("tool calls"))
    def tool_calls_view(self, event: orm.Event) -> str:
        tool_call_id = (event.payload.get("message") or {}).get("tool_call_id")
        if tool_call_id:
            return format_html("result of <code>{}</code>", tool_call_id)
        return _tool_calls(event)

    @admin.display(description=_("state delta"))
    def state_delta_view(self, event: orm.Event) -> str:
        delta = event.payload.get("state_delta") or {}
        return format_html("<code>{}</code>", json.dumps(delta)) if delta else ""


class SummaryInline(ReadOnlyMixin, admin.StackedInline):
    model = orm.Summary
    extra = 0
    can_delete = False
    fields = ["filter_key", "text", "last_seq", "cutoff_at", "updated_at"]
    readonly_fields = fields


@admin.register(orm.Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "user", "agent", "last_seq", "updated_at"]
    list_filter = ["agent", "app"]
    search_fields = ["id", "title", "user__username"]
    readonly_fields = ["id", "app", "user", "agent", "title", "state", "last_seq", "created_at", "updated_at"]
    inlines = [SummaryInline, EventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing is allowed through the view permission; the ledger is never edited.
        return False


@admin.register(orm.Event)
class EventAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["session", "seq", "author", "role", "object", "short_text", "created_at"]
    list_filter = ["role", "object"]
    search_fields = ["session__id", "text", "event_id"]
    readonly_fields = [f.name for f in orm.Event._meta.fields]
    actions = None

    @admin.display(description=_("text"))
    def short_text(self, event: orm.Event) -> str:
        return event.text[:120]


@admin.register(orm.AppState)
class AppStateAdmin(admin.ModelAdmin):
    """The app's `app:` state (SPEC 2.1): shared by every user, so set here by an operator
    (or by agents through state deltas), never through a user's API."""

    list_display = ["app", "updated_at"]
    fields = ["app", "state", "updated_at"]
    readonly_fields = ["updated_at"]

    def save_model(self, request: HttpRequest, obj: orm.AppState, form: Any, change: bool) -> None:
        from sessions_app.core.events import utcnow

        obj.updated_at = utcnow()
        super().save_model(request, obj, form, change)


@admin.register(orm.UserState)
class UserStateAdmin(admin.ModelAdmin):
    """A user's `user:` state (SPEC 2.1), shared by the user's sessions."""

    list_display = ["user", "app", "updated_at"]
    list_filter = ["app"]
    search_fields = ["user__username"]
    list_select_related = ["user"]
    fields = ["app", "user", "state", "updated_at"]
    readonly_fields = ["app", "user", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # a user's state starts with that user's sessions

    def save_model(self, request: HttpRequest, obj: orm.UserState, form: Any, change: bool) -> None:
        from sessions_app.core.events import utcnow

        obj.updated_at = utcnow()
        super().save_model(request, obj, form, change)


# -- long-term memory and artifacts ------------------------------------------------------------------


@admin.register(orm.Memory)
class MemoryAdmin(admin.ModelAdmin):
    """Memories by user and kind; editing keeps the search tokens in step with the text."""

    list_display = ["short_text", "user", "kind", "event_time", "topic_list", "updated_at"]
    list_filter = ["kind", "app"]
    search_fields = ["text", "user__username", "location"]
    list_select_related = ["user"]
    ordering = ["user__username", "-updated_at"]
    fields = [
        "id",
        "app",
        "user",
        "kind",
        "text",
        "topics",
        "event_time",
        "participants",
        "location",
        "created_at",
        "updated_at",
    ]
    readonly_fields = ["id", "app", "user", "created_at", "updated_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # memories come from agents, extraction and the API, always for their owner

    @admin.display(description=_("memory"))
    def short_text(self, memory: orm.Memory) -> str:
        return memory.text if len(memory.text) <= 120 else memory.text[:120] + " …"

    @admin.display(description=_("topics"))
    def topic_list(self, memory: orm.Memory) -> str:
        return ", ".join(memory.topics or [])

    def save_model(self, request: HttpRequest, obj: orm.Memory, form: Any, change: bool) -> None:
        from sessions_app.core.events import utcnow
        from sessions_app.core.memory import analyze

        tokens = analyze(obj.text)
        obj.search_tokens = " ".join(tokens)
        obj.token_count = len(tokens)
        obj.embedding = None  # recomputed by the next write through the service, if an embedder is set
        obj.updated_at = utcnow()
        super().save_model(request, obj, form, change)


@admin.register(orm.Artifact)
class ArtifactAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ["filename", "version", "user", "scope", "mime", "size", "created_at"]
    list_filter = ["mime", "app"]
    search_fields = ["filename", "user__username", "scope", "sha256"]
    list_select_related = ["user"]
    readonly_fields = [f.name for f in orm.Artifact._meta.fields]
