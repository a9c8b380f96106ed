"""The session ledger page (DESIGN 5: `/sessions/<id>/`): every event of one session.

Only the owner sees it; anyone else gets the same 404 as for a session that does not
exist. Filtering by role, author and tool happens in the browser
(`static/agentsite/ledger.js`); pages of `LEDGER_PAGE` events keep large ledgers usable.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.dateparse import parse_datetime

from sessions_app import selectors
from sessions_app.apis import event_data

LEDGER_PAGE = 1000


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _pretty_arguments(arguments: Any) -> str:
    """Tool-call arguments arrive as the model's raw JSON text; show them indented when valid."""
    if isinstance(arguments, str):
        try:
            return _pretty(json.loads(arguments))
        except ValueError:
            return arguments
    return _pretty(arguments)


def ledger_row(data: dict[str, Any]) -> dict[str, Any]:
    """One event as the ledger table shows it (from the API's representation)."""
    calls = [
        {"id": c.get("id", ""), "name": c.get("name", ""), "arguments": _pretty_arguments(c.get("arguments", "{}"))}
        for c in data.get("tool_calls", [])
    ]
    tools = sorted({c["name"] for c in calls if c["name"]} | ({data["tool_name"]} if data.get("tool_name") else set()))
    return {
        **data,
        "created_at": parse_datetime(data["created_at"]),
        "tool_calls": calls,
        "tools": tools,
        "state_delta_pretty": _pretty(data["state_delta"]) if data.get("state_delta") else "",
        "error_pretty": _pretty(data["error"]) if data.get("error") else "",
    }


REDO_KINDS = ("regenerates", "edit_of")


def link_redone_turns(rows: list[dict[str, Any]], session: Any) -> None:
    """Link redone turns both ways (issue 21): a user message that `regenerates` or is an
    `edit_of` an earlier one gets `redo` (kind, seq, href of that one) and the earlier one
    `redone_by` (kind, seq of each later one on this page). A target on another page of
    the ledger is linked on the page that holds it."""
    seq_of = {row["id"]: row["seq"] for row in rows}
    by_seq = {row["seq"]: row for row in rows}
    for row in rows:
        row.setdefault("redone_by", [])
    for row in rows:
        kind = next((k for k in REDO_KINDS if row.get(k)), None)
        if kind is None:
            continue
        target_id = row[kind]
        seq = seq_of.get(target_id)
        if seq is not None:
            row["redo"] = {"kind": kind, "seq": seq, "href": f"#event-{seq}"}
            by_seq[seq]["redone_by"].append({"kind": kind, "seq": row["seq"]})
            continue
        target = selectors.session_event(session=session, event_id=target_id)
        if target is not None and target.seq is not None:
            row["redo"] = {
                "kind": kind,
                "seq": target.seq,
                "href": f"?after_seq={max(0, target.seq - 1)}#event-{target.seq}",
            }


@login_required
def session_ledger(request: HttpRequest, session_id: str) -> HttpResponse:
    session = selectors.session_get(user=request.user, session_id=session_id)
    if session is None:
        raise Http404("no such session")
    try:
        after_seq = max(0, int(request.GET.get("after_seq", "0")))
    except ValueError:
        after_seq = 0
    events, more = selectors.event_page(session=session, after_seq=after_seq, limit=LEDGER_PAGE)
    rows = [ledger_row(event_data(e)) for e in events]
    link_redone_turns(rows, session)
    return render(
        request,
        "sessions/ledger.html",
        {
            "session": session,
            "rows": rows,
            "after_seq": after_seq,
            "next_after_seq": rows[-1]["seq"] if more and rows else None,
            "roles": sorted({r["role"] for r in rows}),
            "authors": sorted({r["author"] for r in rows}),
            "tools": sorted({t for r in rows for t in r["tools"]}),
            "event_total": session.events.count(),
        },
    )
