"""View helpers shared by the APIs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse

from agentsite.threads import VIEW_EXECUTOR


def off_thread(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
    """Serve a synchronous view from a worker thread of its own.

    Under ASGI, Django runs every synchronous view on one shared thread. A view that waits
    for a run (`wait=true`, cancel) would hold that thread for the whole run and stall
    every other request; this wrapper gives it a pool thread instead.
    """

    @functools.wraps(view)
    async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return await sync_to_async(view, thread_sensitive=False, executor=VIEW_EXECUTOR)(request, *args, **kwargs)

    return wrapped
