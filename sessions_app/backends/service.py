"""DjangoSessionService: the SessionService contract on the ORM.

Each async method wraps one synchronous, transactional function. They run in worker
threads (`thread_sensitive=False`): a run's loop must never wait on the one thread that
serves synchronous views, which may itself be waiting for the run.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from sessions_app.backends.db import db_call
from sessions_app.backends.ledger import JoinedWrite, _append, _list_events
from sessions_app.backends.reads import _create, _delete, _list, get_session_head_sync, get_session_sync
from sessions_app.backends.state import (
    _delete_app_state,
    _delete_user_state,
    _initialize_session_state,
    _list_app_states,
    _list_user_states,
    _update_app_state,
    _update_user_state,
    update_session_state_sync,
)
from sessions_app.backends.summaries import _advance_summary, _get_summary, _put_summary
from sessions_app.core.events import Event, new_id, utcnow
from sessions_app.core.session import Session, SessionKey, Summary


class DjangoSessionService:
    """SessionService on the Django ORM (SQLite or PostgreSQL)."""

    joins_writes = True
    """`append_events` takes `joined` writes (runs.backends.DjangoRunStore.joined_save)."""

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
        return await db_call(_create)(app, user_id, session_id, agent, title, dict(state or {}))

    async def get_session(
        self, key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
    ) -> Session | None:
        return await db_call(get_session_sync)(key, event_limit=event_limit, after_summary=after_summary)

    async def get_session_head(self, key: SessionKey, *, known: Mapping[str, Summary] | None = None) -> Session | None:
        """The session without events (`get_session_head_sync`); with `known`, its summaries
        are only those that differ from them."""
        return await db_call(get_session_head_sync)(key, known=known)

    reads_changed_summaries = True
    """`get_session_head` takes `known` (sessions_app.core.cache reads one row per turn)."""

    async def list_sessions(self, *, app: str, user_id: str) -> list[Session]:
        return await db_call(_list)(app, user_id)

    async def delete_session(self, key: SessionKey) -> bool:
        return await db_call(_delete)(key)

    async def append_event(self, session: Session, event: Event) -> Event:
        return (await self.append_events(session, [event]))[0]

    async def append_events(
        self, session: Session, events: Sequence[Event], *, joined: Sequence[JoinedWrite] = ()
    ) -> list[Event]:
        """Append `events` in one transaction; `joined` statements commit with them (issue 18)."""
        if not events:
            return []
        results = await db_call(_append)(session.key, list(events), list(joined))
        for saved, created in results:
            if created:
                session.events.append(saved)
                session.state.update(copy.deepcopy(dict(saved.state_delta)))
                session.last_seq = max(session.last_seq, saved.seq or 0)
        if any(created for _, created in results):
            session.updated_at = utcnow()
        return [saved for saved, _ in results]

    async def list_events(self, key: SessionKey, *, after_seq: int = 0, limit: int = 100) -> list[Event]:
        return await db_call(_list_events)(key, after_seq, limit)

    async def get_summary(self, key: SessionKey, *, filter_key: str = "") -> Summary | None:
        return await db_call(_get_summary)(key, filter_key)

    async def put_summary(self, key: SessionKey, summary: Summary) -> None:
        await db_call(_put_summary)(key, summary)

    async def advance_summary(self, key: SessionKey, summary: Summary) -> Summary | None:
        return await db_call(_advance_summary)(key, summary)

    async def update_session_state(self, key: SessionKey, state: Mapping[str, Any]) -> None:
        await db_call(update_session_state_sync)(key, dict(state))

    async def initialize_session_state(self, key: SessionKey, *, state_key: str, value: Any) -> tuple[Any, bool]:
        return await db_call(_initialize_session_state)(key, state_key, value)

    async def update_app_state(self, *, app: str, state: Mapping[str, Any]) -> None:
        await db_call(_update_app_state)(app, dict(state))

    async def list_app_states(self, *, app: str) -> dict[str, Any]:
        return await db_call(_list_app_states)(app)

    async def delete_app_state(self, *, app: str, key: str) -> None:
        await db_call(_delete_app_state)(app, key)

    async def update_user_state(self, *, app: str, user_id: str, state: Mapping[str, Any]) -> None:
        await db_call(_update_user_state)(app, user_id, dict(state))

    async def list_user_states(self, *, app: str, user_id: str) -> dict[str, Any]:
        return await db_call(_list_user_states)(app, user_id)

    async def delete_user_state(self, *, app: str, user_id: str, key: str) -> None:
        await db_call(_delete_user_state)(app, user_id, key)
