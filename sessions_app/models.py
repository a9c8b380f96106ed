"""The ledger's tables. Events are append-only: only deleting a whole session removes them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Session(models.Model):
    id = models.CharField(primary_key=True, max_length=64)
    app = models.CharField(max_length=64, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions")
    agent = models.CharField(max_length=128, blank=True, default="")
    title = models.CharField(max_length=200, blank=True, default="")
    state = models.JSONField(default=dict, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    # Issue 25, item 5: the hash of the chat a stateless /v1 client holds after this
    # session's last /v1 run (runs.core.context.fingerprint), and `last_seq` when it was
    # taken: it matches only while the ledger has not grown since.
    history_fingerprint = models.CharField(max_length=64, blank=True, default="")
    fingerprint_seq = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["app", "user", "-updated_at"], name="session_user_recent"),
            models.Index(fields=["app", "user", "history_fingerprint"], name="session_user_fingerprint"),
        ]

    def __str__(self) -> str:
        return self.title or self.id


class AppState(models.Model):
    """State shared by every user of an app (SPEC 2.1 `app:` keys, stored without the prefix)."""

    app = models.CharField(primary_key=True, max_length=64)
    state = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"app state {self.app}"


class UserState(models.Model):
    """State shared by the sessions of one user in an app (SPEC 2.1 `user:` keys, stored
    without the prefix)."""

    app = models.CharField(max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_states")
    state = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["app", "user"], name="user_state_unique")]

    def __str__(self) -> str:
        return f"user state {self.app}/{self.user_id}"


class EventQuerySet(models.QuerySet["Event"]):
    def update(self, **kwargs: Any) -> int:
        raise PermissionError("the event ledger is append-only")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise PermissionError("the event ledger is append-only; delete the session instead")


class Event(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    event_id = models.CharField(max_length=64)
    invocation_id = models.CharField(max_length=64, blank=True, default="")
    request_id = models.CharField(max_length=64, blank=True, default="")
    author = models.CharField(max_length=128)
    branch = models.CharField(max_length=255, blank=True, default="")
    filter_key = models.CharField(max_length=255, blank=True, default="")
    object = models.CharField(max_length=64)
    role = models.CharField(max_length=16)
    text = models.TextField(blank=True, default="")
    payload = models.JSONField()
    has_state_delta = models.BooleanField(default=False)
    tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    objects = EventQuerySet.as_manager()

    class Meta:
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
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="summaries")
    filter_key = models.CharField(max_length=255, blank=True, default="")
    text = models.TextField()
    cutoff_at = models.DateTimeField(null=True, blank=True)
    last_event_id = models.CharField(max_length=64, blank=True, default="")
    last_seq = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField()
    version = models.PositiveIntegerField(default=1)
    # How much raw ledger the text stands for (the context inspector's "raw" line).
    covered_events = models.PositiveIntegerField(default=0)
    covered_tokens = models.PositiveBigIntegerField(default=0)
    # The database summary lock: a lease claimed under a row lock, held across the model
    # call (which must not run inside a transaction) and released or left to expire.
    lease_token = models.CharField(max_length=64, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "filter_key"], name="summary_unique_key")]

    def __str__(self) -> str:
        return f"summary {self.session_id}/{self.filter_key or '*'} @ {self.last_seq}"


# -- long-term memory and artifacts (SPEC 6 and 7) ------------------------------------------------


class Memory(models.Model):
    """A fact or an episode about a user (SPEC 6.1); derived data, never an event."""

    KINDS = [("fact", "fact"), ("episode", "episode")]

    id = models.CharField(primary_key=True, max_length=64)
    app = models.CharField(max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memories")
    kind = models.CharField(max_length=16, choices=KINDS, default="fact")
    text = models.TextField()
    topics = models.JSONField(default=list, blank=True)
    event_time = models.DateTimeField(null=True, blank=True)
    participants = models.JSONField(default=list, blank=True)
    location = models.CharField(max_length=200, blank=True, default="")
    # The search analyzer's tokens, space separated: what the full-text index is built on.
    search_tokens = models.TextField(blank=True, default="", editable=False)
    token_count = models.PositiveIntegerField(default=0, editable=False)
    embedding = models.JSONField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
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

    session = models.OneToOneField(Session, on_delete=models.CASCADE, primary_key=True, related_name="memory_cursor")
    last_seq = models.PositiveBigIntegerField(default=0)
    extracted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"memory cursor {self.session_id} @ {self.last_seq}"


class Artifact(models.Model):
    """One version of a named file (SPEC 7); the bytes live on `storages["artifacts"]`."""

    app = models.CharField(max_length=64)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="artifacts")
    # "session:<id>" for session-scoped names, "user" for names starting with `user:`.
    scope = models.CharField(max_length=80)
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.CASCADE, related_name="artifacts")
    filename = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    storage_key = models.CharField(max_length=1024)
    mime = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["filename", "version"]
        constraints = [
            models.UniqueConstraint(fields=["app", "user", "scope", "filename", "version"], name="artifact_unique_version"),
        ]

    def __str__(self) -> str:
        return f"{self.filename}@{self.version}"
