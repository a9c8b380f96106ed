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
        "sessions_app.Session", on_delete=models.CASCADE, primary_key=True, related_name="review_cursor"
    )
    last_seq = models.PositiveBigIntegerField(default=0)
    reviewed_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=32, blank=True, default="")
    last_reason = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return f"review cursor {self.session_id} @ {self.last_seq}"


class Review(models.Model):
    session = models.ForeignKey("sessions_app.Session", on_delete=models.CASCADE, related_name="reviews")
    from_seq = models.PositiveBigIntegerField()
    to_seq = models.PositiveBigIntegerField()
    status = models.CharField(max_length=32)
    reason = models.TextField(blank=True, default="")
    notes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["session", "to_seq"], name="review_unique_delta")]

    def __str__(self) -> str:
        return f"review of {self.session_id} #{self.from_seq + 1}-{self.to_seq}: {self.status}"


class SkillCandidate(models.Model):
    app = models.CharField(max_length=64, db_index=True)
    name = models.CharField(max_length=64)
    action = models.CharField(max_length=16, choices=ACTIONS)
    status = models.CharField(max_length=16, choices=CANDIDATE_STATUSES, default="pending_review", db_index=True)
    session = models.ForeignKey(
        "sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL, related_name="skill_candidates"
    )
    session_key = models.CharField(max_length=64, blank=True, default="")  # kept when the session is deleted
    review = models.ForeignKey(Review, null=True, blank=True, on_delete=models.SET_NULL, related_name="candidates")
    # The live revision an update was based on; a different one live at approval: stale.
    base_revision = models.ForeignKey(
        "skills_app.SkillRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    base_files = models.JSONField(default=dict, blank=True)  # the files it was based on (folder skills too)
    files = models.JSONField(default=dict)
    spec = models.JSONField(default=dict)
    evidence = models.JSONField(default=list, blank=True)  # [{"event_id", "seq", "kind", "excerpt"}]
    reason = models.TextField(blank=True, default="")  # why the reconciler proposed it this way
    conflict = models.TextField(blank=True, default="")
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="decided_skill_candidates"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True, default="")
    revision = models.ForeignKey(
        "skills_app.SkillRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="candidates"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.action}, {self.status})"


class GateResult(models.Model):
    candidate = models.ForeignKey(SkillCandidate, on_delete=models.CASCADE, related_name="gate_results")
    position = models.PositiveSmallIntegerField(default=0)
    gate = models.CharField(max_length=16)
    status = models.CharField(max_length=8, choices=GATE_STATUSES)
    detail = models.TextField(blank=True, default="")
    findings = models.JSONField(default=list, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["candidate", "position", "id"]

    def __str__(self) -> str:
        return f"{self.gate}: {self.status}"

    def to_dict(self) -> dict[str, object]:
        return {"gate": self.gate, "status": self.status, "detail": self.detail, "findings": list(self.findings or [])}


class CandidateAudit(models.Model):
    candidate = models.ForeignKey(SkillCandidate, on_delete=models.CASCADE, related_name="audit")
    action = models.CharField(max_length=32)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    comment = models.TextField(blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["candidate", "at", "id"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor or 'evolution'}"
