"""REST API for a session's artifacts (DESIGN 5).

- `GET /api/sessions/<id>/artifacts/`: names (the session's and the user's `user:` ones)
  with their versions;
- `GET /api/sessions/<id>/artifacts/<name>?version=`: the bytes, latest unless a version
  is given, with the stored MIME type as Content-Type and as an attachment (so a stored
  HTML or SVG file never renders inside this origin);
- `POST` the same path with the raw bytes as the body (Content-Type = the MIME type):
  saves a new version (201); over `AGENTSITE_ARTIFACT_MAX_BYTES` answers 413;
- `DELETE` the same path: removes every version (204).
Another user's session answers 404, like a missing artifact.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.errors import ApplicationError, not_found
from sessions_app.apis import get_owned_session
from sessions_app.artifact_backends import DjangoArtifactService
from sessions_app.core.artifact_tools import artifact_url
from sessions_app.core.artifacts import (
    USER_PREFIX,
    ArtifactScope,
    ArtifactTooLargeError,
    ArtifactVersion,
    InvalidArtifactNameError,
)

UPLOAD_IGNORED_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _scope(request: Request, session_id: str) -> ArtifactScope:
    session = get_owned_session(request, session_id)
    return ArtifactScope(app=session.app, user_id=str(request.user.pk), session_id=session.id)


def _version_data(session_id: str, info: ArtifactVersion) -> dict[str, Any]:
    return {
        "version": info.version,
        "mime": info.mime,
        "size": info.size,
        "sha256": info.sha256,
        "created_at": info.created_at.isoformat(),
        "url": artifact_url(session_id, info.filename, info.version),
    }


def _bad_name(exc: InvalidArtifactNameError) -> ApplicationError:
    return ApplicationError("invalid_filename", str(exc), field="filename")


class _AnyAccept(BaseContentNegotiation):
    """Downloads answer whatever the client accepts: the file's own type decides."""

    def select_parser(self, request: Request, parsers: list[Any]) -> Any:
        return parsers[0] if parsers else None

    def select_renderer(self, request: Request, renderers: list[Any], format_suffix: str | None = None) -> Any:
        return renderers[0], renderers[0].media_type


class ArtifactVersionOutput(serializers.Serializer):
    version = serializers.IntegerField()
    mime = serializers.CharField()
    size = serializers.IntegerField()
    sha256 = serializers.CharField()
    created_at = serializers.DateTimeField()
    url = serializers.CharField()


class ArtifactOutput(serializers.Serializer):
    filename = serializers.CharField()
    scope = serializers.ChoiceField(choices=["session", "user"])
    latest = serializers.IntegerField()
    versions = ArtifactVersionOutput(many=True)


class SessionArtifactListApi(APIView):
    @extend_schema(responses=ArtifactOutput(many=True))
    def get(self, request: Request, session_id: str) -> Response:
        scope = _scope(request, session_id)
        service = DjangoArtifactService()
        results = []
        for name in service.list_names_sync(scope):
            versions = service.versions_sync(scope, name)
            if versions:
                results.append(
                    {
                        "filename": name,
                        "scope": versions[-1].scope,
                        "latest": versions[-1].version,
                        "versions": [_version_data(scope.session_id, v) for v in versions],
                    }
                )
        return Response({"results": results})


class ArtifactVersionQuery(serializers.Serializer):
    version = serializers.IntegerField(required=False, min_value=0, max_value=2**31 - 1)  # the column


class SessionArtifactDetailApi(APIView):
    content_negotiation_class = _AnyAccept

    @extend_schema(
        parameters=[OpenApiParameter("version", int, description="a version (0 is the first); latest when omitted")],
        responses={(200, "*/*"): OpenApiResponse(description="the artifact's bytes, as an attachment")},
    )
    def get(self, request: Request, session_id: str, filename: str) -> FileResponse:
        scope = _scope(request, session_id)
        query = ArtifactVersionQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        version = query.validated_data.get("version")
        try:
            opened = DjangoArtifactService().open_sync(scope, filename, version=version)
        except InvalidArtifactNameError as exc:
            raise _bad_name(exc) from None
        if opened is None:
            if version is None:
                raise not_found("artifact", filename)
            message = _("artifact %(name)s version %(version)s not found") % {
                "name": repr(filename),
                "version": version,
            }
            raise ApplicationError("not_found", message, status_code=404)
        info, handle = opened
        response = FileResponse(
            handle, content_type=info.mime, as_attachment=True, filename=filename.removeprefix(USER_PREFIX)
        )
        response["Content-Length"] = str(info.size)
        response["ETag"] = f'"{info.sha256}"'
        response["X-Artifact-Version"] = str(info.version)
        response["X-Content-Type-Options"] = "nosniff"
        response["Cache-Control"] = "private, no-cache"
        return response

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY},
        responses={201: ArtifactVersionOutput},
    )
    def post(self, request: Request, session_id: str, filename: str) -> Response:
        scope = _scope(request, session_id)
        service = DjangoArtifactService()
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > service.max_bytes:
            raise ApplicationError(
                "artifact_too_large", str(ArtifactTooLargeError(int(length), service.max_bytes)), status_code=413
            )
        stream = request.stream
        data = stream.read(service.max_bytes + 1) if stream is not None else b""
        mime = (request.content_type or "").split(";")[0].strip()
        if mime in UPLOAD_IGNORED_TYPES:
            mime = ""
        try:
            info = service.save_sync(scope, filename, data, mime=mime or None)
        except InvalidArtifactNameError as exc:
            raise _bad_name(exc) from None
        except ArtifactTooLargeError as exc:
            raise ApplicationError("artifact_too_large", str(exc), status_code=413) from None
        return Response(
            {"filename": info.filename, **_version_data(scope.session_id, info)}, status=status.HTTP_201_CREATED
        )

    @extend_schema(responses={204: None})
    def delete(self, request: Request, session_id: str, filename: str) -> Response:
        scope = _scope(request, session_id)
        try:
            deleted = DjangoArtifactService().delete_sync(scope, filename)
        except InvalidArtifactNameError as exc:
            raise _bad_name(exc) from None
        if not deleted:
            raise not_found("artifact", filename)
        return Response(status=status.HTTP_204_NO_CONTENT)
