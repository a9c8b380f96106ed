from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from runs import models as orm


@admin.register(orm.Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "agent", "status", "session", "tool_calls", "model_calls", "created_at", "duration"]
    list_filter = ["status", "agent"]
    search_fields = ["id", "request_id", "session__id", "user__username"]
    readonly_fields = [f.name for f in orm.Run._meta.fields]

    @admin.display(description="duration (s)")
    def duration(self, run: orm.Run) -> str:
        return f"{run.duration_s:.2f}" if run.duration_s is not None else "-"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(orm.A2ATask)
class A2ATaskAdmin(admin.ModelAdmin):
    """A2A tasks are written by the protocol server only; reviewers read them here."""

    list_display = ["id", "user", "agent", "state", "context_id", "updated_at"]
    list_filter = ["state", "agent"]
    search_fields = ["id", "context_id", "user__username"]
    readonly_fields = [f.name for f in orm.A2ATask._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
