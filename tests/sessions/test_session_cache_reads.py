"""What the session cache reads from the wrapped service per run (issue 23): one read each."""

from __future__ import annotations

from collections import Counter

from sessions_app.core.cache import CachedSessionService
from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, SessionKey

APP = "reads"


class CountingService(InMemorySessionService):
    """The in-memory service, counting window loads and head reads."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    async def get_session(
        self, key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
    ) -> Session | None:
        self.reads["window"] += 1
        return await super().get_session(key, event_limit=event_limit, after_summary=after_summary)

    async def get_session_head(self, key: SessionKey) -> Session | None:
        self.reads["head"] += 1
        return await super().get_session_head(key)


def said(n: int) -> Event:
    return Event(author="user", message=Message(role="user", content=f"question {n}"), filter_key=APP)


async def test_a_session_this_process_does_not_keep_is_loaded_with_one_read() -> None:
    ledger = CountingService()
    # Created elsewhere (the REST process): this cache has never seen it.
    session = await ledger.create_session(app=APP, user_id="alice")
    await ledger.append_events(session, [said(1), said(2)])
    cached = CachedSessionService(ledger)

    first = await cached.get_session(session.key, after_summary=APP)

    assert ledger.reads == Counter(window=1)
    assert first is not None and [e.seq for e in first.events] == [1, 2]


async def test_a_kept_session_costs_one_head_read_and_no_window_load() -> None:
    ledger = CountingService()
    session = await ledger.create_session(app=APP, user_id="alice")
    cached = CachedSessionService(ledger)
    loaded = await cached.get_session(session.key, after_summary=APP)
    assert loaded is not None
    await cached.append_events(loaded, [said(1)])
    ledger.reads.clear()

    again = await cached.get_session(session.key, after_summary=APP)

    assert ledger.reads == Counter(head=1)
    assert again is not None and [e.seq for e in again.events] == [1]


async def test_a_missing_session_is_none_and_nothing_is_kept() -> None:
    ledger = CountingService()
    cached = CachedSessionService(ledger)
    key = SessionKey(app=APP, user_id="alice", session_id="nope")

    assert await cached.get_session(key) is None
    assert await cached.get_session(key) is None
    assert ledger.reads == Counter(window=2)
