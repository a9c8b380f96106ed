"""Issue 18 (rows read per turn flat): a session's head read asks only for the summaries
that differ from those the process cache already holds, so a session with a summary per
filter key reads one row per turn, not one per key; whatever other writers do, the cached
session still equals a fresh load from the ledger. Runs on the Django backends (PostgreSQL
in CI)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessions_app.backends import DjangoSessionService, get_session_head_sync
from sessions_app.core.cache import CachedSessionService
from sessions_app.core.events import Event, Message
from sessions_app.core.session import Session, SessionKey, SessionService, Summary, SummaryBoundary
from sessions_app.locks import DatabaseSummaryLock

pytestmark = pytest.mark.django_db(transaction=True)

APP = "cache"


def _summary(filter_key: str, seq: int, text: str) -> Summary:
    boundary = SummaryBoundary(cutoff_at=datetime(2026, 1, 1, tzinfo=UTC), last_event_id=f"e{seq}", last_seq=seq)
    return Summary(filter_key=filter_key, text=text, boundary=boundary)


def _shape(session: Session | None) -> object:
    assert session is not None
    return (
        session.last_seq,
        [(e.seq, e.id) for e in session.events],
        {k: (s.text, s.last_seq, s.version, s.updated_at) for k, s in session.summaries.items()},
    )


def _user(name: str) -> str:
    return str(get_user_model().objects.create_user(username=name).pk)


def _with_events(service: SessionService, user: str, count: int) -> SessionKey:
    async def make() -> SessionKey:
        session = await service.create_session(app=APP, user_id=user)
        await service.append_events(
            session,
            [Event(author="user", message=Message(role="user", content=f"q{n}"), filter_key=APP) for n in range(count)],
        )
        return session.key

    return async_to_sync(make)()


def test_a_head_with_known_summaries_reads_only_those_that_changed() -> None:
    service = DjangoSessionService()
    key = _with_events(service, _user("alice"), 6)
    for filter_key in (APP, ""):
        async_to_sync(service.advance_summary)(key, _summary(filter_key, 3, "first"))
    full = get_session_head_sync(key)
    assert full is not None and set(full.summaries) == {APP, ""}

    unchanged = get_session_head_sync(key, known=full.summaries)
    assert unchanged is not None and unchanged.summaries == {}  # one row: the session's
    assert (unchanged.last_seq, unchanged.created_at) == (full.last_seq, full.created_at)

    advanced = async_to_sync(service.advance_summary)(key, _summary(APP, 5, "second"))
    changed = get_session_head_sync(key, known=full.summaries)
    assert changed is not None and changed.summaries == {APP: advanced}
    # Nothing known: every summary, as without `known`.
    assert get_session_head_sync(key, known={}) == get_session_head_sync(key)


def test_a_lease_holder_row_is_never_read_as_a_summary() -> None:
    service = DjangoSessionService()
    key = _with_events(service, _user("alice"), 2)
    lock = DatabaseSummaryLock()
    token = async_to_sync(lock.acquire)(key, APP, wait_s=0)  # a summary row without text
    assert token is not None
    head = get_session_head_sync(key, known={})
    assert head is not None and head.summaries == {}


def test_another_writers_summary_is_seen_and_the_cache_keeps_the_one_it_wrote() -> None:
    ledger = DjangoSessionService()
    cached = CachedSessionService(ledger)
    key = _with_events(cached, _user("alice"), 8)
    async_to_sync(cached.get_session)(key, after_summary=APP)  # the entry knows there is none
    for filter_key in (APP, ""):
        async_to_sync(cached.advance_summary)(key, _summary(filter_key, 4, "mine"))
    async_to_sync(ledger.advance_summary)(key, _summary("", 6, "another process's"))  # not through the cache

    got = async_to_sync(cached.get_session)(key, after_summary=APP)
    fresh = async_to_sync(ledger.get_session)(key, after_summary=APP)
    assert _shape(got) == _shape(fresh)
    assert got is not None and (got.summaries[""].text, got.summaries[APP].text) == ("another process's", "mine")
    assert async_to_sync(cached.get_summary)(key, filter_key="") == async_to_sync(ledger.get_summary)(
        key, filter_key=""
    )


def test_a_session_recreated_under_the_same_id_does_not_inherit_known_summaries() -> None:
    ledger = DjangoSessionService()
    cached = CachedSessionService(ledger)
    user = _user("alice")
    key = _with_events(cached, user, 4)
    async_to_sync(cached.advance_summary)(key, _summary(APP, 2, "old"))
    async_to_sync(cached.get_session)(key, after_summary=APP)
    async_to_sync(ledger.delete_session)(key)  # another process deletes it and makes it anew
    async_to_sync(ledger.create_session)(app=APP, user_id=user, session_id=key.session_id)

    got = async_to_sync(cached.get_session)(key, after_summary=APP)
    assert got is not None and got.summaries == {} and got.events == []


# One step: who writes (this process through the cache, or another one), and what.
_STEP = st.tuples(
    st.sampled_from(["cached", "other"]),
    st.sampled_from(["append", "advance", "put", "read"]),
    st.sampled_from([APP, ""]),
)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(_STEP, min_size=1, max_size=12))
def test_cached_head_summaries_equal_a_fresh_load(steps: list[tuple[str, str, str]]) -> None:
    ledger = DjangoSessionService()
    cached = CachedSessionService(ledger)
    key = _with_events(cached, _user(f"u{datetime.now(UTC).timestamp()}"), 1)

    async def play() -> None:
        for n, (who, what, filter_key) in enumerate(steps):
            writer: SessionService = cached if who == "cached" else ledger
            current = await ledger.get_session(key)
            assert current is not None
            if what == "append":
                await writer.append_events(
                    current, [Event(author="user", message=Message(role="user", content=f"m{n}"), filter_key=APP)]
                )
            elif what == "advance":
                await writer.advance_summary(key, _summary(filter_key, current.last_seq, f"advanced {n}"))
            elif what == "put":
                summary = _summary(filter_key, current.last_seq, f"put {n}")
                await writer.put_summary(
                    key,
                    Summary(
                        filter_key=filter_key,
                        text=summary.text,
                        boundary=summary.boundary,
                        updated_at=datetime.now(UTC) + timedelta(microseconds=n),
                    ),
                )
            got = await cached.get_session(key, after_summary=APP)
            fresh = await ledger.get_session(key, after_summary=APP)
            assert _shape(got) == _shape(fresh)
            for k in (APP, ""):
                assert await cached.get_summary(key, filter_key=k) == await ledger.get_summary(key, filter_key=k)

    async_to_sync(play)()
