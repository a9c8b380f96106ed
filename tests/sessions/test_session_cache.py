"""The process cache of sessions (issue 18): whatever other writers do, a cached read is
what a fresh load from the ledger gives."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app.core.cache import CachedSessionService
from sessions_app.core.events import Event, Message, ToolCall
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session, SessionKey, SessionService, Summary, SummaryBoundary

APP = "cache"


def _event(kind: str, n: int) -> Event:
    if kind == "user":
        return Event(author="user", message=Message(role="user", content=f"question {n}"), filter_key=APP)
    if kind == "call":
        call = ToolCall(id=f"c{n}", name="lookup", arguments='{"q": "x"}')
        return Event(author="agent", message=Message(role="assistant", tool_calls=(call,)), filter_key=APP)
    if kind == "result":
        return Event(
            author="agent",
            message=Message(role="tool", tool_call_id=f"c{n}", tool_name="lookup", content=f"r{n}"),
            filter_key=APP,
        )
    return Event(
        author="agent", message=Message(role="assistant", content=f"answer {n}"), filter_key=APP, state_delta={"n": n}
    )


def _shape(session: Session | None) -> object:
    assert session is not None
    return (
        session.last_seq,
        session.state,
        session.agent,
        [(e.seq, e.id, e.to_dict()) for e in session.events],
        {k: (s.text, s.last_seq, s.version) for k, s in session.summaries.items()},
    )


async def _advance(service: SessionService, key: SessionKey, seq: int, n: int) -> None:
    boundary = SummaryBoundary(cutoff_at=datetime(2026, 1, 1, tzinfo=UTC), last_event_id=f"e{seq}", last_seq=seq)
    for filter_key in (APP, ""):
        await service.advance_summary(key, Summary(filter_key=filter_key, text=f"summary {n}", boundary=boundary))


# One step of a scenario: who acts (the cached process or another writer) and what.
_STEP = st.tuples(
    st.sampled_from(["cached", "other"]),
    st.sampled_from(["user", "call", "result", "answer", "summary", "read"]),
    st.sampled_from([None, 3, 50]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_STEP, min_size=1, max_size=40))
def test_cached_session_equals_a_fresh_load_after_writes_by_another_writer(
    steps: list[tuple[str, str, int | None]],
) -> None:
    async def play() -> None:
        ledger = InMemorySessionService()
        cached = CachedSessionService(ledger)
        session = await cached.create_session(app=APP, user_id="alice", agent="support")
        key = session.key
        for n, (who, what, limit) in enumerate(steps):
            writer: SessionService = cached if who == "cached" else ledger
            if what == "summary":
                current = await ledger.get_session(key)
                assert current is not None
                if current.last_seq:
                    await _advance(writer, key, max(1, current.last_seq - n % 3), n)
            elif what != "read":
                target = await writer.get_session(key, event_limit=limit, after_summary=APP)
                assert target is not None
                await writer.append_events(target, [_event(what, n)])
            for after_summary in (APP, None):
                got = await cached.get_session(key, event_limit=limit, after_summary=after_summary)
                fresh = await ledger.get_session(key, event_limit=limit, after_summary=after_summary)
                assert _shape(got) == _shape(fresh)
            after = max(0, n % 5)
            assert await cached.list_events(key, after_seq=after, limit=7) == await ledger.list_events(
                key, after_seq=after, limit=7
            )
            assert await cached.get_summary(key, filter_key=APP) == await ledger.get_summary(key, filter_key=APP)

    async_to_sync(play)()


@pytest.mark.django_db(transaction=True)
def test_cached_django_session_equals_a_fresh_load_after_another_process_wrote() -> None:
    from django.contrib.auth import get_user_model

    from sessions_app.backends import DjangoSessionService

    alice = str(get_user_model().objects.create_user(username="alice").pk)
    ledger = DjangoSessionService()
    cached = CachedSessionService(ledger)

    async def turn(service: SessionService, key: SessionKey, n: int) -> None:
        session = await service.get_session(key, event_limit=400, after_summary=APP)
        assert session is not None
        await service.append_events(session, [_event("user", n), _event("call", n)])
        await service.append_events(session, [_event("result", n), _event("answer", n)])

    async def setup() -> SessionKey:
        session = await cached.create_session(app=APP, user_id=alice, agent="support")
        for n in range(3):
            await turn(cached, session.key, n)
        await turn(ledger, session.key, 3)  # another process
        await _advance(ledger, session.key, 6, 3)  # its summary job
        await turn(cached, session.key, 4)
        return session.key

    key = async_to_sync(setup)()
    got = async_to_sync(cached.get_session)(key, event_limit=400, after_summary=APP)
    fresh = async_to_sync(ledger.get_session)(key, event_limit=400, after_summary=APP)
    assert _shape(got) == _shape(fresh)
    assert got is not None and got.events[0].seq == 5  # the turn the boundary cuts, from its user message
    again = async_to_sync(cached.get_session)(key, event_limit=400, after_summary=APP)  # served from memory
    assert _shape(again) == _shape(fresh)


def test_a_head_read_before_this_process_appended_keeps_the_cache_and_misses_no_event() -> None:
    class Ledger(InMemorySessionService):
        stale: Session | None = None

        async def get_session_head(self, key: SessionKey) -> Session | None:
            # A summary job's head read that started before the run's append committed.
            if self.stale is not None:
                head, self.stale = self.stale, None
                return head
            return await super().get_session_head(key)

    async def play() -> None:
        ledger = Ledger()
        cached = CachedSessionService(ledger)
        session = await cached.create_session(app=APP, user_id="alice")
        await cached.append_events(session, [_event("user", 1), _event("answer", 1)])
        ledger.stale = await ledger.get_session_head(session.key)
        await cached.append_events(session, [_event("user", 2), _event("answer", 2)])
        assert [e.seq for e in await cached.list_events(session.key)] == [1, 2, 3, 4]
        assert cached._entries[session.key].last_seq == 4
        got = await cached.get_session(session.key, after_summary=APP)
        assert _shape(got) == _shape(await ledger.get_session(session.key, after_summary=APP))

    async_to_sync(play)()
