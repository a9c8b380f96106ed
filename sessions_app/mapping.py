"""ORM rows <-> core value objects, in one place."""

from __future__ import annotations

from typing import Any

from sessions_app import models as orm
from sessions_app.core.events import Event
from sessions_app.core.session import Session, Summary, SummaryBoundary


def session_from_row(row: orm.Session, events: list[Event] | None = None) -> Session:
    return Session(
        app=row.app,
        user_id=str(row.user_id),
        id=row.id,
        agent=row.agent,
        title=row.title,
        state=dict(row.state or {}),
        events=events or [],
        last_seq=row.last_seq,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def event_from_row(row: orm.Event) -> Event:
    return event_from_values(row.payload, row.seq, row.event_id)


def event_from_values(payload: dict[str, Any], seq: int, event_id: str) -> Event:
    return Event.from_dict({**payload, "seq": seq, "id": event_id})


def event_row_values(event: Event, *, session_id: str, seq: int, tokens: int) -> dict[str, Any]:
    """A ledger row's field values by attribute name (`event_to_row`'s, without building
    the model instance: issue 23, the one-statement append sends them as JSON)."""
    return {
        "session_id": session_id,
        "seq": seq,
        "event_id": event.id,
        "invocation_id": event.invocation_id,
        "request_id": event.request_id,
        "author": event.author,
        "branch": event.branch,
        "filter_key": event.filter_key,
        "object": event.object,
        "role": event.role,
        "text": event.text,
        "payload": event.replace(seq=seq).to_dict(),
        "has_state_delta": bool(event.state_delta),
        "tokens": tokens,
        "created_at": event.created_at,
    }


def event_to_row(event: Event, *, session_id: str, seq: int, tokens: int) -> orm.Event:
    return orm.Event(**event_row_values(event, session_id=session_id, seq=seq, tokens=tokens))


def summary_from_row(row: orm.Summary) -> Summary:
    boundary = None
    if row.cutoff_at is not None:
        boundary = SummaryBoundary(cutoff_at=row.cutoff_at, last_event_id=row.last_event_id, last_seq=row.last_seq)
    return Summary(
        filter_key=row.filter_key,
        text=row.text,
        boundary=boundary,
        updated_at=row.updated_at,
        version=row.version,
        covered_events=row.covered_events,
        covered_tokens=row.covered_tokens,
    )


def summary_fields(summary: Summary) -> dict[str, Any]:
    """The columns a summary write sets (text and boundary always together)."""
    boundary = summary.boundary
    return {
        "text": summary.text,
        "cutoff_at": boundary.cutoff_at if boundary else None,
        "last_event_id": boundary.last_event_id if boundary else "",
        "last_seq": boundary.last_seq if boundary else 0,
        "updated_at": summary.updated_at,
        "covered_events": summary.covered_events,
        "covered_tokens": summary.covered_tokens,
    }
