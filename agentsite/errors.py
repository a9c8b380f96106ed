"""One error envelope for every API: `{"error": {"code", "message", "field"?}}`.

The `message` is for people and follows the request's language (LocaleMiddleware: the
language switch's cookie, else Accept-Language); the `code` is for programs and never
changes with it (issue 21).
"""

from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.functional import Promise
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from runs.core.errors import AgentNotFoundError, DuplicateRequestError, TooManyRunsError, UsageError
from runs.error_texts import core_error_text
from sessions_app.core.session import SessionNotFoundError


class ApplicationError(exceptions.APIException):
    """An error the API reports on purpose, with a stable code.

    `message` may be a lazy translation (`gettext_lazy`): it is rendered in the language of
    the request that reports it.
    """

    def __init__(self, code: str, message: str | Promise, *, status_code: int = 400, field: str | None = None) -> None:
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.error_code = code
        self.message = message
        self.field = field


NotFoundKind = Literal["run", "session", "memory", "skill", "artifact"]
_NOT_FOUND: dict[NotFoundKind, Promise] = {
    "run": _("run %(value)s not found"),
    "session": _("session %(value)s not found"),
    "memory": _("memory %(value)s not found"),
    "skill": _("skill %(value)s not found"),
    "artifact": _("artifact %(value)s not found"),
}


def not_found(kind: NotFoundKind, value: object, *, field: str | None = None) -> ApplicationError:
    """The 404 `not_found` naming what is missing (`run 'r_1' not found`), in the request's language.

    The same answer whether the object does not exist or belongs to someone else.
    """
    return ApplicationError("not_found", str(_NOT_FOUND[kind]) % {"value": repr(value)}, status_code=404, field=field)


def envelope(code: str, message: str | Promise, field: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": str(message)}
    if field:
        error["field"] = field
    return {"error": error}


def _first_validation_error(detail: Any, prefix: str = "") -> tuple[str | None, str]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = key if key != "non_field_errors" else None
            field, message = _first_validation_error(value, f"{prefix}{key}." if name else prefix)
            return (field or (f"{prefix}{name}" if name else None)), message
    if isinstance(detail, list) and detail:
        return _first_validation_error(detail[0], prefix)
    return None, str(detail)


_CODES = {
    exceptions.ParseError: ("malformed_json", status.HTTP_400_BAD_REQUEST),
    exceptions.NotAuthenticated: ("not_authenticated", status.HTTP_401_UNAUTHORIZED),
    exceptions.AuthenticationFailed: ("authentication_failed", status.HTTP_401_UNAUTHORIZED),
    exceptions.PermissionDenied: ("permission_denied", status.HTTP_403_FORBIDDEN),
    exceptions.NotFound: ("not_found", status.HTTP_404_NOT_FOUND),
    exceptions.MethodNotAllowed: ("method_not_allowed", status.HTTP_405_METHOD_NOT_ALLOWED),
    exceptions.NotAcceptable: ("not_acceptable", status.HTTP_406_NOT_ACCEPTABLE),
    exceptions.UnsupportedMediaType: ("unsupported_media_type", status.HTTP_415_UNSUPPORTED_MEDIA_TYPE),
    exceptions.Throttled: ("throttled", status.HTTP_429_TOO_MANY_REQUESTS),
}


def to_application_error(exc: Exception) -> ApplicationError | None:
    """Map core errors to API errors, their text in the request's language
    (`runs.error_texts`: core says it in English, with a stable code)."""
    if isinstance(exc, ApplicationError):
        return exc
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = gettext("request body is larger than the limit of %(limit)s bytes") % {"limit": limit}
        return ApplicationError("body_too_large", message, status_code=413)
    if isinstance(exc, AgentNotFoundError):
        return ApplicationError("unknown_agent", core_error_text(exc), status_code=400, field="agent")
    if isinstance(exc, DuplicateRequestError):
        return ApplicationError("duplicate_request", core_error_text(exc), status_code=409, field="request_id")
    if isinstance(exc, SessionNotFoundError):
        return ApplicationError("not_found", str(exc), status_code=404, field="session_id")
    if isinstance(exc, TooManyRunsError):
        return ApplicationError("too_many_runs", core_error_text(exc), status_code=429)
    if isinstance(exc, UsageError):
        return ApplicationError("invalid_request", core_error_text(exc), status_code=400)
    return None


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: every API error leaves in the envelope."""
    app_error = to_application_error(exc)
    if app_error is not None:
        response = Response(
            envelope(app_error.error_code, app_error.message, app_error.field), status=app_error.status_code
        )
        return response
    if isinstance(exc, exceptions.ValidationError):
        field, message = _first_validation_error(exc.detail)
        return Response(envelope("invalid", message, field), status=status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    code, _ = next(
        ((c, s) for kind, (c, s) in _CODES.items() if isinstance(exc, kind)), ("error", response.status_code)
    )
    detail = getattr(exc, "detail", str(exc))
    message = str(detail if not isinstance(detail, dict | list) else _first_validation_error(detail)[1])
    response.data = envelope(code, message)
    return response


API_PREFIXES = ("/api/", "/v1/", "/agui/", "/a2a/", "/healthz")


def json_404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """API paths answer 404 in the envelope; pages keep Django's HTML 404."""
    if request.path.startswith(API_PREFIXES):
        return JsonResponse(
            envelope("not_found", gettext("no such endpoint: %(path)s") % {"path": repr(request.path)}), status=404
        )
    return defaults.page_not_found(request, exception or Http404())


def json_500(request: HttpRequest) -> HttpResponse:
    if request.path.startswith(API_PREFIXES):
        return JsonResponse(envelope("server_error", gettext("internal error; it has been logged")), status=500)
    return defaults.server_error(request)
