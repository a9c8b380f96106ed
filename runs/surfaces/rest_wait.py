"""REST `wait` without a thread per run (issue 23, item 3).

`POST /api/runs/` with `wait: true` answers when the run ends. The view itself is DRF's,
synchronous, and runs on a view thread (`off_thread`) only while it validates the request
and starts the run; it then marks its response with the run to wait for and returns, so
the thread is free again. `awaiting_run` waits for that run on the event loop (the run
loop, under Daphne) and puts the ended run into the response before it is rendered. A
hundred clients waiting on their runs hold a hundred asyncio waiters and no thread; before,
each held one of the process's `AGENTSITE_VIEW_THREADS` (16) for its whole run and the
seventeenth queued behind them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from rest_framework.response import Response

from agentsite.api.views import off_thread
from agentsite.runtime import run_manager
from runs.core.records import RunRecord

# The attribute of an unrendered DRF response that names the run to wait for.
_AWAITED_RUN = "agentsite_awaited_run"


def wait_for_run(response: Response, run_id: str, render: Callable[[RunRecord], dict[str, Any]]) -> Response:
    """Mark `response` so that `awaiting_run` waits for `run_id` and replaces the response's
    data with `render(the run's newest record)` (the data it has is the run as started)."""
    setattr(response, _AWAITED_RUN, (run_id, render))
    return response


def awaiting_run(view: Callable[..., HttpResponse]) -> Callable[..., Any]:
    """`off_thread(view)`, then, when the view marked its response with `wait_for_run`, an
    asynchronous wait for that run of at most AGENTSITE_RUN_WAIT_TIMEOUT_S (a run still going
    after it is answered as it is then, as before)."""
    threaded = off_thread(view)

    @functools.wraps(view)
    async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = await threaded(request, *args, **kwargs)
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
