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

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["app", "user", "-updated_at"], name="session_user_recent")]

    def __str__(self) -> str:
        return self.title or self.id


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

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "filter_key"], name="summary_unique_key")]

    def __str__(self) -> str:
        return f"summary {self.session_id}/{self.filter_key or '*'} @ {self.last_seq}"
