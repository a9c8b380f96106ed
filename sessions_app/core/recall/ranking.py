"""Session recall: the order of a search's hits (issue 12, C7; issue 24): `hybrid_rank`
fuses lexical rank, adjacent hits, query trigrams and named speakers; `dense_rank` adds the
MiniLM cosine order when DENSE_WEIGHT is above 0."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sessions_app.core.recall.analysis import named_speakers, normalize_space, query_terms
from sessions_app.core.recall.defaults import NEIGHBOUR_WEIGHT, RRF_K, SPEAKER_BOOST, TRIGRAM_WEIGHT
from sessions_app.core.recall.embedding import EmbeddingCache, default_cache
from sessions_app.core.recall.index import SearchHit


def trigrams(text: str) -> frozenset[str]:
    """Character trigrams of the lower-cased, whitespace-collapsed text."""
    flat = normalize_space(text).lower()
    return frozenset(flat[i : i + 3] for i in range(len(flat) - 2))


def hybrid_rank(query: str, pool: Sequence[SearchHit]) -> list[SearchHit]:
    """The pool (lexical order, best first) re-ranked by the fused score described at
    `HYBRID_POOL`: lexical rank, adjacent pool members, query trigrams, named speaker.
    Deterministic; ties keep the lexical order."""
    if len(pool) < 2:
        return list(pool)
    lexical = [1.0 / (RRF_K + i) for i in range(len(pool))]
    position = {(h.session_id, h.event.seq): i for i, h in enumerate(pool) if h.event.seq is not None}
    wanted = trigrams(" ".join(query_terms(query)) or query)
    speakers = named_speakers(query, (h.event.author for h in pool))
    fused: list[tuple[float, int]] = []
    for i, hit in enumerate(pool):
        neighbour = 0.0
        if hit.event.seq is not None:
            for seq in (hit.event.seq - 1, hit.event.seq + 1):
                j = position.get((hit.session_id, seq))
                if j is not None:
                    neighbour = max(neighbour, lexical[j])
        shared = len(wanted & trigrams(hit.text)) / len(wanted) if wanted else 0.0
        score = lexical[i] + NEIGHBOUR_WEIGHT * neighbour + TRIGRAM_WEIGHT * shared
        if hit.event.author in speakers:
            score *= SPEAKER_BOOST
        fused.append((score, i))
    fused.sort(key=lambda pair: (-pair[0], pair[1]))
    return [pool[i] for _, i in fused]


DENSE_WEIGHT = 0.0
"""Weight of the dense order against the hybrid order (each 1 / (RRF_K + rank)) in
`dense_rank`; 0 turns the dense signal off (nothing is encoded, the model never loads).
Fitted on LoCoMo dev A + QMSum test A by bench/recall_dense.py: every weight above 0
lowered recall@5 on both, so 0 it is (figures in docs/context.md, "A dense signal")."""


def similarities(cache: EmbeddingCache, query: str, hits: Sequence[SearchHit]) -> list[float]:
    """Cosine of the query to each hit's text (all-MiniLM-L6-v2; vectors cached by event)."""
    vectors = cache.vectors([(h.key, h.text) for h in hits])
    wanted = cache.vectors([(("query", query), query)])[0]
    return [float(v) for v in vectors @ wanted]


def dense_rank(hits: Sequence[SearchHit], cosine: Sequence[float], *, weight: float | None = None) -> list[SearchHit]:
    """The hits (hybrid order, best first) fused with their order by `cosine` (one per hit):
    1 / (RRF_K + hybrid rank) + weight / (RRF_K + dense rank). Ranks, not raw cosines, so
    the two signals need no common scale; ties keep the hybrid order."""
    w = DENSE_WEIGHT if weight is None else weight
    if len(hits) < 2 or w <= 0:
        return list(hits)
    by_cosine = sorted(range(len(hits)), key=lambda i: (-cosine[i], i))
    score = [1.0 / (RRF_K + i) for i in range(len(hits))]
    for rank, i in enumerate(by_cosine):
        score[i] += w / (RRF_K + rank)
    return [hits[i] for i in sorted(range(len(hits)), key=lambda i: (-score[i], i))]


async def _dense_rerank(query: str, hits: list[SearchHit]) -> list[SearchHit]:
    """`dense_rank` with the process's encoder, off the event loop (encoding is CPU work);
    the hits unchanged when the model is not installed or dense recall is turned off
    (`embedding.set_dense_enabled`)."""
    cache = default_cache() if len(hits) > 1 and DENSE_WEIGHT > 0 else None
    if cache is None:
        return hits
    cosine = await asyncio.to_thread(similarities, cache, query, hits)
    return dense_rank(hits, cosine)
