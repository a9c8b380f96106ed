"""REST API for skills (DESIGN 5: `/api/skills/`), read-only.

A user sees the app's shared skills and their own, each in its published revision;
a skill they cannot see answers 404 like a missing one. The folder skills the process
serves but the database does not hold are listed too (source `fs`), so the list is what
the agents can load.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import F, Q, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.errors import not_found
from skills_app import models as orm
from skills_app.core.repository import FolderSkillRepository
from skills_app.core.skill import SkillError, doc_paths


def _visible(request: Request) -> QuerySet[orm.SkillRevision]:
    return orm.SkillRevision.objects.select_related("skill").filter(
        Q(skill__owner__isnull=True) | Q(skill__owner=request.user),
        skill__app=settings.AGENTSITE_APP,
        status="published",
    )


def _folders() -> FolderSkillRepository:
    return FolderSkillRepository(settings.AGENTSITE_SKILLS_ROOTS)


def _revision_data(revision: orm.SkillRevision, *, detail: bool) -> dict[str, Any]:
    files = revision.files or {}
    data: dict[str, Any] = {
        "name": revision.skill.name,
        "description": revision.description,
        "source": "db",
        "origin": revision.source,
        "revision": revision.revision,
        "shared": revision.skill.owner_id is None,
        "published_at": revision.published_at,
    }
    if detail:
        data.update(body=revision.body, docs=doc_paths(files), files=sorted(files))
    return data


class SkillOutput(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    source = serializers.ChoiceField(choices=["db", "fs"], help_text="managed in the database, or a folder on disk")
    origin = serializers.CharField(required=False, help_text="how the revision came: fs, evolution or admin")
    revision = serializers.IntegerField(allow_null=True)
    shared = serializers.BooleanField()
    published_at = serializers.DateTimeField(allow_null=True, required=False)


class SkillDetailOutput(SkillOutput):
    body = serializers.CharField()
    docs = serializers.ListField(child=serializers.CharField())
    files = serializers.ListField(child=serializers.CharField())


class SkillListApi(APIView):
    @extend_schema(responses=SkillOutput(many=True))
    def get(self, request: Request) -> Response:
        results = {r.skill.name: _revision_data(r, detail=False) for r in _visible(request)}
        for summary in _folders().summaries_sync():
            results.setdefault(
                summary.name,
                {
                    "name": summary.name,
                    "description": summary.description,
                    "source": "fs",
                    "origin": "fs",
                    "revision": None,
                    "shared": True,
                    "published_at": None,
                },
            )
        return Response({"results": [SkillOutput(results[name]).data for name in sorted(results)]})


class SkillDetailApi(APIView):
    @extend_schema(responses=SkillDetailOutput)
    def get(self, request: Request, name: str) -> Response:
        # The user's own skill of that name first, then the shared one.
        revision = (
            _visible(request).filter(skill__name=name).order_by(F("skill__owner_id").asc(nulls_last=True)).first()
        )
        if revision is not None:
            return Response(SkillDetailOutput(_revision_data(revision, detail=True)).data)
        try:
            skill = _folders().get_sync(name)
        except SkillError:
            raise not_found("skill", name) from None
        return Response(
            SkillDetailOutput(
                {
                    "name": skill.name,
                    "description": skill.description,
                    "source": "fs",
                    "origin": "fs",
                    "revision": None,
                    "shared": True,
                    "published_at": None,
                    "body": skill.body,
                    "docs": skill.docs,
                    "files": sorted(skill.files),
                }
            ).data
        )
