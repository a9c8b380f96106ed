"""REST `wait` without a thread per run (issue 23, item 3).

`POST /api/runs/` with `wait: true` answers when the run ends. The view itself is DRF's,
synchronous, and runs on a view thread (`off_thread`) only while it validates the request
and starts the run; it then marks its response with the run to wait for and returns, so
the thread is free again. `awaiting_run` waits for that run on the event loop (the run
loop, under Daphne) and puts the ended run into the response before it is rendered. A
hundred clients waiting on their runs hold a hundred asyncio waiters and no thread; before,
each held one of the process's `AGENTSITE_VIEW_THREADS` (16) for its whole run and the
seventeenth queued behind them.

The start is on the event loop too (`start_then`): a run's start may wait for a place in the
runner's setup gate (runs/core/pacing.py), and a view thread held through that wait kept
every other synchronous request (creating a session, reading a ledger) queued behind the
burst (bench/load.py --stack, 200 users: REST turns p50 17.6 s against 5.9 s for websocket
turns, which start on the loop). A start's refusal is answered as the view would have
answered it, through the API's exception handler.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from rest_framework.response import Response

from agentsite.api.views import off_thread
from agentsite.errors import exception_handler
from agentsite.runtime import run_manager
from runs.core.records import RunRecord
from runs.core.runner import Runner

# The attributes of an unrendered DRF response that name the run to wait for, and the start
# to make on the event loop.
_AWAITED_RUN = "agentsite_awaited_run"
_PENDING_START = "agentsite_pending_start"

Start = Callable[[Runner], Awaitable[RunRecord]]


def wait_for_run(response: Response, run_id: str, render: Callable[[RunRecord], dict[str, Any]]) -> Response:
    """Mark `response` so that `awaiting_run` waits for `run_id` and replaces the response's
    data with `render(the run's newest record)` (the data it has is the run as started)."""
    setattr(response, _AWAITED_RUN, (run_id, render))
    return response


def start_then(
    response: Response, start: Start, render: Callable[[RunRecord], dict[str, Any]], *, wait: bool
) -> Response:
    """Mark `response` so that `awaiting_run` makes `start(runner)` on the event loop, puts
    `render(the started run)` in it and, with `wait`, then waits for the run as
    `wait_for_run` does. The view returns at once: its thread does not wait for the start."""
    setattr(response, _PENDING_START, (start, render, wait))
    return response


async def _started(request: HttpRequest, response: Response) -> Response:
    """The marked start made: its run in `response`, or its refusal as the view's error."""
    start, render, wait = getattr(response, _PENDING_START)
    try:
        record = await run_manager().acall(start)
    except Exception as exc:
        refused = exception_handler(exc, {"request": request, "view": None})
        if refused is None:
            raise
        response.status_code = refused.status_code
        response.data = refused.data
        for header, value in refused.items():
            response[header] = value
        return response
    response.data = render(record)
    if wait:
        wait_for_run(response, record.id, render)
    return response


def awaiting_run(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
    """`off_thread(view)`, then, when the view marked its response with `wait_for_run`, an
    asynchronous wait for that run of at most AGENTSITE_RUN_WAIT_TIMEOUT_S (a run still going
    after it is answered as it is then, as before)."""
    threaded = off_thread(view)

    @functools.wraps(view)
    async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = await threaded(request, *args, **kwargs)
        if isinstance(response, Response) and hasattr(response, _PENDING_START):
            response = await _started(request, response)
        awaited = getattr(response, _AWAITED_RUN, None)
        if awaited is None or not isinstance(response, Response):
            return response
        run_id, render = awaited
        record = await run_manager().await_run(run_id, settings.AGENTSITE_RUN_WAIT_TIMEOUT_S)
        if record is not None:
            # Not rendered yet: Django renders a DRF response after the view returns.
            response.data = render(record)
        return response

    return wrapped
