"""DjangoRecallIndex: the RecallIndex contract on the ORM (SQLite or PostgreSQL).

Each method wraps one synchronous read of `sessions_app.search` in `db_call` (a worker
thread, as the session service does). How each database searches is told there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sessions_app import mapping, search
from sessions_app import models as orm
from sessions_app.backends import db_call
from sessions_app.core.events import Event
from sessions_app.core.recall import (
    RECALL_ROLES,
    SCAN_CAP,
    AnchorNotFoundError,
    EventRange,
    EventSearchRequest,
    EventWindow,
    SearchHit,
    recall_text,
)
from sessions_app.core.redo import opens_turn, superseded_spans
from sessions_app.core.session import SessionKey, Summary


def _event_id_at(key: SessionKey, seq: int) -> str | None:
    rows = (
        search._session_events(key)
        .filter(seq__gte=seq, role__in=RECALL_ROLES)
        .exclude(text="")
        .order_by("seq")
        .values_list("payload", "seq", "event_id")
    )
    for payload, row_seq, event_id in rows[:20]:
        if recall_text(mapping.event_from_values(payload, row_seq, event_id)) is not None:
            return str(event_id)
    return None


def _events_in_range(key: SessionKey, first_seq: int, last_seq: int, limit: int) -> EventRange:
    user = search._user_pk(key.user_id)
    ledger_last = (
        orm.Session.objects.filter(id=key.session_id, app=key.app, user_id=user if user is not None else -1)
        .values_list("last_seq", flat=True)
        .first()
    )
    if ledger_last is None:
        raise AnchorNotFoundError(f"session {key.session_id!r} not found")
    rows = (
        search._session_events(key)
        .filter(seq__gte=first_seq, seq__lte=last_seq, role__in=RECALL_ROLES)
        .exclude(text="")
        .order_by("seq")
        .values_list("payload", "seq", "event_id")
    )
    events: list[Event] = []
    # A persisted partial event is not recallable: read on past it until the page is full.
    for payload, seq, event_id in rows.iterator(chunk_size=max(1, limit)):
        event = mapping.event_from_values(payload, seq, event_id)
        if recall_text(event) is not None:
            events.append(event)
            if len(events) >= limit:
                break
    return EventRange(session_id=key.session_id, events=tuple(events), ledger_last_seq=ledger_last or 0)


def _superseded_spans(key: SessionKey) -> tuple[tuple[int, int], ...]:
    rows = (
        search._session_events(key)
        .filter(author="user", role="user")
        .order_by("seq")
        .values_list("payload", "seq", "event_id")
    )
    events = [mapping.event_from_values(payload, seq, event_id) for payload, seq, event_id in rows]
    return superseded_spans([(e, e.message) for e in events if e.message is not None and opens_turn(e, e.message)])


class DjangoRecallIndex:
    """Session recall over the event ledger tables; every read is scoped to one user."""

    async def search_events(self, request: EventSearchRequest) -> list[SearchHit]:
        return await db_call(search.search_events)(request)

    async def search_many(self, request: EventSearchRequest, queries: Sequence[str]) -> list[list[SearchHit]]:
        return await db_call(search.search_many)(request, list(queries))

    async def event_window(self, key: SessionKey, *, anchor_event_id: str, before: int, after: int) -> EventWindow:
        return await db_call(search.event_window)(key, anchor_event_id, before, after)

    async def event_id_at(self, key: SessionKey, seq: int) -> str | None:
        """The first recallable event at or after `seq` (a tool call resolves to its result)."""
        return await db_call(_event_id_at)(key, seq)

    async def events_in_range(self, key: SessionKey, *, first_seq: int, last_seq: int, limit: int) -> EventRange:
        """At most `limit` recallable events with seqs in the range, oldest first (C1)."""
        return await db_call(_events_in_range)(key, first_seq, last_seq, limit)

    async def find_tool_result(self, key: SessionKey, tool_call_id: str) -> Event | None:
        return await db_call(search.find_tool_result)(key, tool_call_id)

    async def find_tool_call(
        self, key: SessionKey, tool_call_id: str, *, before_seq: int | None = None
    ) -> Event | None:
        """The latest event (before `before_seq`) whose message made the call `tool_call_id`."""
        return await db_call(search.find_tool_call)(key, tool_call_id, before_seq)

    async def superseded_spans(self, key: SessionKey) -> tuple[tuple[int, int], ...]:
        """The seq ranges of the session's regenerated or edited turns (issue 21), read
        from its user messages only."""
        return await db_call(_superseded_spans)(key)

    async def summaries(self, key: SessionKey) -> Mapping[str, Summary]:
        return await db_call(search.summaries)(key)

    async def scan_events(
        self,
        key: SessionKey,
        *,
        needles: Sequence[str],
        through_seq: int | None = None,
        created_before: datetime | None = None,
        limit: int = SCAN_CAP,
    ) -> list[Event]:
        return await db_call(search.scan_events)(key, list(needles), through_seq, created_before, limit)
