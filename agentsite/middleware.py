"""Request middleware of every Django surface (REST, OpenAI-compatible, AG-UI, pages)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware

from agentsite.api.json_input import InputError, check_text

LENGTH_REQUIRED = (
    "a body sent without Content-Length (Transfer-Encoding: chunked) cannot be read by this server; send Content-Length"
)


def _buffered_length(request: HttpRequest) -> int | None:
    """The size of a body the server has already received whole, or None."""
    if not isinstance(request, ASGIRequest):
        return None  # WSGI: the body stream ends at Content-Length, so without one it reads as empty
    stream: Any = request._stream  # Django's ASGI handler spools the whole body to a file first
    size = stream.seek(0, 2)
    stream.seek(0)
    return int(size)


def _error(request: HttpRequest, status: int, code: str, message: str, field: str | None = None) -> HttpResponse:
    """An error in the format of the surface the path belongs to."""
    # Imported here: `agentsite.errors` loads DRF, whose settings load our parsers, which
    # need `agentsite.errors`; middleware is loaded before any of them.
    from agentsite.errors import API_PREFIXES, envelope

    if request.path.startswith("/v1/"):
        error = {"message": message, "type": "invalid_request_error", "param": field, "code": code}
        return JsonResponse({"error": error}, status=status)
    if request.path.startswith(API_PREFIXES):
        return JsonResponse(envelope(code, message, field), status=status)
    return HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")


def _unstorable_text(request: HttpRequest) -> HttpResponse | None:
    """A NUL in the path (an id) or in a query parameter: PostgreSQL refuses it in any
    query, so no view gets to send one to the database."""
    try:
        check_text(request.path, "path")
        for name, values in request.GET.lists():
            check_text(name, "query string")
            for value in values:
                check_text(value, name)
    except InputError as exc:
        return _error(request, 400, exc.code, exc.message(), exc.field())
    return None


def _with_length(request: HttpRequest) -> HttpResponse | None:
    """Give a chunked body its Content-Length, so that every size limit and every reader
    (DRF reads nothing without one) sees it; 411 where the body cannot be read."""
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    if not chunked or request.META.get("CONTENT_LENGTH"):
        return None
    size = _buffered_length(request)
    if size is None:
        return _error(request, 411, "length_required", LENGTH_REQUIRED)
    request.META["CONTENT_LENGTH"] = str(size)
    return None


def _refusal(request: HttpRequest) -> HttpResponse | None:
    return _unstorable_text(request) or _with_length(request)


@sync_and_async_middleware
def malformed_request_middleware(
    get_response: Callable[[HttpRequest], Any],
) -> Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]:
    """Refuses what no view can serve, before any view runs: text the database cannot
    store in the path or the query string (400). A body sent with `Transfer-Encoding:
    chunked` used to be read as empty (a 3 MB upload stored as 0 bytes with a 201): it is
    now read whole (ASGI, within the usual limits) or refused with 411 (WSGI)."""
    if iscoroutinefunction(get_response):

        async def middleware(request: HttpRequest) -> HttpResponse:
            return _refusal(request) or await get_response(request)

        return middleware

    def sync_middleware(request: HttpRequest) -> HttpResponse:
        return _refusal(request) or get_response(request)

    return sync_middleware


def django_middleware_in_one_hop() -> None:
    """Have the ASGI handler run the middleware of `settings.MIDDLEWARE` that are Django's
    `MiddlewareMixin` adapters as one synchronous chain (call before the handler is built).

    Such a middleware says it can run both ways, so under ASGI Django keeps the chain
    asynchronous and the adapter hops to the request's thread for each `process_request`
    and `process_response`: 13 hops per request here, of 19 in all, for methods that run on
    that thread anyway. Marked synchronous, the run of them is entered and left once.
    `GET /api/sessions/` in process on PostgreSQL: 8.1-9.6 -> 4.1-5.9 ms of CPU per request
    (issue 23). Nothing else changes: the same methods run in the same order on the same
    thread, and the paths in `MIDDLEWARE` stay Django's (its deployment checks read them).
    """
    from django.conf import settings
    from django.utils.deprecation import MiddlewareMixin
    from django.utils.module_loading import import_string

    for path in settings.MIDDLEWARE:
        middleware = import_string(path)
        if isinstance(middleware, type) and issubclass(middleware, MiddlewareMixin):
            middleware.async_capable = False
