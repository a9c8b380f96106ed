"""REST API for evolution (DESIGN 5: `/api/evolution/candidates/`), read-only, staff only.

Candidates are unreviewed material: text a model wrote, possibly unsafe (that is why they
are gated), and drawn from any user's session. So only staff may list them; anyone else
is answered 403 `permission_denied` in the usual error envelope. Decisions are taken in
the admin, the human gate.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.errors import ApplicationError
from evolution_app import models as orm
from evolution_app.services import MAX_EVIDENCE_SESSIONS

MAX_RESULTS = 200


class GateResultOutput(serializers.Serializer):
    gate = serializers.CharField()
    status = serializers.CharField()
    detail = serializers.CharField()
    findings = serializers.ListField(child=serializers.CharField())


class CandidateOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    action = serializers.ChoiceField(choices=["create", "update"])
    status = serializers.ChoiceField(choices=[s for s, _ in orm.CANDIDATE_STATUSES])
    session_id = serializers.CharField(help_text="the session whose events are the evidence")
    conflict = serializers.CharField()
    reason = serializers.CharField()
    evidence = serializers.ListField(
        child=serializers.DictField(),
        help_text=f"[{{event_id, seq, kind, excerpt, session_id}}] of the first {MAX_EVIDENCE_SESSIONS} sessions that learned it",
    )
    learned = serializers.IntegerField(help_text="how many times the procedure was learned while this candidate waited")
    gate_results = GateResultOutput(many=True)
    files = serializers.ListField(child=serializers.CharField())
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_reason = serializers.CharField()
    revision = serializers.IntegerField(allow_null=True, help_text="the published skill revision, once approved")
    created_at = serializers.DateTimeField()


def _data(candidate: orm.SkillCandidate) -> dict[str, Any]:
    return {
        "id": candidate.pk,
        "name": candidate.name,
        "action": candidate.action,
        "status": candidate.status,
        "session_id": candidate.session_key,
        "conflict": candidate.conflict,
        "reason": candidate.reason,
        "evidence": list(candidate.evidence or []),
        "learned": candidate.learned,
        "gate_results": [r.to_dict() for r in candidate.gate_results.all()],
        "files": sorted(candidate.files or {}),
        "decided_by": candidate.decided_by.get_username() if candidate.decided_by else None,
        "decided_at": candidate.decided_at,
        "decision_reason": candidate.decision_reason,
        "revision": candidate.revision.revision if candidate.revision else None,
        "created_at": candidate.created_at,
    }


class CandidateListApi(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("status", str, enum=[s for s, _ in orm.CANDIDATE_STATUSES], required=False)],
        responses=CandidateOutput(many=True),
    )
    def get(self, request: Request) -> Response:
        if not request.user.is_staff:
            raise ApplicationError("permission_denied", "skill candidates are visible to staff only", status_code=403)
        queryset = orm.SkillCandidate.objects.select_related("decided_by", "revision").prefetch_related("gate_results")
        status = request.query_params.get("status")
        if status:
            if status not in {s for s, _ in orm.CANDIDATE_STATUSES}:
                raise ApplicationError("invalid_request", f"unknown status {status!r}", field="status")
            queryset = queryset.filter(status=status)
        return Response({"results": [CandidateOutput(_data(c)).data for c in queryset[:MAX_RESULTS]]})
