"""In-memory SessionService: the reference implementation of the contract."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessions_app.core.events import Event, new_id, utcnow
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError, Summary, select_summary


@dataclass(kw_only=True)
class _Stored:
    session: Session
    events: list[Event] = field(default_factory=list)
    ids: dict[str, Event] = field(default_factory=dict)


class InMemorySessionService:
    """Keeps every session in a dict. For tests and single-process use."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], _Stored] = {}
        self._lock = asyncio.Lock()

    def _find(self, key: SessionKey) -> _Stored | None:
        stored = self._sessions.get((key.app, key.session_id))
        if stored is None or stored.session.user_id != key.user_id:
            return None
        return stored

    async def create_session(
        self,
        *,
        app: str,
        user_id: str,
        session_id: str | None = None,
        agent: str = "",
        title: str = "",
        state: Mapping[str, Any] | None = None,
    ) -> Session:
        session_id = session_id or new_id()
        SessionKey(app=app, user_id=user_id, session_id=session_id)
        if (app, session_id) in self._sessions:
            raise ValueError(f"session {session_id!r} already exists")
        now = utcnow()
        session = Session(
            app=app, user_id=user_id, id=session_id, agent=agent, title=title,
            state=dict(state or {}), created_at=now, updated_at=now,
        )
        self._sessions[(app, session_id)] = _Stored(session=session)
        return self._copy(session, [])

    @staticmethod
    def _copy(session: Session, events: list[Event]) -> Session:
        clone = copy.copy(session)
        clone.state = copy.deepcopy(session.state)
        clone.events = list(events)
        clone.summaries = dict(session.summaries)
        return clone

    async def get_session(
        self, key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
    ) -> Session | None:
        stored = self._find(key)
        if stored is None:
            return None
        events = stored.events
        if after_summary is not None:
            start = _turn_start(events, stored.session.summaries, after_summary)
            events = [e for e in events if (e.seq or 0) > start]
        events = events if event_limit is None else events[-event_limit:] if event_limit > 0 else []
        return self._copy(stored.session, events)

    async def get_session_head(self, key: SessionKey) -> Session | None:
        stored = self._find(key)
        return None if stored is None else self._copy(stored.session, [])

    async def list_sessions(self, *, app: str, user_id: str) -> list[Session]:
        found = [
            self._copy(s.session, [])
            for (a, _), s in self._sessions.items()
            if a == app and s.session.user_id == user_id
        ]
        return sorted(found, key=lambda s: s.updated_at, reverse=True)

    async def delete_session(self, key: SessionKey) -> bool:
        if self._find(key) is None:
            return False
        del self._sessions[(key.app, key.session_id)]
        return True

    async def append_event(self, session: Session, event: Event) -> Event:
        return (await self.append_events(session, [event]))[0]

    async def append_events(self, session: Session, events: Sequence[Event]) -> list[Event]:
        out: list[Event] = []
        async with self._lock:
            stored = self._find(session.key)
            if stored is None:
                raise SessionNotFoundError(f"session {session.id!r} not found")
            for event in events:
                existing = stored.ids.get(event.id)
                if existing is not None:
                    out.append(existing)
                    continue
                seq = stored.session.last_seq + 1
                saved = event.replace(seq=seq)
                stored.events.append(saved)
                stored.ids[saved.id] = saved
                stored.session.last_seq = seq
                stored.session.state.update(copy.deepcopy(dict(event.state_delta)))
                stored.session.updated_at = utcnow()
                session.events.append(saved)
                session.state.update(copy.deepcopy(dict(event.state_delta)))
                session.last_seq = seq
                session.updated_at = stored.session.updated_at
                out.append(saved)
        return out

    async def list_events(self, key: SessionKey, *, after_seq: int = 0, limit: int = 100) -> list[Event]:
        stored = self._find(key)
        if stored is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        return [e for e in stored.events if (e.seq or 0) > after_seq][:limit]

    async def get_summary(self, key: SessionKey, *, filter_key: str = "") -> Summary | None:
        stored = self._find(key)
        if stored is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        return stored.session.summaries.get(filter_key)

    async def put_summary(self, key: SessionKey, summary: Summary) -> None:
        stored = self._find(key)
        if stored is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        stored.session.summaries[summary.filter_key] = summary

    async def advance_summary(self, key: SessionKey, summary: Summary) -> Summary | None:
        if summary.boundary is None:
            raise ValueError("advance_summary needs a summary with a boundary")
        async with self._lock:
            stored = self._find(key)
            if stored is None:
                raise SessionNotFoundError(f"session {key.session_id!r} not found")
            current = stored.session.summaries.get(summary.filter_key)
            if current is not None and current.last_seq >= summary.boundary.last_seq:
                return None
            written = dataclasses.replace(summary, version=(current.version if current is not None else 0) + 1)
            stored.session.summaries[summary.filter_key] = written
            return written


def _turn_start(events: list[Event], summaries: Mapping[str, Summary], filter_key: str) -> int:
    """The seq after which a turn's window starts: the summary boundary, or just before the
    user message of the turn the boundary cuts, so that the turn keeps its anchor (0: load
    everything)."""
    chosen = select_summary(summaries, filter_key)
    if chosen is None or chosen.last_seq == 0:
        return 0
    boundary = chosen.last_seq
    following = next((e for e in events if (e.seq or 0) > boundary and e.role != "system"), None)
    if following is None or following.is_user_message:
        return boundary  # the boundary ends a turn: nothing to anchor
    for event in reversed(events):
        seq = event.seq or 0
        if seq <= boundary and event.is_user_message:
            return seq - 1
    return boundary
