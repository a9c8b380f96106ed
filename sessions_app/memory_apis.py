"""REST API for a user's long-term memories (DESIGN 5: `/api/memories/`).

The user is always the authenticated one: nothing in a request can name another, and
another user's memory answers 404. Creating goes through the same dedupe tiers as the
agent's tools: the answer says whether the memory was `added` (201), or `updated` /
`skipped` because a similar one exists (200, with that memory).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.api.fields import StrictCharField
from agentsite.errors import ApplicationError, not_found
from sessions_app.core.memory import (
    MEMORY_KINDS,
    InvalidMemoryError,
    MemoryDraft,
    MemoryEntry,
    MemoryLimitError,
    MemoryManager,
    MemoryNotFoundError,
    SearchOptions,
    UserKey,
)
from sessions_app.memory_backends import memory_manager

MAX_PAGE = 200
# Far past any user's memories, and within every database's OFFSET (a bigger one was a 500).
MAX_OFFSET = 2**31 - 1


def _key(request: Request) -> UserKey:
    return UserKey(app=settings.AGENTSITE_APP, user_id=str(request.user.pk))


def _manager() -> MemoryManager:
    return memory_manager()


def _owned(request: Request, memory_id: str) -> MemoryEntry:
    entry = _manager().get(_key(request), memory_id)
    if entry is None:
        raise not_found("memory", memory_id)
    return entry


def _invalid(exc: Exception, field: str | None = None) -> ApplicationError:
    if isinstance(exc, MemoryLimitError):
        return ApplicationError("memory_limit", str(exc), status_code=409)
    return ApplicationError("invalid", str(exc), field=field)


class MemoryOutput(serializers.Serializer):
    id = serializers.CharField()
    memory = serializers.CharField()
    kind = serializers.ChoiceField(choices=MEMORY_KINDS)
    topics = serializers.ListField(child=serializers.CharField())
    event_time = serializers.DateField(required=False, help_text="episodes only")
    participants = serializers.ListField(child=serializers.CharField(), required=False)
    location = serializers.CharField(required=False)
    score = serializers.FloatField(required=False, help_text="search results only, 0..1")
    created = serializers.DateTimeField()
    updated = serializers.DateTimeField()


class WriteOutput(serializers.Serializer):
    action = serializers.ChoiceField(choices=["added", "updated", "skipped"])
    memory = MemoryOutput()


class _MemoryFields(serializers.Serializer):
    kind = serializers.ChoiceField(choices=MEMORY_KINDS, required=False)
    topics = serializers.ListField(child=StrictCharField(max_length=64), required=False, max_length=16)
    event_time = serializers.DateTimeField(required=False, allow_null=True)
    participants = serializers.ListField(child=StrictCharField(max_length=100), required=False, max_length=16)
    location = StrictCharField(required=False, allow_blank=True, max_length=200)


class MemoryListQuery(serializers.Serializer):
    q = serializers.CharField(required=False, allow_blank=True, max_length=1000)
    kind = serializers.ChoiceField(choices=MEMORY_KINDS, required=False)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_PAGE, default=50)
    offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_OFFSET, default=0)


class MemoryCreateInput(_MemoryFields):
    memory = StrictCharField(max_length=4000)


class MemoryEditInput(_MemoryFields):
    memory = StrictCharField(max_length=4000, required=False)


class MemoryListCreateApi(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, description="search words; results ranked best first, with a score"),
            OpenApiParameter("kind", str, enum=list(MEMORY_KINDS)),
            OpenApiParameter("limit", int, description=f"at most {MAX_PAGE}"),
            OpenApiParameter("offset", int, description="skip this many (listing without q only)"),
        ],
        responses=MemoryOutput(many=True),
    )
    def get(self, request: Request) -> Response:
        query = MemoryListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        manager = _manager()
        key = _key(request)
        if data.get("q", "").strip():
            entries = manager.search(
                key,
                SearchOptions(query=data["q"], kind=data.get("kind"), kind_fallback=False, max_results=data["limit"]),
            )
        else:
            entries = manager.load(key, limit=data["limit"], kind=data.get("kind"), offset=data["offset"])
        return Response({"results": [e.to_dict() for e in entries], "count": manager.count(key)})

    @extend_schema(request=MemoryCreateInput, responses={201: WriteOutput, 200: WriteOutput})
    def post(self, request: Request) -> Response:
        body = MemoryCreateInput(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        draft = MemoryDraft(
            text=data["memory"],
            kind=data.get("kind", "fact"),
            topics=tuple(data.get("topics", ())),
            event_time=data.get("event_time"),
            participants=tuple(data.get("participants", ())),
            location=data.get("location", ""),
        )
        try:
            write = _manager().add(_key(request), draft)
        except (InvalidMemoryError, MemoryLimitError) as exc:
            raise _invalid(exc) from None
        code = status.HTTP_201_CREATED if write.action == "added" else status.HTTP_200_OK
        return Response({"action": write.action, "memory": write.entry.to_dict()}, status=code)


class MemoryDetailApi(APIView):
    @extend_schema(responses=MemoryOutput)
    def get(self, request: Request, memory_id: str) -> Response:
        return Response(_owned(request, memory_id).to_dict())

    @extend_schema(request=MemoryEditInput, responses=MemoryOutput)
    def patch(self, request: Request, memory_id: str) -> Response:
        body = MemoryEditInput(data=request.data)
        body.is_valid(raise_exception=True)
        data: dict[str, Any] = dict(body.validated_data)
        changes = {
            "text": data.get("memory"),
            "kind": data.get("kind"),
            "topics": data.get("topics"),
            "event_time": data.get("event_time"),
            "participants": data.get("participants"),
            "location": data.get("location"),
        }
        try:
            entry = _manager().update(_key(request), memory_id, **changes)
        except MemoryNotFoundError:
            raise not_found("memory", memory_id) from None
        except InvalidMemoryError as exc:
            raise _invalid(exc) from None
        return Response(entry.to_dict())

    @extend_schema(responses={204: None})
    def delete(self, request: Request, memory_id: str) -> Response:
        if not _manager().delete(_key(request), memory_id):
            raise not_found("memory", memory_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
