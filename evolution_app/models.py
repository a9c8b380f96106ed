"""Evolution's tables (DESIGN 4): the review cursor, reviews, candidates, gate results, audit.

- `ReviewCursor`: how far the review job has read a session's ledger (the last seq), and
  what its last review did (status and reason, so a skip is visible on the cursor too).
- `Review`: one row per reviewed delta, skipped ones included, with the reason.
- `SkillCandidate`: a proposed skill (create or update), its files, the evidence (ledger
  event ids), the revision it was based on (for the diff and the stale check), its status
  and the person's decision. Candidates outlive the session they came from.
- `GateResult`: each gate's verdict on a candidate, the human one included.
- `CandidateAudit`: who did what to a candidate and when.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

CANDIDATE_STATUSES = [
    ("pending_review", "pending review"),
    ("published", "published"),
    ("rejected", "rejected"),
    ("stale", "stale"),
]
ACTIONS = [("create", "new skill"), ("update", "update of a skill")]
GATE_STATUSES = [("pass", "pass"), ("fail", "fail"), ("hold", "hold"), ("error", "error")]


class ReviewCursor(models.Model):
    session = models.OneToOneField(
        "sessions_app.Session",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="review_cursor",
        verbose_name=_("session"),
    )
    last_seq = models.PositiveBigIntegerField(default=0, verbose_name=_("last seq"))
    reviewed_at = models.DateTimeField(null=True, blank=True, verbose_name=_("reviewed at"))
    last_status = models.CharField(max_length=32, blank=True, default="", verbose_name=_("last status"))
    last_reason = models.TextField(blank=True, default="", verbose_name=_("last reason"))

    class Meta:
        verbose_name = _("review cursor")
        verbose_name_plural = _("review cursors")

    def __str__(self) -> str:
        return f"review cursor {self.session_id} @ {self.last_seq}"


class Review(models.Model):
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="reviews", verbose_name=_("session")
    )
    from_seq = models.PositiveBigIntegerField(verbose_name=_("from seq"))
    to_seq = models.PositiveBigIntegerField(verbose_name=_("to seq"))
    status = models.CharField(max_length=32, verbose_name=_("status"))
    reason = models.TextField(blank=True, default="", verbose_name=_("reason"))
    notes = models.JSONField(default=list, blank=True, verbose_name=_("notes"))
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("review")
        verbose_name_plural = _("reviews")
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["session", "to_seq"], name="review_unique_delta")]

    def __str__(self) -> str:
        return f"review of {self.session_id} #{self.from_seq + 1}-{self.to_seq}: {self.status}"


class SkillCandidate(models.Model):
    app = models.CharField(max_length=64, db_index=True, verbose_name=_("app"))
    name = models.CharField(max_length=64, verbose_name=_("name"))
    action = models.CharField(max_length=16, choices=ACTIONS, verbose_name=_("action"))
    status = models.CharField(
        max_length=16, choices=CANDIDATE_STATUSES, default="pending_review", db_index=True, verbose_name=_("status")
    )
    session = models.ForeignKey(
        "sessions_app.Session",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="skill_candidates",
        verbose_name=_("session"),
    )
    session_key = models.CharField(
        max_length=64, blank=True, default="", verbose_name=_("session key")
    )  # kept when the session is deleted
    review = models.ForeignKey(
        Review, null=True, blank=True, on_delete=models.SET_NULL, related_name="candidates", verbose_name=_("review")
    )
    # The live revision an update was based on; a different one live at approval: stale.
    base_revision = models.ForeignKey(
        "skills_app.SkillRevision",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("base revision"),
    )
    base_files = models.JSONField(
        default=dict, blank=True, verbose_name=_("base files")
    )  # the files it was based on (folder skills too)
    files = models.JSONField(default=dict, verbose_name=_("files"))
    spec = models.JSONField(default=dict, verbose_name=_("spec"))
    evidence = models.JSONField(
        default=list, blank=True, verbose_name=_("evidence")
    )  # [{"event_id", "seq", "kind", "excerpt", "session_id"}]: from the first MAX_EVIDENCE_SESSIONS sessions
    learned = models.PositiveIntegerField(
        default=1, verbose_name=_("times learned")
    )  # reviews that proposed it while it waited, this one's included
    reason = models.TextField(
        blank=True, default="", verbose_name=_("reason")
    )  # why the reconciler proposed it this way
    conflict = models.TextField(blank=True, default="", verbose_name=_("conflict"))
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="decided_skill_candidates",
        verbose_name=_("decided by"),
    )
    decided_at = models.DateTimeField(null=True, blank=True, verbose_name=_("decided at"))
    decision_reason = models.TextField(blank=True, default="", verbose_name=_("decision reason"))
    revision = models.ForeignKey(
        "skills_app.SkillRevision",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="candidates",
        verbose_name=_("revision"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=_("updated at"))

    class Meta:
        verbose_name = _("skill candidate")
        verbose_name_plural = _("skill candidates")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.action}, {self.status})"


class GateResult(models.Model):
    candidate = models.ForeignKey(
        SkillCandidate, on_delete=models.CASCADE, related_name="gate_results", verbose_name=_("candidate")
    )
    position = models.PositiveSmallIntegerField(default=0, verbose_name=_("position"))
    gate = models.CharField(max_length=16, verbose_name=_("gate"))
    status = models.CharField(max_length=8, choices=GATE_STATUSES, verbose_name=_("status"))
    detail = models.TextField(blank=True, default="", verbose_name=_("detail"))
    findings = models.JSONField(default=list, blank=True, verbose_name=_("findings"))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("actor"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=_("created at"))

    class Meta:
        verbose_name = _("gate result")
        verbose_name_plural = _("gate results")
        ordering = ["candidate", "position", "id"]

    def __str__(self) -> str:
        return f"{self.gate}: {self.status}"

    def to_dict(self) -> dict[str, object]:
        return {"gate": self.gate, "status": self.status, "detail": self.detail, "findings": list(self.findings or [])}


class CandidateAudit(models.Model):
    candidate = models.ForeignKey(
        SkillCandidate, on_delete=models.CASCADE, related_name="audit", verbose_name=_("candidate")
    )
    action = models.CharField(max_length=32, verbose_name=_("action"))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("actor"),
    )
    comment = models.TextField(blank=True, default="", verbose_name=_("comment"))
    at = models.DateTimeField(auto_now_add=True, verbose_name=_("at"))

    class Meta:
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit trail")
        ordering = ["candidate", "at", "id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor or 'evolution'}"
