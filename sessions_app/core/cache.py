"""A session kept in memory between the runs of one process, the ledger still the truth.

Issue 18 (a cheap hot path): loading a session's window for every turn read the same
events again and again (the window after the summary grows until the next summary), and a
summary job read them once more. `CachedSessionService` wraps a `SessionService` and keeps,
per session, the events this process loaded or appended. Every read starts with the
session's head (its row and its summaries, one statement in the Django backend): when the
stored `last_seq` is the one the cache knows, the window is cut from memory; when another
process appended since, only the new events are read; anything the cache cannot vouch for
is loaded as before. Writes go through to the wrapped service.

Events are immutable, so the cached ones are handed out as they are (memoized token counts
keyed by event stay valid across runs); the list and the state are copies, so one run's
appends never show up in another run's session object.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sessions_app.core.events import Event
from sessions_app.core.session import Session, SessionKey, SessionNotFoundError, SessionService, Summary, select_summary

DEFAULT_MAX_SESSIONS = 256
# Events another process appended that are read on their own; beyond, the window is loaded.
MAX_CATCH_UP_EVENTS = 200


@runtime_checkable
class HeadSessionService(SessionService, Protocol):
    """A `SessionService` that can read a session's head cheaply."""

    async def get_session_head(self, key: SessionKey) -> Session | None:
        """The session without events: its fields, state, `last_seq` and summaries (as
        `get_session` returns them); None when it does not exist for this user."""
        ...


@dataclass(kw_only=True)
class _Entry:
    created_at: datetime
    last_seq: int
    events: list[Event] = field(default_factory=list)
    """Every event of the ledger with seq in (`first_seq` - 1, `last_seq`], oldest first."""
    summaries: dict[str, Summary] | None = None
    """The session's summaries as last read or written here (None: not known): a head read
    asks only for those that differ (`reads_changed_summaries`)."""

    @property
    def first_seq(self) -> int:
        return (self.events[0].seq or 0) if self.events else self.last_seq + 1

    def covers(self, after_seq: int) -> bool:
        """Whether every event with seq > `after_seq` is here."""
        return self.first_seq <= after_seq + 1

    def extend(self, events: Sequence[Event]) -> bool:
        """Add events past `last_seq`; False when one would leave a gap (the entry is then
        of no use)."""
        for event in events:
            seq = event.seq or 0
            if seq <= self.last_seq:
                continue  # already here (a retried append answered with the stored event)
            if seq != self.last_seq + 1:
                return False
            self.events.append(event)
            self.last_seq = seq
        return True


def turn_start(
    events: Sequence[Event], summaries: Mapping[str, Summary], filter_key: str, *, first_seq: int = 1
) -> int | None:
    """The seq after which a turn's window starts (`SessionService.get_session` with
    `after_summary`): the summary boundary, or just before the user message of the turn the
    boundary cuts. `events` are every event of the ledger from `first_seq` on; None when
    they cannot tell."""
    chosen = select_summary(summaries, filter_key)
    if chosen is None or chosen.last_seq == 0:
        return 0
    boundary = chosen.last_seq
    if boundary + 1 < first_seq:
        return None  # the event after the boundary is not among them
    following = next((e for e in events if (e.seq or 0) > boundary and e.role != "system"), None)
    if following is None or following.role == "user":
        return boundary  # the boundary ends a turn (or nothing follows it): nothing to anchor
    for event in reversed(events):
        seq = event.seq or 0
        if seq <= boundary and event.role == "user":
            return seq - 1
    return None


class CachedSessionService:
    """A `SessionService` over another one, keeping recently used sessions in memory.

    The wrapped service must offer `get_session_head`. At most `max_sessions` sessions are
    kept (least recently used first out); each keeps the events of its last window and
    those appended since, cut back to the window whenever it is served.
    """

    def __init__(self, inner: HeadSessionService, *, max_sessions: int = DEFAULT_MAX_SESSIONS) -> None:
        self.inner = inner
        self.max_sessions = max_sessions
        self._entries: OrderedDict[SessionKey, _Entry] = OrderedDict()

    # -- reads ----------------------------------------------------------------------------

    async def _head(self, key: SessionKey) -> Session | None:
        """The session's head (`get_session_head`). When the entry knows the summaries and
        the wrapped service can, only the summaries that changed are read (issue 18: one
        row per head, not one per filter key) and merged into the known ones."""
        entry = self._entries.get(key)
        known = entry.summaries if entry is not None else None
        if known is None or not getattr(self.inner, "reads_changed_summaries", False):
            head = await self.inner.get_session_head(key)
        else:
            head = await self.inner.get_session_head(key, known=known)  # type: ignore[call-arg]  # reads_changed_summaries
            if head is not None and entry is not None and head.created_at == entry.created_at:
                head.summaries = {**known, **head.summaries}
            elif head is not None:
                head = await self.inner.get_session_head(key)  # another session under the same id
        if head is not None and entry is not None and head.created_at == entry.created_at:
            entry.summaries = dict(head.summaries)
        return head

    async def _current(self, key: SessionKey) -> tuple[Session | None, _Entry | None]:
        """The session's head, and its entry brought up to the stored `last_seq` (None when
        there is none or it cannot be)."""
        head = await self._head(key)
        if head is None:
            self._entries.pop(key, None)
            return None, None
        entry = self._entries.get(key)
        if entry is None or entry.created_at != head.created_at:
            self._entries.pop(key, None)
            return head, None
        if entry.last_seq > head.last_seq:
            # The head was read before an append of this process committed (a summary job
            # reading while its run writes): the entry is ahead, not wrong. Kept; the caller
            # decides whether events past the head will do.
            return head, entry
        if entry.last_seq < head.last_seq:
            # Another process (or a write this wrapper did not see) appended: read those only.
            missing = head.last_seq - entry.last_seq
            if missing > MAX_CATCH_UP_EVENTS:
                self._entries.pop(key, None)
                return head, None
            new = await self.inner.list_events(key, after_seq=entry.last_seq, limit=missing)
            if len(new) != missing or not entry.extend(new):
                self._entries.pop(key, None)
                return head, None
        self._entries.move_to_end(key)
        return head, entry

    def _remember(self, key: SessionKey, session: Session) -> None:
        """Keep a freshly loaded session's events: a window is every event from its first
        on, up to `last_seq`."""
        events = list(session.events)
        if events and (events[-1].seq or 0) != session.last_seq:
            return
        self._entries[key] = _Entry(
            created_at=session.created_at, last_seq=session.last_seq, events=events, summaries=dict(session.summaries)
        )
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_sessions:
            self._entries.popitem(last=False)

    async def get_session(
        self, key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
    ) -> Session | None:
        if key not in self._entries:
            # Nothing kept to vouch for: a head read would only say "load the window", and
            # the window brings its own head. One read, not two (issue 23: a session's first
            # run in this process read both).
            return await self._load(key, event_limit=event_limit, after_summary=after_summary)
        head, entry = await self._current(key)
        if head is None:
            return None
        if entry is not None and entry.last_seq == head.last_seq:
            found = _window(entry, head.summaries, event_limit=event_limit, after_summary=after_summary)
            if found is not None:
                start, window = found
                # Drop what lies before the turn's start: the entry never grows past a window.
                if start >= entry.first_seq:
                    entry.events = [e for e in entry.events if (e.seq or 0) > start]
                head.events = window
                return head
        return await self._load(key, event_limit=event_limit, after_summary=after_summary, kept=entry)

    async def _load(
        self, key: SessionKey, *, event_limit: int | None, after_summary: str | None, kept: _Entry | None = None
    ) -> Session | None:
        """The window from the wrapped service, kept unless `kept` (the entry) is ahead of it."""
        session = await self.inner.get_session(key, event_limit=event_limit, after_summary=after_summary)
        if session is None:
            self._entries.pop(key, None)
            return None
        if kept is None or kept.last_seq <= session.last_seq:
            self._remember(key, session)
        return session

    async def get_session_head(self, key: SessionKey) -> Session | None:
        return await self.inner.get_session_head(key)

    async def list_events(self, key: SessionKey, *, after_seq: int = 0, limit: int = 100) -> list[Event]:
        head, entry = await self._current(key)
        if head is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        if entry is not None and entry.covers(after_seq):
            # Events past the head (an append that committed since it was read) are in the
            # ledger too.
            return [e for e in entry.events if (e.seq or 0) > after_seq][:limit]
        return await self.inner.list_events(key, after_seq=after_seq, limit=limit)

    async def get_summary(self, key: SessionKey, *, filter_key: str = "") -> Summary | None:
        head = await self._head(key)
        if head is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        return head.summaries.get(filter_key)

    async def list_sessions(self, *, app: str, user_id: str) -> list[Session]:
        return await self.inner.list_sessions(app=app, user_id=user_id)

    # -- writes ---------------------------------------------------------------------------

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
        session = await self.inner.create_session(
            app=app, user_id=user_id, session_id=session_id, agent=agent, title=title, state=state
        )
        self._remember(session.key, session)
        return session

    async def delete_session(self, key: SessionKey) -> bool:
        self._entries.pop(key, None)
        return await self.inner.delete_session(key)

    async def append_event(self, session: Session, event: Event) -> Event:
        return (await self.append_events(session, [event]))[0]

    @property
    def joins_writes(self) -> bool:
        """Whether `append_events` takes `joined` writes: when the wrapped service does."""
        return bool(getattr(self.inner, "joins_writes", False))

    async def append_events(
        self, session: Session, events: Sequence[Event], *, joined: Sequence[Any] = ()
    ) -> list[Event]:
        """Append through the wrapped service (with its `joined` writes, when it takes them)
        and keep the saved events."""
        key = session.key
        try:
            if joined:
                saved = await self.inner.append_events(session, events, joined=joined)  # type: ignore[call-arg]  # only when joins_writes
            else:
                saved = await self.inner.append_events(session, events)
        except BaseException:
            self._entries.pop(key, None)  # whatever happened, the next read checks the ledger
            raise
        entry = self._entries.get(key)
        if entry is not None and not entry.extend(saved):
            # Someone else appended in between: the entry has a gap, the next read reloads.
            self._entries.pop(key, None)
        return saved

    async def put_summary(self, key: SessionKey, summary: Summary) -> None:
        await self.inner.put_summary(key, summary)
        entry = self._entries.get(key)
        if entry is not None and entry.summaries is not None:
            entry.summaries.pop(summary.filter_key, None)  # the next head reads it as stored

    async def advance_summary(self, key: SessionKey, summary: Summary) -> Summary | None:
        advanced = await self.inner.advance_summary(key, summary)
        entry = self._entries.get(key)
        if advanced is not None and entry is not None and entry.summaries is not None:
            # As stored by this write: the next head need not read it again.
            entry.summaries[advanced.filter_key] = advanced
        return advanced

    # -- state scopes: nothing of them is kept here. Every read starts with the head, whose
    # state view carries the app's and the user's state as stored, so a write by any process
    # shows at the next read. ----------------------------------------------------------------

    async def update_session_state(self, key: SessionKey, state: Mapping[str, Any]) -> None:
        await self.inner.update_session_state(key, state)

    async def initialize_session_state(self, key: SessionKey, *, state_key: str, value: Any) -> tuple[Any, bool]:
        return await self.inner.initialize_session_state(key, state_key=state_key, value=value)

    async def update_app_state(self, *, app: str, state: Mapping[str, Any]) -> None:
        await self.inner.update_app_state(app=app, state=state)

    async def list_app_states(self, *, app: str) -> dict[str, Any]:
        return await self.inner.list_app_states(app=app)

    async def delete_app_state(self, *, app: str, key: str) -> None:
        await self.inner.delete_app_state(app=app, key=key)

    async def update_user_state(self, *, app: str, user_id: str, state: Mapping[str, Any]) -> None:
        await self.inner.update_user_state(app=app, user_id=user_id, state=state)

    async def list_user_states(self, *, app: str, user_id: str) -> dict[str, Any]:
        return await self.inner.list_user_states(app=app, user_id=user_id)

    async def delete_user_state(self, *, app: str, user_id: str, key: str) -> None:
        await self.inner.delete_user_state(app=app, user_id=user_id, key=key)


def _window(
    entry: _Entry, summaries: Mapping[str, Summary], *, event_limit: int | None, after_summary: str | None
) -> tuple[int, list[Event]] | None:
    """The seq after which the window starts and the events `get_session` would load, cut
    from the entry; None when it lacks some."""
    start = 0
    if after_summary is not None:
        found = turn_start(entry.events, summaries, after_summary, first_seq=entry.first_seq)
        if found is None:
            return None
        start = found
    after = [e for e in entry.events if (e.seq or 0) > start]
    if event_limit is not None:
        if event_limit <= 0:
            return start, []
        if len(after) >= event_limit:
            return start, after[-event_limit:]
    if not entry.covers(start):
        return None
    return start, after
