"""The ledger's tables. Events are append-only: only deleting a whole session removes them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _


class Session(models.Model):
    id = models.CharField(primary_key=True, max_length=64, verbose_name=_("ID"))
    app = models.CharField(max_length=64, db_index=True, verbose_name=_("app"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions", verbose_name=_("user")
    )
    agent = models.CharField(max_length=128, blank=True, default="", verbose_name=_("agent"))
    title = models.CharField(max_length=200, blank=True, default="", verbose_name=_("title"))
    state = models.JSONField(default=dict, blank=True, verbose_name=_("state"))
    last_seq = models.PositiveBigIntegerField(default=0, verbose_name=_("last seq"))
    created_at = models.DateTimeField(verbose_name=_("created at"))
    updated_at = models.DateTimeField(verbose_name=_("updated at"))
    # Issue 25, item 5: the hash of the chat a stateless /v1 client holds after this
    # session's last /v1 run (runs.core.context.fingerprint), and `last_seq` when it was
    # taken: it matches only while the ledger has not grown since.
    history_fingerprint = models.CharField(max_length=64, blank=True, default="", verbose_name=_("history fingerprint"))
    fingerprint_seq = models.PositiveBigIntegerField(default=0, verbose_name=_("fingerprint seq"))

    class Meta:
        verbose_name = _("session")
        verbose_name_plural = _("sessions")
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["app", "user", "-updated_at"], name="session_user_recent"),
            models.Index(fields=["app", "user", "history_fingerprint"], name="session_user_fingerprint"),
        ]

    def __str__(self) -> str:
        return self.title or self.id


class AppState(models.Model):
    """State shared by every user of an app (SPEC 2.1 `app:` keys, stored without the prefix)."""

    app = models.CharField(primary_key=True, max_length=64, verbose_name=_("app"))
    state = models.JSONField(default=dict, blank=True, verbose_name=_("state"))
    updated_at = models.DateTimeField(verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("app state")
        verbose_name_plural = _("app states")

    def __str__(self) -> str:
        return f"app state {self.app}"


class UserState(models.Model):
    """State shared by the sessions of one user in an app (SPEC 2.1 `user:` keys, stored
    without the prefix)."""

    app = models.CharField(max_length=64, verbose_name=_("app"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_states", verbose_name=_("user")
    )
    state = models.JSONField(default=dict, blank=True, verbose_name=_("state"))
    updated_at = models.DateTimeField(verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("user state")
        verbose_name_plural = _("user states")
        constraints = [models.UniqueConstraint(fields=["app", "user"], name="user_state_unique")]

    def __str__(self) -> str:
        return f"user state {self.app}/{self.user_id}"


class EventQuerySet(models.QuerySet["Event"]):
    def update(self, **kwargs: Any) -> int:
        raise PermissionError("the event ledger is append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionError("the event ledger is append-only; delete the session instead")


class Event(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events", verbose_name=_("session"))
    seq = models.PositiveBigIntegerField(verbose_name=_("seq"))
    event_id = models.CharField(max_length=64, verbose_name=_("event ID"))
    invocation_id = models.CharField(max_length=64, blank=True, default="", verbose_name=_("invocation ID"))
    request_id = models.CharField(max_length=64, blank=True, default="", verbose_name=_("request ID"))
    author = models.CharField(max_length=128, verbose_name=_("author"))
    branch = models.CharField(max_length=255, blank=True, default="", verbose_name=_("branch"))
    filter_key = models.CharField(max_length=255, blank=True, default="", verbose_name=_("filter key"))
    object = models.CharField(max_length=64, verbose_name=_("object"))
    role = models.CharField(max_length=16, verbose_name=_("role"))
    text = models.TextField(blank=True, default="", verbose_name=_("text"))
    payload = models.JSONField(verbose_name=_("payload"))
    has_state_delta = models.BooleanField(default=False, verbose_name=_("has state delta"))
    tokens = models.PositiveIntegerField(default=0, verbose_name=_("tokens"))
    created_at = models.DateTimeField(verbose_name=_("created at"))

    objects = EventQuerySet.as_manager()

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["session", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="event_unique_seq"),
            models.UniqueConstraint(fields=["session", "event_id"], name="event_unique_id"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.author}/{self.role}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise PermissionError("the event ledger is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise PermissionError("the event ledger is append-only; delete the session instead")


class Summary(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="summaries", verbose_name=_("session"))
    filter_key = models.CharField(max_length=255, blank=True, default="", verbose_name=_("filter key"))
    text = models.TextField(verbose_name=_("text"))
    cutoff_at = models.DateTimeField(null=True, blank=True, verbose_name=_("cutoff at"))
    last_event_id = models.CharField(max_length=64, blank=True, default="", verbose_name=_("last event ID"))
    last_seq = models.PositiveBigIntegerField(default=0, verbose_name=_("last seq"))
    updated_at = models.DateTimeField(verbose_name=_("updated at"))
    version = models.PositiveIntegerField(default=1, verbose_name=_("version"))
    # How much raw ledger the text stands for (the context inspector's "raw" line).
    covered_events = models.PositiveIntegerField(default=0, verbose_name=_("covered events"))
    covered_tokens = models.PositiveBigIntegerField(default=0, verbose_name=_("covered tokens"))
    # The database summary lock: a lease claimed under a row lock, held across the model
    # call (which must not run inside a transaction) and released or left to expire.
    lease_token = models.CharField(max_length=64, blank=True, default="", verbose_name=_("lease token"))
    lease_until = models.DateTimeField(null=True, blank=True, verbose_name=_("lease until"))

    class Meta:
        verbose_name = _("summary")
        verbose_name_plural = _("summaries")
        constraints = [models.UniqueConstraint(fields=["session", "filter_key"], name="summary_unique_key")]

    def __str__(self) -> str:
        return f"summary {self.session_id}/{self.filter_key or '*'} @ {self.last_seq}"


# -- long-term memory and artifacts (SPEC 6 and 7) ------------------------------------------------


class Memory(models.Model):
    """A fact or an episode about a user (SPEC 6.1); derived data, never an event."""

    KINDS = [("fact", "fact"), ("episode", "episode")]

    id = models.CharField(primary_key=True, max_length=64, verbose_name=_("ID"))
    app = models.CharField(max_length=64, verbose_name=_("app"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories", verbose_name=_("user")
    )
    kind = models.CharField(max_length=16, choices=KINDS, default="fact", verbose_name=_("kind"))
    text = models.TextField(verbose_name=_("text"))
    topics = models.JSONField(default=list, blank=True, verbose_name=_("topics"))
    event_time = models.DateTimeField(null=True, blank=True, verbose_name=_("event time"))
    participants = models.JSONField(default=list, blank=True, verbose_name=_("participants"))
    location = models.CharField(max_length=200, blank=True, default="", verbose_name=_("location"))
    # The search analyzer's tokens, space separated: what the full-text index is built on.
    search_tokens = models.TextField(blank=True, default="", editable=False, verbose_name=_("search tokens"))
    token_count = models.PositiveIntegerField(default=0, editable=False, verbose_name=_("token count"))
    embedding = models.JSONField(null=True, blank=True, editable=False, verbose_name=_("embedding"))
    created_at = models.DateTimeField(verbose_name=_("created at"))
    updated_at = models.DateTimeField(verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("memory")
        verbose_name_plural = _("memories")
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["app", "user", "-updated_at"], name="memory_user_recent"),
            models.Index(fields=["app", "user", "kind", "event_time"], name="memory_user_kind_time"),
        ]

    def __str__(self) -> str:
        return self.text[:80]


class MemoryCursor(models.Model):
    """How far auto memory has read a session's ledger (SPEC 6.3 `memory:last_extract_at`,
    kept here rather than in session state so that no job ever writes an event)."""

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, primary_key=True, related_name="memory_cursor", verbose_name=_("session")
    )
    last_seq = models.PositiveBigIntegerField(default=0, verbose_name=_("last seq"))
    extracted_at = models.DateTimeField(null=True, blank=True, verbose_name=_("extracted at"))

    class Meta:
        verbose_name = _("memory cursor")
        verbose_name_plural = _("memory cursors")

    def __str__(self) -> str:
        return f"memory cursor {self.session_id} @ {self.last_seq}"


class Artifact(models.Model):
    """One version of a named file (SPEC 7); the bytes live on `storages["artifacts"]`."""

    app = models.CharField(max_length=64, verbose_name=_("app"))
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="artifacts", verbose_name=_("user")
    )
    # "session:<id>" for session-scoped names, "user" for names starting with `user:`.
    scope = models.CharField(max_length=80, verbose_name=_("scope"))
    session = models.ForeignKey(
        Session, null=True, blank=True, on_delete=models.CASCADE, related_name="artifacts", verbose_name=_("session")
    )
    filename = models.CharField(max_length=255, verbose_name=_("filename"))
    version = models.PositiveIntegerField(verbose_name=_("version"))
    storage_key = models.CharField(max_length=1024, verbose_name=_("storage key"))
    mime = models.CharField(max_length=255, verbose_name=_("mime"))
    size = models.PositiveBigIntegerField(verbose_name=_("size"))
    sha256 = models.CharField(max_length=64, verbose_name=_("sha256"))
    created_at = models.DateTimeField(verbose_name=_("created at"))

    class Meta:
        verbose_name = _("artifact")
        verbose_name_plural = _("artifacts")
        ordering = ["filename", "version"]
        constraints = [
            models.UniqueConstraint(
                fields=["app", "user", "scope", "filename", "version"], name="artifact_unique_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.filename}@{self.version}"
