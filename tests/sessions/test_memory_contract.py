"""The MemoryService contract, run against the in-memory and Django backends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import pytest

from sessions_app.core.memory import (
    InMemoryMemoryService,
    InvalidMemoryError,
    MemoryDraft,
    MemoryLimitError,
    MemoryNotFoundError,
    MemoryOperation,
    MemoryService,
    SearchOptions,
    UserKey,
)
from sessions_app.core.session import SessionKey

APP = "contract"

# The Django backend works from worker threads, so its tests need committed data.
pytestmark = pytest.mark.django_db(transaction=True)


class LetterEmbedder:
    """A toy embedder: counts of a few letters. Enough to make dense retrieval differ from
    lexical retrieval in a test, deterministically."""

    LETTERS = "aeioustrnlzqxk"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [[float(text.lower().count(c)) for c in self.LETTERS] for text in texts]


class Backend:
    def __init__(self, make: Callable[..., MemoryService], users: dict[str, str], sessions: dict[str, str]) -> None:
        self.make = make
        self.users = users
        self.sessions = sessions
        self.service = make()

    def key(self, name: str) -> UserKey:
        return UserKey(app=APP, user_id=self.users[name])

    def session(self, name: str) -> SessionKey:
        return SessionKey(app=APP, user_id=self.users[name], session_id=self.sessions[name])


@pytest.fixture(params=["memory", "django"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return Backend(InMemoryMemoryService, {"alice": "alice", "bob": "bob"}, {"alice": "s-alice", "bob": "s-bob"})
    from django.contrib.auth import get_user_model

    from sessions_app import models as orm
    from sessions_app.core.events import utcnow
    from sessions_app.memory_backends import DjangoMemoryService

    users = {name: get_user_model().objects.create_user(username=name) for name in ("alice", "bob")}
    sessions = {}
    for name, user in users.items():
        row = orm.Session.objects.create(id=f"s-{name}", app=APP, user=user, created_at=utcnow(), updated_at=utcnow())
        sessions[name] = row.id
    return Backend(DjangoMemoryService, {n: str(u.pk) for n, u in users.items()}, sessions)


def fact(text: str, **kwargs: object) -> MemoryDraft:
    return MemoryDraft(text=text, **kwargs)  # type: ignore[arg-type]  # kwargs are MemoryDraft fields


def episode(text: str, day: str, **kwargs: object) -> MemoryDraft:
    when = datetime.fromisoformat(day).replace(tzinfo=UTC)
    return MemoryDraft(text=text, kind="episode", event_time=when, **kwargs)  # type: ignore[arg-type]


async def test_added_memories_read_back_with_their_metadata(backend: Backend) -> None:
    alice = backend.key("alice")
    written = await backend.service.add(alice, fact("Runs Go in production", topics=("stack",)))
    trip = await backend.service.add(
        alice,
        episode(
            "Flew to Lisbon for the payments offsite", "2024-05-03", participants=("Bob", "Carol"), location="Lisbon"
        ),
    )
    assert written.action == "added" and trip.action == "added"
    got = await backend.service.get(alice, trip.entry.id)
    assert got is not None
    assert (got.kind, got.event_time, got.participants, got.location) == (
        "episode",
        datetime(2024, 5, 3, tzinfo=UTC),
        ("Bob", "Carol"),
        "Lisbon",
    )
    assert (await backend.service.get(alice, written.entry.id)).topics == ("stack",)  # type: ignore[union-attr]
    assert await backend.service.count(alice) == 2


async def test_invalid_memories_are_refused(backend: Backend) -> None:
    alice = backend.key("alice")
    with pytest.raises(InvalidMemoryError, match="text"):
        await backend.service.add(alice, fact("   "))
    with pytest.raises(InvalidMemoryError, match="event_time"):
        await backend.service.add(alice, MemoryDraft(text="Went hiking", kind="episode"))
    assert await backend.service.count(alice) == 0


async def test_adding_past_the_per_user_limit_fails_with_a_clear_error(backend: Backend) -> None:
    service = backend.make(max_per_user=3)
    alice, bob = backend.key("alice"), backend.key("bob")
    for text in ("Likes tea", "Owns a bicycle", "Speaks Portuguese"):
        await service.add(alice, fact(text))
    with pytest.raises(MemoryLimitError, match="already has 3 memories"):
        await service.add(alice, fact("Plays the cello"))
    # The limit is per user.
    assert (await service.add(bob, fact("Plays the cello"))).action == "added"
    assert await service.count(alice) == 3


async def test_an_exact_or_near_duplicate_add_is_skipped(backend: Backend) -> None:
    alice = backend.key("alice")
    first = await backend.service.add(alice, fact("Runs Go in production"))
    again = await backend.service.add(alice, fact("runs go in production."))
    near = await backend.service.add(alice, fact("Runs Go in production systems"))
    assert (again.action, again.entry.id) == ("skipped", first.entry.id)
    # 3 of 4 words shared: word-Jaccard 0.75 >= 0.70 puts it in the skip tier.
    assert (near.action, near.entry.id) == ("skipped", first.entry.id)
    assert await backend.service.count(alice) == 1


async def test_a_similar_add_updates_the_memory_it_resembles(backend: Backend) -> None:
    alice = backend.key("alice")
    original = await backend.service.add(alice, fact("Prefers dark mode in the editor", topics=("ui",)))
    changed = await backend.service.add(alice, fact("Prefers light mode in the editor", topics=("editor",)))
    assert changed.action == "updated" and changed.entry.id == original.entry.id
    assert changed.similarity is not None and 0.6 <= changed.similarity < 0.9
    stored = await backend.service.get(alice, original.entry.id)
    assert stored is not None and stored.text == "Prefers light mode in the editor"
    assert stored.topics == ("ui", "editor")
    assert await backend.service.count(alice) == 1


async def test_an_unrelated_add_is_stored_and_dedupe_can_be_turned_off(backend: Backend) -> None:
    alice = backend.key("alice")
    await backend.service.add(alice, fact("Prefers tea"))
    assert (await backend.service.add(alice, fact("Owns a golden retriever named Max"))).action == "added"
    assert (await backend.service.add(alice, fact("Prefers tea"), dedupe=False)).action == "added"
    assert await backend.service.count(alice) == 3


async def test_a_duplicate_with_new_topics_merges_the_topics(backend: Backend) -> None:
    alice = backend.key("alice")
    first = await backend.service.add(alice, fact("Runs Go in production", topics=("stack",)))
    merged = await backend.service.add(alice, fact("Runs Go in production", topics=("languages",)))
    assert merged.action == "updated" and merged.entry.id == first.entry.id
    assert merged.entry.topics == ("stack", "languages")


async def test_an_episode_on_another_day_is_not_a_duplicate(backend: Backend) -> None:
    alice = backend.key("alice")
    await backend.service.add(alice, episode("Went to the gym", "2024-05-01"))
    assert (await backend.service.add(alice, episode("Went to the gym", "2024-05-02"))).action == "added"
    assert (await backend.service.add(alice, episode("Went to the gym", "2024-05-02"))).action == "skipped"


async def test_update_changes_only_the_given_fields(backend: Backend) -> None:
    alice = backend.key("alice")
    written = await backend.service.add(alice, fact("Lives in Porto", topics=("home",)))
    updated = await backend.service.update(alice, written.entry.id, text="Lives in Lisbon")
    assert (updated.text, updated.topics) == ("Lives in Lisbon", ("home",))
    assert updated.updated_at >= written.entry.updated_at
    found = await backend.service.search(alice, SearchOptions(query="Lisbon"))
    assert [m.id for m in found] == [written.entry.id]
    assert await backend.service.search(alice, SearchOptions(query="Porto")) == []
    with pytest.raises(MemoryNotFoundError):
        await backend.service.update(alice, "no-such-id", text="x")


async def test_delete_and_clear_remove_memories(backend: Backend) -> None:
    alice = backend.key("alice")
    one = await backend.service.add(alice, fact("Likes jazz"))
    await backend.service.add(alice, fact("Has two cats"))
    assert await backend.service.delete(alice, one.entry.id) is True
    assert await backend.service.delete(alice, one.entry.id) is False
    assert await backend.service.get(alice, one.entry.id) is None
    assert await backend.service.clear(alice) == 1
    assert await backend.service.count(alice) == 0


async def test_load_returns_the_most_recently_updated_first(backend: Backend) -> None:
    alice = backend.key("alice")
    ids = []
    for text in ("Likes jazz", "Has two cats", "Runs Go in production"):
        ids.append((await backend.service.add(alice, fact(text))).entry.id)
        await asyncio.sleep(0.01)
    await backend.service.update(alice, ids[0], text="Likes jazz and blues")
    loaded = await backend.service.load(alice, limit=2)
    assert [m.id for m in loaded] == [ids[0], ids[2]]
    assert [m.kind for m in await backend.service.load(alice, kind="episode")] == []


async def test_search_ranks_the_matching_memory_first_with_a_score(backend: Backend) -> None:
    alice = backend.key("alice")
    for text in (
        "Runs Go in production",
        "Prefers tea over coffee",
        "Deploys services with Kubernetes",
        "Has a daughter named Ana",
        "Writes tests in pytest",
    ):
        await backend.service.add(alice, fact(text))
    results = await backend.service.search(alice, SearchOptions(query="which language runs in production?"))
    assert results and results[0].text == "Runs Go in production"
    assert results[0].score is not None and 0.3 <= results[0].score <= 1.0
    assert all(r.text != "Has a daughter named Ana" for r in results)
    assert await backend.service.search(alice, SearchOptions(query="   ")) == []


async def test_search_matches_word_forms_phrases_and_chinese(backend: Backend) -> None:
    alice = backend.key("alice")
    await backend.service.add(alice, fact("Deployed the billing service on Fridays"))
    await backend.service.add(alice, fact("喜欢喝乌龙茶，不喜欢咖啡"))
    await backend.service.add(alice, fact("Uses PostgreSQL for analytics"))
    assert [m.text for m in await backend.service.search(alice, SearchOptions(query="deploying"))] == [
        "Deployed the billing service on Fridays"
    ]
    assert [m.text for m in await backend.service.search(alice, SearchOptions(query="乌龙茶"))] == [
        "喜欢喝乌龙茶，不喜欢咖啡"
    ]
    # A fragment of a word still finds it, as a phrase.
    assert [m.text for m in await backend.service.search(alice, SearchOptions(query="postgres"))] == [
        "Uses PostgreSQL for analytics"
    ]


async def test_kind_filter_prefers_the_kind_and_falls_back_when_few_match(backend: Backend) -> None:
    alice = backend.key("alice")
    await backend.service.add(alice, fact("Likes hiking in the Alps"))
    await backend.service.add(alice, episode("Went hiking near Sintra", "2024-04-20"))
    strict = await backend.service.search(alice, SearchOptions(query="hiking", kind="episode", kind_fallback=False))
    assert [m.kind for m in strict] == ["episode"]
    fallback = await backend.service.search(alice, SearchOptions(query="hiking", kind="episode"))
    assert [m.kind for m in fallback] == ["episode", "fact"]


async def test_time_bounds_keep_only_episodes_in_range_and_can_order_them(backend: Backend) -> None:
    alice = backend.key("alice")
    await backend.service.add(alice, episode("Visited the Porto office", "2024-03-10"))
    await backend.service.add(alice, episode("Visited the Berlin office", "2024-05-10"))
    await backend.service.add(alice, episode("Visited the Lisbon office", "2024-01-10"))
    await backend.service.add(alice, fact("Visited offices often"))
    found = await backend.service.search(
        alice,
        SearchOptions(
            query="visited office",
            time_after=datetime(2024, 2, 1, tzinfo=UTC),
            time_before=datetime(2024, 6, 1, tzinfo=UTC),
            order_by_event_time=True,
        ),
    )
    assert [m.text for m in found] == ["Visited the Porto office", "Visited the Berlin office"]


async def test_a_user_never_sees_or_changes_another_users_memories(backend: Backend) -> None:
    alice, bob = backend.key("alice"), backend.key("bob")
    secret = await backend.service.add(bob, fact("Bob's bank PIN hint is the cat's birthday"))
    assert await backend.service.search(alice, SearchOptions(query="bank PIN hint")) == []
    assert await backend.service.get(alice, secret.entry.id) is None
    assert await backend.service.load(alice) == []
    assert await backend.service.delete(alice, secret.entry.id) is False
    with pytest.raises(MemoryNotFoundError):
        await backend.service.update(alice, secret.entry.id, text="hacked")
    assert await backend.service.clear(alice) == 0
    assert (await backend.service.get(bob, secret.entry.id)).text.startswith("Bob's bank")  # type: ignore[union-attr]
    # An identical memory of another user is not a duplicate.
    assert (await backend.service.add(alice, fact("Bob's bank PIN hint is the cat's birthday"))).action == "added"


async def test_hybrid_search_fuses_dense_hits_that_share_no_word_with_the_query(backend: Backend) -> None:
    service = backend.make(embedder=LetterEmbedder())
    alice = backend.key("alice")
    await service.add(alice, fact("zzz qqq xxx"))
    await service.add(alice, fact("Prefers aisle seats on trains"))
    lexical = await service.search(alice, SearchOptions(query="zqz qzq", hybrid=False))
    hybrid = await service.search(alice, SearchOptions(query="zqz qzq"))
    assert lexical == []
    assert hybrid and hybrid[0].text == "zzz qqq xxx"


async def test_apply_moves_the_cursor_once_and_a_replay_of_the_same_delta_has_no_effect(backend: Backend) -> None:
    alice = backend.key("alice")
    session = backend.session("alice")
    assert (await backend.service.get_cursor(session)).last_seq == 0
    operations = [MemoryOperation(op="add", draft=fact("Runs Go in production"))]
    first = await backend.service.apply(alice, operations, session=session, expected_seq=0, new_seq=4)
    replay = await backend.service.apply(alice, operations, session=session, expected_seq=0, new_seq=4)
    assert first.added and not first.stale
    assert replay.stale and not replay.added
    assert (await backend.service.get_cursor(session)).last_seq == 4
    assert await backend.service.count(alice) == 1


async def test_apply_turns_a_missing_update_into_an_add_and_ignores_a_missing_delete(backend: Backend) -> None:
    alice = backend.key("alice")
    result = await backend.service.apply(
        alice,
        [
            MemoryOperation(op="update", memory_id="gone", draft=fact("Has a dog named Rex")),
            MemoryOperation(op="delete", memory_id="also-gone"),
        ],
    )
    assert len(result.added) == 1 and result.deleted == ()
    assert [m.text for m in await backend.service.load(alice)] == ["Has a dog named Rex"]


async def test_a_cursor_of_another_users_session_cannot_be_moved(backend: Backend) -> None:
    if backend.users["alice"] == "alice":
        pytest.skip("the in-memory store keys cursors by (app, user, session): no shared session rows")
    bob_session = SessionKey(app=APP, user_id=backend.users["alice"], session_id=backend.sessions["bob"])
    result = await backend.service.apply(backend.key("alice"), [], session=bob_session, expected_seq=0, new_seq=9)
    assert result.stale
    assert (await backend.service.get_cursor(backend.session("bob"))).last_seq == 0


async def test_spec_6_3_exact_reconcile_drops_only_exact_duplicates_of_stored_or_same_batch_memories(
    backend: Backend,
) -> None:
    """The preserve_history and append_only policies: near duplicates are history, kept."""
    alice = backend.key("alice")
    await backend.service.add(alice, fact("Works at Acme Payments", topics=("work",)))
    result = await backend.service.apply(
        alice,
        [
            MemoryOperation(op="add", draft=fact("works at  acme payments", topics=("job",))),
            MemoryOperation(op="add", draft=fact("Works at Acme Payments as a staff engineer")),
            MemoryOperation(op="add", draft=fact("Works at Acme Payments as a staff engineer")),
            MemoryOperation(op="update", memory_id="gone", draft=fact("Works at Acme Payments")),
        ],
        reconcile="exact",
    )
    assert (len(result.added), result.updated, result.skipped) == (1, (), 3)
    assert sorted((m.text, m.topics) for m in await backend.service.load(alice)) == [
        ("Works at Acme Payments", ("work",)),
        ("Works at Acme Payments as a staff engineer", ()),
    ]
    # A near duplicate under merge_similar is not a memory of its own (dropped or merged).
    merged = await backend.service.apply(
        alice,
        [
            MemoryOperation(op="add", draft=fact("Works at Acme Payments as a senior staff engineer")),
        ],
    )
    assert not merged.added and (merged.updated or merged.skipped)
