"""Session recall: what is recallable, and the index contract with its in-memory backend."""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from sessions_app.core.events import Event, filter_matches
from sessions_app.core.recall.defaults import DEFAULT_TOP_K, MIN_SCORE, SCAN_CAP, AnchorNotFoundError
from sessions_app.core.recall.scoring import Document, DocumentCache, rank_many
from sessions_app.core.redo import opens_turn, superseded_spans
from sessions_app.core.session import Session, SessionKey, Summary

# -- what is recallable -----------------------------------------------------------------------


def recall_text(event: Event) -> tuple[str, str] | None:
    """(text, role) for an event that recall indexes; None for tool calls without text,
    partial events, empty and system messages."""
    message = event.message
    if event.partial or message is None:
        return None
    if message.tool_call_id is not None:
        return (message.content, "tool") if message.content else None
    if message.role in ("user", "assistant") and message.content:
        return message.content, message.role
    return None


# -- the index contract -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EventSearchRequest:
    """What to search: always one user's events in one app.

    `session_ids` restricts to those sessions (empty = all of the user's),
    `exclude_session_ids` leaves some out, `through_seq` and `created_before` keep only
    events at or before a boundary, `filter_key` keeps events on that branch (SPEC 2.3).
    """

    query: str
    app: str
    user_id: str
    session_ids: tuple[str, ...] = ()
    exclude_session_ids: tuple[str, ...] = ()
    through_seq: int | None = None
    created_before: datetime | None = None
    filter_key: str = ""
    max_results: int = DEFAULT_TOP_K
    min_score: float = MIN_SCORE


@dataclass(frozen=True, kw_only=True)
class SearchHit:
    session_id: str
    event: Event
    text: str
    role: str
    score: float
    relevance: float = 0.0
    query: str = ""  # the (fallback) query that found it

    @property
    def key(self) -> tuple[str, str]:
        return self.session_id, self.event.id


@dataclass(frozen=True, kw_only=True)
class EventWindow:
    session_id: str
    anchor_event_id: str
    events: tuple[Event, ...]


@dataclass(frozen=True, kw_only=True)
class EventRange:
    """Recallable events of one session with seqs in a range, oldest first, and where the
    session's ledger ends (its newest seq; 0 when empty)."""

    session_id: str
    events: tuple[Event, ...]
    ledger_last_seq: int


@runtime_checkable
class RecallIndex(Protocol):
    """Search and windows over one user's session events (SPEC 2.5's SearchEvents and
    GetEventWindow). Every method reads only the events of the user it is given."""

    async def search_events(self, request: EventSearchRequest) -> list[SearchHit]:
        """The user's recallable events that match `request.query`, best first, at most
        `max_results`, each scored with `score_document` and at least `min_score`."""
        ...

    async def search_many(self, request: EventSearchRequest, queries: Sequence[str]) -> list[list[SearchHit]]:
        """`search_events` for each of `queries` (`request.query` is ignored), in one pass:
        what the query fallback of one session_search needs."""
        ...

    async def event_window(self, key: SessionKey, *, anchor_event_id: str, before: int, after: int) -> EventWindow:
        """The anchor and up to `before`/`after` recallable neighbours, oldest first.
        Non-recallable events (tool calls, partials) are skipped, not counted. Raises
        `AnchorNotFoundError` when the anchor is missing or not recallable."""
        ...

    async def find_tool_result(self, key: SessionKey, tool_call_id: str) -> Event | None:
        """The latest tool-result event of the session answering `tool_call_id`."""
        ...

    async def summaries(self, key: SessionKey) -> Mapping[str, Summary]:
        """The session's summaries by filter key (empty when the session is not the user's)."""
        ...

    async def scan_events(
        self,
        key: SessionKey,
        *,
        needles: Sequence[str],
        through_seq: int | None = None,
        created_before: datetime | None = None,
        limit: int = SCAN_CAP,
    ) -> list[Event]:
        """The recallable events of one session (at or before the boundary) whose text
        contains any needle, ignoring case, oldest first: SPEC 5.2's lexical scan, done by
        substring so that it finds what tokenisation missed. At most the newest `limit`
        events are examined (a backend with a substring index may search them all and
        return the newest `limit` matches)."""
        ...


def _in_window(event: Event, through_seq: int | None, created_before: datetime | None) -> bool:
    if through_seq is not None and (event.seq or 0) > through_seq:
        return False
    return not (created_before is not None and event.created_at > created_before)


class InMemoryRecallIndex:
    """RecallIndex over an in-memory SessionService, through its public API only.

    Reads every event of the user's sessions on each search (BM25 over them): meant for
    tests and single-process use, like the service it reads.
    """

    PAGE = 1000

    def __init__(self, service: Any) -> None:
        self.service = service
        self._documents = DocumentCache()

    async def _events(self, key: SessionKey) -> list[Event]:
        events: list[Event] = []
        after = 0
        while True:
            page = await self.service.list_events(key, after_seq=after, limit=self.PAGE)
            events.extend(page)
            if len(page) < self.PAGE:
                return events
            after = page[-1].seq or after

    async def _owned(self, key: SessionKey) -> bool:
        return await self.service.get_session(key, event_limit=0) is not None

    async def search_events(self, request: EventSearchRequest) -> list[SearchHit]:
        return (await self.search_many(request, [request.query]))[0]

    async def search_many(self, request: EventSearchRequest, queries: Sequence[str]) -> list[list[SearchHit]]:
        sessions = await self.service.list_sessions(app=request.app, user_id=request.user_id)
        wanted = set(request.session_ids)
        excluded = set(request.exclude_session_ids)
        documents: list[Document] = []
        found: dict[Hashable, tuple[str, Event, str]] = {}
        for session in sessions:
            if (wanted and session.id not in wanted) or session.id in excluded:
                continue
            for event in await self._events(session.key):
                recalled = recall_text(event)
                if recalled is None or not _in_window(event, request.through_seq, request.created_before):
                    continue
                if request.filter_key and not filter_matches(event.filter_key, request.filter_key):
                    continue
                key = (session.id, event.id)
                documents.append(self._documents.get(key, recalled[0]))
                found[key] = (session.id, event, recalled[1])
        ranked = rank_many(
            queries,
            documents,
            limit=request.max_results,
            min_score=request.min_score,
            recency=lambda d: found[d.key][1].created_at,
        )
        return [
            [
                SearchHit(
                    session_id=found[s.document.key][0],
                    event=found[s.document.key][1],
                    text=s.document.text,
                    role=found[s.document.key][2],
                    score=s.score,
                    relevance=s.relevance,
                )
                for s in per_query
            ]
            for per_query in ranked
        ]

    async def event_window(self, key: SessionKey, *, anchor_event_id: str, before: int, after: int) -> EventWindow:
        if not await self._owned(key):
            raise AnchorNotFoundError(f"session {key.session_id!r} not found")
        recallable = [e for e in await self._events(key) if recall_text(e) is not None]
        index = next((i for i, e in enumerate(recallable) if e.id == anchor_event_id), None)
        if index is None:
            raise AnchorNotFoundError(f"event_id {anchor_event_id!r} not found in session {key.session_id!r}")
        start = max(0, index - max(0, before))
        window = recallable[start : index + max(0, after) + 1]
        return EventWindow(session_id=key.session_id, anchor_event_id=anchor_event_id, events=tuple(window))

    async def event_id_at(self, key: SessionKey, seq: int) -> str | None:
        """The first recallable event at or after `seq` (a tool call resolves to its result)."""
        if not await self._owned(key):
            return None
        for event in await self._events(key):
            if (event.seq or 0) >= seq and recall_text(event) is not None:
                return event.id
        return None

    async def events_in_range(self, key: SessionKey, *, first_seq: int, last_seq: int, limit: int) -> EventRange:
        """At most `limit` recallable events with `first_seq` <= seq <= `last_seq`, oldest
        first. Raises `AnchorNotFoundError` when the session is not the user's."""
        if not await self._owned(key):
            raise AnchorNotFoundError(f"session {key.session_id!r} not found")
        events = await self._events(key)
        chosen = [e for e in events if first_seq <= (e.seq or 0) <= last_seq and recall_text(e) is not None]
        last = max((e.seq or 0 for e in events), default=0)
        return EventRange(session_id=key.session_id, events=tuple(chosen[: max(0, limit)]), ledger_last_seq=last)

    async def find_tool_result(self, key: SessionKey, tool_call_id: str) -> Event | None:
        if not await self._owned(key):
            return None
        for event in reversed(await self._events(key)):
            if event.message is not None and event.message.tool_call_id == tool_call_id and not event.partial:
                return event
        return None

    async def find_tool_call(
        self, key: SessionKey, tool_call_id: str, *, before_seq: int | None = None
    ) -> Event | None:
        """The latest event (before `before_seq`) whose message made the call `tool_call_id`."""
        if not await self._owned(key):
            return None
        for event in reversed(await self._events(key)):
            if before_seq is not None and (event.seq or 0) >= before_seq:
                continue
            if event.message is not None and any(c.id == tool_call_id for c in event.message.tool_calls):
                return event
        return None

    async def superseded_spans(self, key: SessionKey) -> tuple[tuple[int, int], ...]:
        """The seq ranges of the session's turns a later user message regenerated or
        edited (`sessions_app.core.redo.superseded_spans`); empty when not the user's."""
        if not await self._owned(key):
            return ()
        return superseded_spans(
            [(e, e.message) for e in await self._events(key) if e.message is not None and opens_turn(e, e.message)]
        )

    async def summaries(self, key: SessionKey) -> Mapping[str, Summary]:
        session = await self.service.get_session(key, event_limit=0)
        return dict(session.summaries) if session is not None else {}

    async def scan_events(
        self,
        key: SessionKey,
        *,
        needles: Sequence[str],
        through_seq: int | None = None,
        created_before: datetime | None = None,
        limit: int = SCAN_CAP,
    ) -> list[Event]:
        if not needles or not await self._owned(key):
            return []
        lowered = [n.lower() for n in needles if n]
        eligible = [
            e
            for e in await self._events(key)
            if recall_text(e) is not None and _in_window(e, through_seq, created_before)
        ][-limit:]
        return [e for e in eligible if any(n in (recall_text(e) or ("", ""))[0].lower() for n in lowered)]


# -- summaries once per run (issue 23) ----------------------------------------------------------


@dataclass(kw_only=True)
class _RunMemo:
    session: weakref.ref[Session]
    inner: RecallIndex
    summaries: dict[SessionKey, tuple[dict[str, Summary] | None, dict[str, Summary]]] = field(default_factory=dict)
    """By session: the run's own view of its summaries when they were read (None for
    another session), and what the index answered."""
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held while reading: a step's tool calls run together, and the first read serves all."""


class RunSummaries:
    """Each run's recall tool calls read a session's summaries once, not once per call.

    A `session_search` reads the summaries twice and `search_sections` once more; a run that
    calls three recall tools read them from the database some seven times (issue 23). `index`
    wraps the run's `RecallIndex` so that `summaries` answers from the run's first read. The
    answer is read again when the run itself has written a summary since: the run keeps its
    session's `summaries` current as it compacts (`refresh_summaries`), and a change there
    drops the kept answer. What another process (a summary job) writes during the run shows
    at the next run, as it does in the run's own requests.

    Memos are per run (`run`, the invocation id, and the run's session object, so a reused
    id never finds another run's memo) and the `max_runs` most recent are kept.
    """

    def __init__(self, *, max_runs: int = 256) -> None:
        self.max_runs = max_runs
        self._runs: OrderedDict[str, _RunMemo] = OrderedDict()

    def index(self, inner: RecallIndex, *, run: str, session: Session) -> RecallIndex:
        """`inner` for the run `run` on `session`: summaries kept for the run."""
        memo = self._runs.get(run)
        if memo is None or memo.session() is not session or memo.inner is not inner:
            memo = _RunMemo(session=weakref.ref(session), inner=inner)
            self._runs[run] = memo
        self._runs.move_to_end(run)
        while len(self._runs) > self.max_runs:
            self._runs.popitem(last=False)
        return _RunIndex(inner, memo=memo, session=session)


class _RunIndex:
    """A `RecallIndex` that reads summaries through a run's memo; all else goes to `inner`
    (the optional methods too: `getattr(index, "event_id_at", None)` finds them there)."""

    def __init__(self, inner: RecallIndex, *, memo: _RunMemo, session: Session) -> None:
        self._inner = inner
        self._memo = memo
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def summaries(self, key: SessionKey) -> Mapping[str, Summary]:
        async with self._memo.reading:
            own = dict(self._session.summaries) if key == self._session.key else None
            kept = self._memo.summaries.get(key)
            if kept is not None and kept[0] == own:
                return dict(kept[1])
            found = dict(await self._inner.summaries(key))
            self._memo.summaries[key] = (own, found)
            return dict(found)

    async def search_events(self, request: EventSearchRequest) -> list[SearchHit]:
        return await self._inner.search_events(request)

    async def search_many(self, request: EventSearchRequest, queries: Sequence[str]) -> list[list[SearchHit]]:
        return await self._inner.search_many(request, queries)

    async def event_window(self, key: SessionKey, *, anchor_event_id: str, before: int, after: int) -> EventWindow:
        return await self._inner.event_window(key, anchor_event_id=anchor_event_id, before=before, after=after)

    async def find_tool_result(self, key: SessionKey, tool_call_id: str) -> Event | None:
        return await self._inner.find_tool_result(key, tool_call_id)

    async def scan_events(
        self,
        key: SessionKey,
        *,
        needles: Sequence[str],
        through_seq: int | None = None,
        created_before: datetime | None = None,
        limit: int = SCAN_CAP,
    ) -> list[Event]:
        return await self._inner.scan_events(
            key, needles=needles, through_seq=through_seq, created_before=created_before, limit=limit
        )
