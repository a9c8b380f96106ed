"""In-memory SessionService: the reference implementation of the contract."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessions_app.core.events import Event, new_id, utcnow
from sessions_app.core.session import (
    APP_PREFIX,
    USER_PREFIX,
    Session,
    SessionKey,
    SessionNotFoundError,
    Summary,
    scope_keys,
    select_summary,
    session_scope_keys,
    split_state,
    state_view,
)


@dataclass(kw_only=True)
class _Stored:
    session: Session
    """The session with its own state only; reads merge the app's and the user's."""
    events: list[Event] = field(default_factory=list)
    ids: dict[str, Event] = field(default_factory=dict)


class InMemorySessionService:
    """Keeps every session in a dict. For tests and single-process use."""

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], _Stored] = {}
        self._app_states: dict[str, dict[str, Any]] = {}
        self._user_states: dict[tuple[str, str], dict[str, Any]] = {}
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
        initial = split_state(copy.deepcopy(dict(state or {})))
        session = Session(
            app=app,
            user_id=user_id,
            id=session_id,
            agent=agent,
            title=title,
            state=initial.session,
            created_at=now,
            updated_at=now,
        )
        self._sessions[(app, session_id)] = _Stored(session=session)
        self._merge_scopes(app, user_id, initial.app, initial.user)
        return self._copy(session, [])

    def _merge_scopes(
        self, app: str, user_id: str, app_delta: Mapping[str, Any], user_delta: Mapping[str, Any]
    ) -> None:
        if app_delta:
            self._app_states.setdefault(app, {}).update(copy.deepcopy(dict(app_delta)))
        if user_delta:
            self._user_states.setdefault((app, user_id), {}).update(copy.deepcopy(dict(user_delta)))

    def _copy(self, session: Session, events: list[Event], *, view: bool = True) -> Session:
        clone = copy.copy(session)
        clone.state = copy.deepcopy(
            state_view(
                session.state,
                app_state=self._app_states.get(session.app) if view else None,
                user_state=self._user_states.get((session.app, session.user_id)) if view else None,
            )
        )
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
            self._copy(s.session, [], view=False)
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
                scoped = split_state(copy.deepcopy(dict(event.state_delta)))
                stored.session.state.update(scoped.session)
                self._merge_scopes(stored.session.app, stored.session.user_id, scoped.app, scoped.user)
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

    # -- state scopes ---------------------------------------------------------------------

    async def update_session_state(self, key: SessionKey, state: Mapping[str, Any]) -> None:
        changes = session_scope_keys(state)
        async with self._lock:
            stored = self._find(key)
            if stored is None:
                raise SessionNotFoundError(f"session {key.session_id!r} not found")
            stored.session.state.update(copy.deepcopy(changes))
            stored.session.updated_at = utcnow()

    async def initialize_session_state(self, key: SessionKey, *, state_key: str, value: Any) -> tuple[Any, bool]:
        session_scope_keys({state_key: value})
        async with self._lock:
            stored = self._find(key)
            if stored is None:
                raise SessionNotFoundError(f"session {key.session_id!r} not found")
            if state_key in stored.session.state:
                return copy.deepcopy(stored.session.state[state_key]), False
            stored.session.state[state_key] = copy.deepcopy(value)
            stored.session.updated_at = utcnow()
            return copy.deepcopy(value), True

    async def update_app_state(self, *, app: str, state: Mapping[str, Any]) -> None:
        changes = scope_keys(state, scope="app")
        _require(app=app)
        self._merge_scopes(app, "", changes, {})

    async def list_app_states(self, *, app: str) -> dict[str, Any]:
        _require(app=app)
        return copy.deepcopy(self._app_states.get(app, {}))

    async def delete_app_state(self, *, app: str, key: str) -> None:
        _require(app=app)
        self._app_states.get(app, {}).pop(key.removeprefix(APP_PREFIX), None)

    async def update_user_state(self, *, app: str, user_id: str, state: Mapping[str, Any]) -> None:
        changes = scope_keys(state, scope="user")
        _require(app=app, user_id=user_id)
        self._merge_scopes(app, user_id, {}, changes)

    async def list_user_states(self, *, app: str, user_id: str) -> dict[str, Any]:
        _require(app=app, user_id=user_id)
        return copy.deepcopy(self._user_states.get((app, user_id), {}))

    async def delete_user_state(self, *, app: str, user_id: str, key: str) -> None:
        _require(app=app, user_id=user_id)
        self._user_states.get((app, user_id), {}).pop(key.removeprefix(USER_PREFIX), None)


def _require(**names: str) -> None:
    """SPEC 2.5: the app name and the user id are required."""
    for name, value in names.items():
        if not value:
            raise ValueError(f"{name} is required")


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
