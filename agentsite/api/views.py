"""View helpers shared by the APIs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern

from agentsite.threads import VIEW_EXECUTOR


def off_thread(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
    """Serve a synchronous view from a worker thread of the pool (`VIEW_EXECUTOR`).

    Under ASGI, Django runs each request's synchronous view on a thread made for that
    request (asgiref's per-request thread-sensitive context): a new thread, so a new
    database connection, opened and closed per request; PostgreSQL starts a backend for
    each (issue 23: 10.3 ms of the machine's CPU per `GET /api/sessions/<id>/events/`
    against 6.7 ms from a pool thread, whose connection is kept and checked). A view that
    waits for a run (cancel) holds a pool thread, never the request's. Under WSGI (the
    synchronous test client) the view runs on the request's own thread, as Django would.
    """

    @functools.wraps(view)
    async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if isinstance(request, ASGIRequest):
            return await sync_to_async(view, thread_sensitive=False, executor=VIEW_EXECUTOR)(request, *args, **kwargs)
        return await sync_to_async(view, thread_sensitive=True)(request, *args, **kwargs)

    return wrapped


def served_off_thread(patterns: list[URLPattern]) -> list[URLPattern]:
    """`patterns` with each synchronous view served by `off_thread` (asynchronous ones, and
    views already wrapped, are left as they are)."""
    for pattern in patterns:
        if not iscoroutinefunction(pattern.callback):
            pattern.callback = off_thread(pattern.callback)
    return patterns
