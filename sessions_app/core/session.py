"""Session, Summary and the SessionService contract."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sessions_app.core.events import Event, utcnow


@dataclass(frozen=True, kw_only=True)
class SessionKey:
    """Identifies a session: the app it belongs to, its owner and its id."""

    app: str
    user_id: str
    session_id: str

    def __post_init__(self) -> None:
        for name in ("app", "user_id", "session_id"):
            if not getattr(self, name):
                raise ValueError(f"SessionKey.{name} is required")


@dataclass(frozen=True, kw_only=True)
class SummaryBoundary:
    """Where a summary stops: events at or before `last_seq` are covered by its text."""

    cutoff_at: datetime
    last_event_id: str
    last_seq: int


@dataclass(frozen=True, kw_only=True)
class Summary:
    """A rolling summary of a session's events for one filter key (`""` = whole session)."""

    filter_key: str = ""
    text: str
    boundary: SummaryBoundary | None = None
    updated_at: datetime = field(default_factory=utcnow)
    version: int = 1


@dataclass(kw_only=True)
class Session:
    """A conversation and its ledger.

    `events` holds the events the service loaded (a recent window, never necessarily the
    whole ledger) plus those appended through this object since. `last_seq` is the seq of
    the newest event in the ledger, loaded or not.
    """

    app: str
    user_id: str
    id: str
    agent: str = ""
    title: str = ""
    state: dict[str, Any] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    summaries: dict[str, Summary] = field(default_factory=dict)
    last_seq: int = 0
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)

    @property
    def key(self) -> SessionKey:
        return SessionKey(app=self.app, user_id=self.user_id, session_id=self.id)


class SessionNotFoundError(LookupError):
    """The session does not exist for this app and user."""


@runtime_checkable
class SessionService(Protocol):
    """The event ledger. `append_event` is the only way events and state change."""

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
        """Create an empty session; a duplicate id for the same app raises `ValueError`."""
        ...

    async def get_session(self, key: SessionKey, *, event_limit: int | None = None) -> Session | None:
        """Load a session with at most `event_limit` of its newest events (all when None).

        Returns None when the session does not exist or belongs to another user.
        """
        ...

    async def list_sessions(self, *, app: str, user_id: str) -> list[Session]:
        """The user's sessions in the app, newest first, without events."""
        ...

    async def delete_session(self, key: SessionKey) -> bool:
        """Delete a session and its whole ledger; False when there was none."""
        ...

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append one event: assign the next seq, merge its state delta into the state.

        Appending an event id that is already in the ledger appends nothing and returns
        the stored event, so a retried append can never duplicate a step. Updates
        `session` in place (events, state, last_seq). Raises `SessionNotFoundError` when
        the session was deleted.
        """
        ...

    async def list_events(self, key: SessionKey, *, after_seq: int = 0, limit: int = 100) -> list[Event]:
        """Events with seq > `after_seq`, oldest first, at most `limit`."""
        ...

    async def get_summary(self, key: SessionKey, *, filter_key: str = "") -> Summary | None:
        """The stored summary for a filter key, if any."""
        ...

    async def put_summary(self, key: SessionKey, summary: Summary) -> None:
        """Store (replace) the summary for `summary.filter_key`."""
        ...
