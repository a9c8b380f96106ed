"""Writes on candidates: store a review's outcome, approve (publish), reject.

Approval is the human gate (DESIGN 8.4): it publishes the candidate as a `SkillRevision`
with source `evolution` through the skill services (which retire the live revision, so
the skills admin's rollback brings it back), records the approver, and appends to the
audit trail. A candidate whose base revision is no longer the live one is stale: it is
marked so and never published over a newer revision.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from evolution_app import models as orm
from evolution_app.core.engine import CandidateDraft
from skills_app import models as skills
from skills_app.core.skill import SkillError
from skills_app.services import skill_revision_create, skill_revision_publish

MAX_EVIDENCE_SESSIONS = 10
"""Sessions whose evidence a waiting candidate keeps. The same procedure learned again joins
the waiting candidate; past this many sessions it only counts (`learned`): the reviewer has
examples enough, and the stored list, rewritten at every join, stays bounded however many
sessions learn it (under load, one candidate gathered 500 sessions' evidence a minute)."""


class CandidateError(SkillError):
    """A decision the candidate services refuse; the message says why."""


def _actor(user: Any) -> Any:
    return user if user is not None and getattr(user, "is_authenticated", False) else None


def candidate_audit(*, candidate: orm.SkillCandidate, action: str, user: Any = None, comment: str = "") -> None:
    orm.CandidateAudit.objects.create(candidate=candidate, action=action, actor=_actor(user), comment=comment)


def _live(app: str, name: str) -> skills.SkillRevision | None:
    return skills.SkillRevision.objects.filter(skill__app=app, skill__name=name, status="published").first()


def candidate_create(
    *, app: str, session_id: str, review: orm.Review | None, draft: CandidateDraft
) -> orm.SkillCandidate:
    """Store a gated proposal; `publish` outcomes are published at once (no gate held it).

    The same procedure learned again while its candidate waits (same name, same files) is
    not a second candidate: it counts on the waiting one (`learned`), so a reviewer sees how
    often the method recurred, and this session's evidence joins it while the candidate cites
    fewer than MAX_EVIDENCE_SESSIONS sessions."""
    proposal = draft.proposal
    evidence = [{**item, "session_id": session_id} for item in draft.evidence]
    if draft.gates.outcome == "hold":
        waiting = orm.SkillCandidate.objects.select_for_update().filter(
            app=app, name=proposal.name, status="pending_review"
        )
        # Only what finding the twin needs: the evidence of every waiting candidate is not read.
        twin = next((c for c in waiting.only("id", "files") if c.files == draft.files), None)
        if twin is not None:
            _join(twin, session_id=session_id, evidence=evidence)
            candidate_audit(candidate=twin, action="evidence", comment=f"learned again in session {session_id}")
            return twin
    status = {"hold": "pending_review", "rejected": "rejected", "publish": "pending_review"}[draft.gates.outcome]
    candidate = orm.SkillCandidate.objects.create(
        app=app,
        name=proposal.name,
        action=proposal.action,
        status=status,
        session_id=session_id,
        session_key=session_id,
        review=review,
        base_revision=_live(app, proposal.name) if proposal.base else None,
        base_files=dict(proposal.base.files) if proposal.base is not None else {},
        files=draft.files,
        spec=proposal.spec.to_dict(),
        evidence=evidence,
        reason=proposal.reason,
        conflict=proposal.conflict,
        decision_reason=draft.gates.reason,
    )
    orm.GateResult.objects.bulk_create(
        [
            orm.GateResult(
                candidate=candidate,
                position=i,
                gate=r.gate,
                status=r.status,
                detail=r.detail,
                findings=list(r.findings),
            )
            for i, r in enumerate(draft.gates.results)
        ]
    )
    candidate_audit(candidate=candidate, action="proposed", comment=proposal.reason)
    if draft.gates.outcome == "rejected":
        candidate_audit(candidate=candidate, action="rejected", comment=draft.gates.reason)
    elif draft.gates.outcome == "hold":
        candidate_audit(candidate=candidate, action="held", comment="waiting for a reviewer")
    else:
        try:
            with transaction.atomic():  # a savepoint: a refused publish leaves the candidate rejected
                _publish(candidate=candidate, user=None, reason="no gate holds it: published directly")
        except SkillError as exc:
            candidate.status = "rejected"
            candidate.decision_reason = f"could not publish: {exc}"
            candidate.save(update_fields=["status", "decision_reason", "updated_at"])
            candidate_audit(candidate=candidate, action="rejected", comment=candidate.decision_reason)
    return candidate


def _join(twin: orm.SkillCandidate, *, session_id: str, evidence: list[dict[str, Any]]) -> None:
    """Count a new learning of `twin` (locked by the caller) and keep its evidence while the
    candidate cites fewer than MAX_EVIDENCE_SESSIONS sessions (or already cites this one)."""
    kept: list[dict[str, Any]] = orm.SkillCandidate.objects.filter(pk=twin.pk).values_list("evidence", flat=True)[0]
    cited = {e.get("session_id") for e in kept}
    changes: dict[str, Any] = {"learned": F("learned") + 1, "updated_at": timezone.now()}
    if session_id in cited or len(cited) < MAX_EVIDENCE_SESSIONS:
        known = {(e.get("session_id"), e["event_id"]) for e in kept}
        changes["evidence"] = [*kept, *(e for e in evidence if (session_id, e["event_id"]) not in known)]
    orm.SkillCandidate.objects.filter(pk=twin.pk).update(**changes)


def _publish(*, candidate: orm.SkillCandidate, user: Any, reason: str) -> skills.SkillRevision:
    live = _live(candidate.app, candidate.name)
    expected = candidate.base_revision_id
    if (live.pk if live is not None else None) != expected:
        candidate.status = "stale"
        candidate.decision_reason = (
            f"the live revision of {candidate.name!r} changed since the candidate was proposed "
            f"(r{live.revision if live else '-'} now); review a fresh candidate instead"
        )
        candidate.save(update_fields=["status", "decision_reason", "updated_at"])
        candidate_audit(candidate=candidate, action="stale", user=user, comment=candidate.decision_reason)
        raise CandidateError(candidate.decision_reason)
    gates = [r.to_dict() for r in candidate.gate_results.all()]
    revision = skill_revision_create(
        app=candidate.app,
        files=candidate.files,
        source="evolution",
        status="pending_review",
        note=f"evolution candidate #{candidate.pk}: {reason}",
        gate_results=gates,
    )
    revision = skill_revision_publish(revision=revision, user=_actor(user))
    candidate.status = "published"
    candidate.revision = revision
    candidate.decided_by = _actor(user)
    candidate.decided_at = timezone.now()
    candidate.decision_reason = reason
    candidate.save(update_fields=["status", "revision", "decided_by", "decided_at", "decision_reason", "updated_at"])
    candidate_audit(
        candidate=candidate, action="published", user=user, comment=f"{candidate.name} r{revision.revision}: {reason}"
    )
    return revision


def _locked_pending(candidate: orm.SkillCandidate) -> orm.SkillCandidate:
    locked = orm.SkillCandidate.objects.select_for_update().get(pk=candidate.pk)
    if locked.status != "pending_review":
        raise CandidateError(f"candidate #{locked.pk} ({locked.name}) is {locked.status}, not pending review")
    return locked


def candidate_approve(*, candidate: orm.SkillCandidate, user: Any, reason: str) -> skills.SkillRevision:
    """The human gate passes: publish the candidate as the skill's live revision. Like a
    rejection, an approval needs the reviewer's reason: it is the audit trail's why."""
    reason = reason.strip()
    if not reason:
        raise CandidateError("an approval needs a reason")
    with transaction.atomic():
        locked = _locked_pending(candidate)
        orm.GateResult.objects.create(
            candidate=locked,
            position=locked.gate_results.count(),
            gate="human",
            status="pass",
            detail=reason,
            actor=_actor(user),
        )
        candidate_audit(candidate=locked, action="approved", user=user, comment=reason)
        try:
            return _publish(candidate=locked, user=user, reason=reason)
        except CandidateError:
            # Keep the stale mark and its audit line: leave the atomic block normally.
            pass
    raise CandidateError(orm.SkillCandidate.objects.get(pk=candidate.pk).decision_reason)


def candidate_reject(*, candidate: orm.SkillCandidate, user: Any, reason: str) -> orm.SkillCandidate:
    """The human gate fails: the candidate is kept, rejected, with the reviewer's reason."""
    reason = reason.strip()
    if not reason:
        raise CandidateError("a rejection needs a reason")
    with transaction.atomic():
        locked = _locked_pending(candidate)
        orm.GateResult.objects.create(
            candidate=locked,
            position=locked.gate_results.count(),
            gate="human",
            status="fail",
            detail=reason,
            actor=_actor(user),
        )
        locked.status = "rejected"
        locked.decided_by = _actor(user)
        locked.decided_at = timezone.now()
        locked.decision_reason = reason
        locked.save(update_fields=["status", "decided_by", "decided_at", "decision_reason", "updated_at"])
        candidate_audit(candidate=locked, action="rejected", user=user, comment=reason)
    return locked
