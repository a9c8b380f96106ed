"""Session, Summary and the SessionService contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from sessions_app.core.events import Event, utcnow

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# State scopes (SPEC 2.1). A key's prefix says where it lives: `app:` keys are shared by
# every user of the app, `user:` keys by every session of one user, the rest (`temp:`
# included) belong to the session. `temp:` keys stay in the session's state as the
# reference keeps them: the skill tools' session-mode loads read them back on later turns.
APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"


class StateKeyError(ValueError):
    """A state key the operation does not take (a scope prefix where it does not belong)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True, kw_only=True)
class ScopedState:
    """A state mapping split by scope; `app` and `user` keys without their prefix."""

    session: dict[str, Any] = field(default_factory=dict)
    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)


def split_state(state: Mapping[str, Any]) -> ScopedState:
    """Split a state delta (or an initial state) into its session, app and user parts."""
    scoped = ScopedState()
    for key, value in state.items():
        if key.startswith(APP_PREFIX):
            scoped.app[key[len(APP_PREFIX) :]] = value
        elif key.startswith(USER_PREFIX):
            scoped.user[key[len(USER_PREFIX) :]] = value
        else:
            scoped.session[key] = value
    return scoped


def state_view(
    session_state: Mapping[str, Any], *, app_state: Mapping[str, Any] | None, user_state: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The state an invocation sees (SPEC 2.1): the session's keys, the app's keys as
    `app:<key>` and the user's as `user:<key>`. A scoped key wins over a session key of the
    same name (one written before the scopes existed)."""
    view = dict(session_state)
    for key, value in (app_state or {}).items():
        view[APP_PREFIX + key] = value
    for key, value in (user_state or {}).items():
        view[USER_PREFIX + key] = value
    return view


def scope_keys(state: Mapping[str, Any], *, scope: str) -> dict[str, Any]:
    """Check the keys given to an app (`scope="app"`) or user (`"user"`) state update and
    strip their optional prefix. Keys of another scope, `temp:` keys and empty keys raise
    `StateKeyError`."""
    own, other = (APP_PREFIX, USER_PREFIX) if scope == "app" else (USER_PREFIX, APP_PREFIX)
    out: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(other) or key.startswith(TEMP_PREFIX):
            raise StateKeyError(key, f"state key {key!r} does not belong to the {scope} scope")
        bare = key.removeprefix(own)
        if not bare:
            raise StateKeyError(key, f"state key {key!r} is empty")
        out[bare] = value
    return out


def session_scope_keys(state: Mapping[str, Any]) -> dict[str, Any]:
    """Check the keys of `update_session_state` (SPEC 2.1: it refuses `app:` and `user:`
    keys, which have their own operations)."""
    for key in state:
        if key.startswith(APP_PREFIX):
            raise StateKeyError(key, f"state key {key!r} is app-scoped: use update_app_state")
        if key.startswith(USER_PREFIX):
            raise StateKeyError(key, f"state key {key!r} is user-scoped: use update_user_state")
        if not key:
            raise StateKeyError(key, "a state key is empty")
    return dict(state)


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
    """A rolling summary of a session's events for one filter key (`""` = whole session).

    `text` and `boundary` always move together (SPEC 2.4, 3.3): the text covers exactly the
    events at or before `boundary.last_seq` that match `filter_key`. `version` counts the
    writes that advanced it; `covered_events` / `covered_tokens` say how much raw ledger it
    stands for (the inspector's "raw" line without reading the ledger).
    """

    filter_key: str = ""
    text: str
    boundary: SummaryBoundary | None = None
    updated_at: datetime = field(default_factory=utcnow)
    version: int = 1
    covered_events: int = 0
    covered_tokens: int = 0

    def covers(self, event: Event) -> bool:
        """Whether `event` lies at or before the boundary (SPEC 4.5 rule 4).

        With a boundary, by seq; a legacy summary without one covers what was created
        before it was written (SPEC 2.4 `CutoffBoundary`).
        """
        if self.boundary is not None:
            return event.seq is not None and event.seq <= self.boundary.last_seq
        return event.created_at < self.updated_at

    @property
    def last_seq(self) -> int:
        return self.boundary.last_seq if self.boundary is not None else 0


def summary_key_matches(summary_key: str, filter_key: str) -> bool:
    """SPEC 2.3: a summary key applies to a filter key when it equals it or is a `/`-path
    prefix of it; the full-session key `""` applies to every filter key."""
    return not summary_key or filter_key == summary_key or filter_key.startswith(summary_key + "/")


def select_summary(summaries: Mapping[str, Summary], filter_key: str) -> Summary | None:
    """The summary a projection for `filter_key` shows (SPEC 4.4).

    The exact key's summary when it has text; otherwise the summaries of every key that
    prefixes `filter_key` (the full session `""` included), joined in key order, with the
    *earliest* boundary among them so that no event is hidden that one of them does not
    cover. None when there is nothing to show.
    """
    exact = summaries.get(filter_key)
    if exact is not None and exact.text:
        return exact
    matched = [s for k, s in sorted(summaries.items()) if s.text and summary_key_matches(k, filter_key)]
    if not matched:
        return None
    if len(matched) == 1:
        return matched[0]
    texts = list(dict.fromkeys(s.text for s in matched))
    earliest = min(matched, key=lambda s: s.last_seq)
    # An aggregate has no single last event (SPEC 2.4): it keeps the earliest seq and no id;
    # one member without a boundary makes it cover nothing (all raw history stays visible).
    unbounded = any(s.boundary is None for s in matched)
    boundary = SummaryBoundary(
        cutoff_at=earliest.boundary.cutoff_at if earliest.boundary is not None and not unbounded else _EPOCH,
        last_event_id="",
        last_seq=0 if unbounded else earliest.last_seq,
    )
    return Summary(
        filter_key=filter_key,
        text="\n\n".join(texts),
        boundary=boundary,
        updated_at=min(s.updated_at for s in matched),
        version=max(s.version for s in matched),
        covered_events=0 if unbounded else earliest.covered_events,
        covered_tokens=0 if unbounded else earliest.covered_tokens,
    )


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
    """The state view (SPEC 2.1): the session's own keys plus the app's (`app:<key>`) and
    the user's (`user:<key>`) as they were when the session was loaded, updated in place
    by the deltas appended through this object."""
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
        """Create an empty session; a duplicate id for the same app raises `ValueError`.

        `state` is its initial state: `app:` and `user:` keys go to those scopes (as a
        delta would), the rest to the session. The session returned shows the merged view.
        """
        ...

    async def get_session(
        self, key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
    ) -> Session | None:
        """Load a session with at most `event_limit` of its newest events (all when None),
        and its summaries.

        With `after_summary` (a filter key), the events covered by that key's summary
        (`select_summary`) are not loaded, apart from the earlier events of the turn its
        boundary cuts (from that turn's user message on), which a projection needs to
        anchor the turn and keep its tool calls paired: a turn never needs the whole ledger.
        Returns None when the session does not exist or belongs to another user.
        """
        ...

    async def list_sessions(self, *, app: str, user_id: str) -> list[Session]:
        """The user's sessions in the app, newest first, without events; their `state` is the
        session's own (no app or user keys)."""
        ...

    async def delete_session(self, key: SessionKey) -> bool:
        """Delete a session and its whole ledger; False when there was none."""
        ...

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append one event: assign the next seq, merge its state delta into the state.

        The delta's `app:` and `user:` keys update the app's and the user's state, in the
        same transaction as the append; the other keys update the session's.

        Appending an event id that is already in the ledger appends nothing and returns
        the stored event, so a retried append can never duplicate a step. Updates
        `session` in place (events, state, last_seq). Raises `SessionNotFoundError` when
        the session was deleted.
        """
        ...

    async def append_events(self, session: Session, events: Sequence[Event]) -> list[Event]:
        """Append several events in order, in one transaction: all of them or none.

        What `append_event` does for each, at the cost of one write: consecutive seqs, state
        deltas merged in order, an id already in the ledger (or earlier in the batch) not
        appended again but answered with the stored event. Returns the stored events, one
        per event given. For the appends of one model step (issue 18).
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

    async def advance_summary(self, key: SessionKey, summary: Summary) -> Summary | None:
        """Write text and boundary together, only if that moves the boundary forward.

        `summary.boundary` is required. The write happens, atomically, only when the stored
        summary for the key is missing or ends at a smaller `last_seq`; it then returns the
        stored summary (its `version` one more than before). Returns None when the stored
        boundary is already at or past this one: a late or repeated job never moves a
        boundary backwards.
        """
        ...

    # -- state scopes (SPEC 2.1, 2.5) -----------------------------------------------------------

    async def update_session_state(self, key: SessionKey, state: Mapping[str, Any]) -> None:
        """Merge `state` into the session's own state without an event (SPEC 2.5
        `UpdateSessionState`): for initialisation or correction outside a run. `app:` and
        `user:` keys raise `StateKeyError`; raises `SessionNotFoundError` when the session
        does not exist for this user."""
        ...

    async def initialize_session_state(self, key: SessionKey, *, state_key: str, value: Any) -> tuple[Any, bool]:
        """Set a session state key unless it is already set, atomically (SPEC 2.5
        `StateInitializationService`): of two concurrent callers, one sets it and both get
        the value that is stored. Returns (stored value, whether this call set it)."""
        ...

    async def update_app_state(self, *, app: str, state: Mapping[str, Any]) -> None:
        """Merge `state` into the app's state; keys may carry the `app:` prefix. `user:` and
        `temp:` keys raise `StateKeyError`."""
        ...

    async def list_app_states(self, *, app: str) -> dict[str, Any]:
        """The app's state, keys without their prefix."""
        ...

    async def delete_app_state(self, *, app: str, key: str) -> None:
        """Remove one key (with or without its prefix) from the app's state; no error when
        it is not there."""
        ...

    async def update_user_state(self, *, app: str, user_id: str, state: Mapping[str, Any]) -> None:
        """Merge `state` into the user's state in the app; keys may carry the `user:`
        prefix. `app:` and `temp:` keys raise `StateKeyError`."""
        ...

    async def list_user_states(self, *, app: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app, keys without their prefix."""
        ...

    async def delete_user_state(self, *, app: str, user_id: str, key: str) -> None:
        """Remove one key (with or without its prefix) from the user's state; no error when
        it is not there."""
        ...
