"""The run trace page (issue 21): a timeline of one run's execution trace (SPEC 1.9.3),
reachable from each answer in the chat. Rendered on the server from the stored trace, so
it needs no script; `GET /api/runs/<id>/trace/` serves the same data as JSON."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from agentsite.runtime import run_manager
from runs import selectors
from runs.core.agents.graph.diagram import agent_graph_shape
from sessions_app import selectors as session_selectors


def timeline_rows(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The spans in start order, each with its depth under the run and its bar's place
    (percent of the run's duration)."""
    spans = list(trace.get("spans") or [])
    total = float(trace.get("duration_ms") or 0.0) or 1.0
    depth: dict[str, int] = {}
    rows = []
    for span in spans:
        level = depth[span["id"]] = depth.get(span.get("parent") or "", -1) + 1
        start = float(span.get("start_ms") or 0.0)
        duration = span.get("duration_ms")
        rows.append(
            {
                **span,
                "depth": level,
                "indent": level * 16,
                "left": round(min(100.0, max(0.0, start / total * 100)), 2),
                "width": round(max(0.5, min(100.0, (duration or 0.0) / total * 100)), 2),
                "duration_label": "—" if duration is None else f"{duration:.0f} ms",
            }
        )
    return rows


@login_required
def run_trace_page(request: HttpRequest, run_id: str) -> HttpResponse:
    record = selectors.run_get(user=request.user, run_id=run_id)
    if record is None:
        raise Http404("no such run")
    trace = dict(record.trace) if record.trace else None
    # A graph agent's run also shows its graph (static/agentsite/trace-graph.js draws it from
    # the trace API); while the run goes on, the script follows the session's socket from
    # the ledger's end as it is now (node progress is never saved, so nothing before it).
    graph = agent_graph_shape(run_manager().runner.agents.get(record.agent)) is not None
    session = session_selectors.session_get(user=request.user, session_id=record.session_id) if graph else None
    return render(
        request,
        "runs/trace.html",
        {
            "run": record,
            "trace": trace,
            "rows": timeline_rows(trace) if trace else [],
            "graph": graph,
            "after_seq": session.last_seq if session is not None else 0,
        },
    )
