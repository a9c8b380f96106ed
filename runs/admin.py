from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from agentsite.runtime import run_manager
from runs import models as orm
from runs import remote_agents


@admin.register(orm.Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "user", "agent", "status", "session", "tool_calls", "model_calls", "created_at", "duration"]
    list_filter = ["status", "agent"]
    search_fields = ["id", "request_id", "session__id", "user__username"]
    readonly_fields = [f.name for f in orm.Run._meta.fields]

    @admin.display(description=_("duration (s)"))
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


class RemoteAgentForm(forms.ModelForm):
    """The card is fetched and checked on save (a failure is the URL's error); the credential
    is write-only: never rendered back, blank keeps the stored one."""

    token = forms.CharField(
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False),
        label=_("credential"),
        help_text=_(
            "write-only: sent as 'Authorization: Bearer <credential>' (or in the header "
            "below); leave blank to keep the stored one"
        ),
    )
    clear_token = forms.BooleanField(required=False, label=_("remove the stored credential"))
    url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text=_("the remote agent's A2A URL; its card is read from <url>/.well-known/agent-card.json"),
    )
    tool_of = forms.CharField(
        required=False,
        help_text=_("comma-separated registered agents that get the tool ask_<name>"),
    )

    class Meta:
        model = orm.RemoteAgent
        fields = ["name", "url", "description", "header_name", "as_agent", "tool_of", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["tool_of"] = ", ".join(self.instance.tool_of or [])

    @staticmethod
    def _registered() -> dict[str, Any]:
        return remote_agents.registered_agents(run_manager().runner)

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if not remote_agents.NAME_RE.fullmatch(name):
            raise forms.ValidationError(f"{name!r}: use 1-64 letters, digits, '_' or '-'")
        if name in self._registered():
            raise forms.ValidationError(f"{name!r} is a registered agent's name")
        return name

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        if urlsplit(url).scheme not in ("http", "https"):
            raise forms.ValidationError(f"{url!r}: an http or https URL")
        return url

    def clean_tool_of(self) -> list[str]:
        names = [n.strip() for n in self.cleaned_data.get("tool_of", "").split(",") if n.strip()]
        registered = self._registered()
        unknown = [n for n in names if not isinstance(getattr(registered.get(n), "tools", None), dict)]
        if unknown:
            raise forms.ValidationError(
                f"not a registered agent that takes tools: {', '.join(unknown)} "
                f"(these do: {', '.join(n for n, a in registered.items() if isinstance(getattr(a, 'tools', None), dict))})"
            )
        return names

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        token = cleaned.get("token") or ("" if cleaned.get("clear_token") else self.instance.token)
        try:
            self.card = remote_agents.fetch_card(
                cleaned["url"],
                token=token,
                header_name=cleaned.get("header_name", ""),
            )
        except remote_agents.CardError as error:
            self.add_error("url", str(error))
        self.token_value = token
        return cleaned

    def save(self, commit: bool = True) -> Any:
        row = super().save(commit=False)
        row.token = self.token_value
        row.tool_of = self.cleaned_data["tool_of"]
        row.card = self.card
        row.card_fetched_at = timezone.now()
        if not row.description:
            row.description = str(self.card.get("description", ""))
        if commit:
            row.save()
        return row


@admin.register(orm.RemoteAgent)
class RemoteAgentAdmin(admin.ModelAdmin):
    """Remote A2A agents, added without code (docs/agents.md). The credential never shows."""

    form = RemoteAgentForm
    list_display = ["name", "url", "as_agent", "tool_list", "enabled", "card_name", "credential", "card_fetched_at"]
    list_filter = ["enabled", "as_agent"]
    search_fields = ["name", "url"]
    readonly_fields = ["credential", "card_summary", "card_fetched_at"]
    fieldsets = [
        (None, {"fields": ["name", "url", "description", "as_agent", "tool_of", "enabled"]}),
        (_("credential"), {"fields": ["credential", "token", "clear_token", "header_name"]}),
        (_("card"), {"fields": ["card_summary", "card_fetched_at"]}),
    ]

    @admin.display(description=_("tool of"))
    def tool_list(self, row: orm.RemoteAgent) -> str:
        return ", ".join(row.tool_of or []) or "-"

    @admin.display(description=_("card"))
    def card_name(self, row: orm.RemoteAgent) -> str:
        return str((row.card or {}).get("name", "-"))

    @admin.display(description=_("credential"))
    def credential(self, row: orm.RemoteAgent) -> str:
        return "stored (write-only)" if row.token else "none"

    @admin.display(description=_("card as fetched"))
    def card_summary(self, row: orm.RemoteAgent) -> str:
        card = row.card or {}
        if not card:
            return "-"
        skills = ", ".join(str(s.get("name", "")) for s in card.get("skills", [])) or "none"
        urls = ", ".join(str(i.get("url", "")) for i in card.get("supportedInterfaces", []))
        streaming = bool(card.get("capabilities", {}).get("streaming"))
        return format_html(
            "<b>{}</b>: {}<br>skills: {}<br>interfaces: {}<br>streaming: {}",
            card.get("name", ""),
            card.get("description", ""),
            skills,
            urls,
            "yes" if streaming else "no",
        )
