"""Session recall: session_search (SPEC 5.2)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypedDict, cast

from sessions_app.core.events import Event, filter_matches
from sessions_app.core.recall.analysis import (
    _WORD,
    _trimmed_keywords,
    keyword_tokens,
    named_speakers,
    normalize_space,
    query_terms,
    search_queries,
)
from sessions_app.core.recall.defaults import (
    CONTEXT_AFTER,
    CONTEXT_BEFORE,
    CONTEXT_CONTENT_LIMIT,
    DEFAULT_SCOPE,
    DEFAULT_TOP_K,
    EXPANDED_HITS,
    HISTORY_NOTE,
    HYBRID_POOL,
    MAX_TOP_K,
    MIN_SCORE,
    NEIGHBOUR_WEIGHT,
    NO_MATCH_BELOW,
    NO_MATCH_NOTE,
    RRF_K,
    SCAN_CAP,
    SCOPES,
    SNIPPET_CHARS,
    SPEAKER_BOOST,
    TRIGRAM_WEIGHT,
    AnchorNotFoundError,
    RangeError,
    Ranking,
    RecallError,
    Scope,
)
from sessions_app.core.recall.embedding import EmbeddingCache, default_cache
from sessions_app.core.recall.index import (
    EventRange,
    EventSearchRequest,
    EventWindow,
    RecallIndex,
    SearchHit,
    recall_text,
)
from sessions_app.core.recall.load import parse_range
from sessions_app.core.recall.scoring import Document, answer_confidence, make_document, rank_many, scan_score
from sessions_app.core.recall.slices import HiddenBoundary, _window_snippet, excerpt, hidden_boundary, loaded_message
from sessions_app.core.redo import in_spans
from sessions_app.core.session import Session, SessionKey

# -- session_search (SPEC 5.2) ----------------------------------------------------------------


_SCOPE_BY_NAME: dict[str, Scope] = {s: s for s in SCOPES}


def normalize_scope(scope: str | None) -> Scope:
    """A known scope, else the default (SPEC 5.2: unknown scopes search current_hidden)."""
    return _SCOPE_BY_NAME.get((scope or "").strip().lower(), DEFAULT_SCOPE)


def normalize_top_k(top_k: int | None) -> int:
    if top_k is None or top_k <= 0:
        return DEFAULT_TOP_K
    return min(top_k, MAX_TOP_K)


def _merge(current: list[SearchHit], incoming: Iterable[SearchHit]) -> list[SearchHit]:
    """Merge by session:event keeping the best score; by score, BM25, then newest."""
    by_key = {h.key: h for h in current}
    for hit in incoming:
        known = by_key.get(hit.key)
        if known is None or hit.score > known.score:
            by_key[hit.key] = hit
    return sorted(by_key.values(), key=lambda h: (h.score, h.relevance, h.event.created_at), reverse=True)


def fallback_queries(query: str) -> list[str]:
    """Every query one search sends to the index: `search_queries`, then each keyword
    alone (those not already in the list)."""
    queries = search_queries(query)
    return queries + [k for k in _trimmed_keywords(query) if k not in queries]


async def search_with_fallback(index: RecallIndex, request: EventSearchRequest) -> list[SearchHit]:
    """SPEC 5.2's query fallback: the whole query, then its clauses, then keyword groups.

    Deviations, both measured on LoCoMo and QMSum by bench/recall.py:
    - broadening goes on until top_k events are found (SPEC stops at the first success of
      a fallback unless the query is compound), and each query's hits rank after those of
      the queries before it, so the whole query's hits always come first and fallback hits
      only fill the slots it left;
    - when the keyword groups still leave slots free, each keyword alone is searched last,
      and those hits are merged by BM25 (so the rarest keyword's events come first). A
      short question ("what did they say about the equipment budget?") has no keyword
      group smaller than itself, and without this the floor leaves most slots empty.
    Each hit keeps the score of the query that found it, and `SearchHit.query` names it.
    All the queries go to the index in one `search_many` call: one pass over the index,
    whatever the number of fallbacks.
    """
    queries = search_queries(request.query)
    if not queries:
        return []
    singles = fallback_queries(request.query)[len(queries) :]
    results = await index.search_many(request, [*queries, *singles])
    found: dict[tuple[str, str], SearchHit] = {}
    for query, hits in zip(queries, results, strict=False):
        for hit in hits:
            found.setdefault(hit.key, replace(hit, query=query))
        if len(found) >= request.max_results:
            return list(found.values())[: request.max_results]
    by_keyword = [
        replace(hit, query=keyword)
        for keyword, hits in zip(singles, results[len(queries) :], strict=True)
        for hit in hits
    ]
    for hit in sorted(by_keyword, key=lambda h: h.relevance, reverse=True):
        found.setdefault(hit.key, hit)
    return list(found.values())[: request.max_results]


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


@dataclass(frozen=True, kw_only=True)
class HitFilter:
    """session_search's hard filters (issue 12, C7): the event's author (a speaker), its
    role, the tool whose result it is. Empty: no filter. Compared case-insensitively."""

    speaker: str = ""
    role: str = ""
    tool_name: str = ""

    def __bool__(self) -> bool:
        return bool(self.speaker or self.role or self.tool_name)

    def accepts(self, hit: SearchHit) -> bool:
        if self.speaker and hit.event.author.lower() != self.speaker.lower():
            return False
        if self.role and hit.role != self.role.lower():
            return False
        message = hit.event.message
        return not (self.tool_name and (message is None or (message.tool_name or "").lower() != self.tool_name.lower()))


# Manifest dispositions (runs.core.context.manifest, stored with each model call) as the
# reason a hit is not in the model's view. Kept as strings: sessions_app.core never
# imports runs.core.
_HIDDEN_BY_DISPOSITION = {
    "summarized": "summarized",
    "placeholder": "elided",
    "truncated": "truncated",
    "withheld": "withheld",
    "gap": "not_loaded",
    "verbatim": "visible",
    "silent": "visible",
}


def last_manifest_dispositions(session: Session) -> dict[int, str]:
    """seq -> disposition in the newest model call whose manifest the loaded events hold
    (`extensions["context"]["manifest"]["ranges"]`); empty when none was recorded."""
    for event in reversed(session.events):
        context = event.extensions.get("context") if isinstance(event.extensions, Mapping) else None
        manifest = context.get("manifest") if isinstance(context, Mapping) else None
        ranges = manifest.get("ranges") if isinstance(manifest, Mapping) else None
        if not isinstance(ranges, list):
            continue
        out: dict[int, str] = {}
        for item in ranges:
            if isinstance(item, list) and len(item) == 3 and isinstance(item[1], int) and isinstance(item[2], int):
                for seq in range(item[1], item[2] + 1):
                    out[seq] = str(item[0])
        return out
    return {}


def why_hidden(
    hit: SearchHit, *, session: Session, boundary: HiddenBoundary | None, dispositions: Mapping[int, str]
) -> str:
    """Why the model does not see this hit in full: `summarized` (behind the summary
    boundary), `elided` (a placeholder), `truncated` (head and tail only), `withheld`
    (a tool policy), `not_loaded` (outside the history window), `other_session`; or
    `visible` (the last call carried it verbatim) and `unknown` (no call recorded yet)."""
    if hit.session_id != session.id:
        return "other_session"
    seq = hit.event.seq
    if boundary is not None:
        if boundary.through_seq is not None and seq is not None and seq <= boundary.through_seq:
            return "summarized"
        if (
            boundary.through_seq is None
            and boundary.cutoff_at is not None
            and hit.event.created_at <= boundary.cutoff_at
        ):
            return "summarized"
    if seq is not None and seq in dispositions:
        return _HIDDEN_BY_DISPOSITION.get(dispositions[seq], dispositions[seq])
    return "unknown"


async def _scan_session(
    index: RecallIndex,
    session: Session,
    query: str,
    *,
    top_k: int,
    min_score: float,
    boundary: HiddenBoundary | None,
    filter_key: str,
) -> list[SearchHit]:
    """SPEC 5.2's lexical scan of the current session: substring matching of each query of
    the fallback list until top_k events are found."""
    merged: list[SearchHit] = []
    for q in search_queries(query):
        needles = keyword_tokens(q) or _WORD.findall(q.lower())
        if not needles:
            continue
        events = await index.scan_events(
            session.key,
            needles=needles,
            through_seq=boundary.through_seq if boundary else None,
            created_before=boundary.cutoff_at if boundary and boundary.through_seq is None else None,
        )
        found = []
        for event in events:
            recalled = recall_text(event)
            if recalled is None or (filter_key and not filter_matches(event.filter_key, filter_key)):
                continue
            score = scan_score(q, recalled[0])
            if score >= min_score:
                found.append(
                    SearchHit(session_id=session.id, event=event, text=recalled[0], role=recalled[1], score=score)
                )
        merged = _merge(merged, found)
        if len(merged) >= top_k:
            break
    return merged[:top_k]


async def _search_current(
    index: RecallIndex,
    session: Session,
    query: str,
    *,
    top_k: int,
    min_score: float,
    filter_key: str,
    hidden: bool,
) -> list[SearchHit]:
    boundary: HiddenBoundary | None = None
    if hidden:
        summaries = await index.summaries(session.key)
        boundary = hidden_boundary(summaries, filter_key=filter_key, state=session.state)
        if boundary is None:
            return []
    request = EventSearchRequest(
        query=query,
        app=session.app,
        user_id=session.user_id,
        session_ids=(session.id,),
        through_seq=boundary.through_seq if boundary else None,
        created_before=boundary.cutoff_at if boundary and boundary.through_seq is None else None,
        filter_key=filter_key,
        max_results=top_k,
        min_score=min_score,
    )
    results = await search_with_fallback(index, request)
    if results:
        return results
    return await _scan_session(
        index, session, query, top_k=top_k, min_score=min_score, boundary=boundary, filter_key=filter_key
    )


class _RangeIndex:
    """A `search_many` over one session's events of one range, so that a section-scoped
    search runs the same fallback and scoring as the whole-session one (statistics are the
    range's own: a word common elsewhere but rare in the section still ranks there)."""

    def __init__(self, session_id: str, events: Sequence[Event]) -> None:
        self.session_id = session_id
        self.events = {e.id: e for e in events}
        self.documents: list[Document] = []
        self.roles: dict[str, str] = {}
        for event in events:
            recalled = recall_text(event)
            if recalled is not None:
                self.documents.append(make_document(event.id, recalled[0]))
                self.roles[event.id] = recalled[1]

    async def search_many(self, request: EventSearchRequest, queries: Sequence[str]) -> list[list[SearchHit]]:
        ranked = rank_many(
            queries,
            self.documents,
            limit=request.max_results,
            min_score=request.min_score,
            recency=lambda d: self.events[str(d.key)].created_at,
        )
        return [
            [
                SearchHit(
                    session_id=self.session_id,
                    event=self.events[str(s.document.key)],
                    text=s.document.text,
                    role=self.roles[str(s.document.key)],
                    score=s.score,
                    relevance=s.relevance,
                )
                for s in per_query
            ]
            for per_query in ranked
        ]


async def _search_section(
    index: RecallIndex,
    session: Session,
    query: str,
    *,
    first_seq: int,
    last_seq: int,
    top_k: int,
    min_score: float,
    filter_key: str,
) -> list[SearchHit]:
    """Issue 24, item 4: search only the current session's events with seqs in
    `first_seq`..`last_seq` (a summary section's range), whether hidden or not. Raises
    `RangeError` when the range ends past the ledger, `AnchorNotFoundError` when the
    session is not the user's (the index checks)."""
    finder = getattr(index, "events_in_range", None)
    if finder is None:
        raise RecallError("this session store cannot search by range; search without a section")
    found: EventRange = await finder(session.key, first_seq=first_seq, last_seq=last_seq, limit=SCAN_CAP)
    if last_seq > found.ledger_last_seq:
        raise RangeError(
            f"range {first_seq}-{last_seq} is outside the ledger of session {session.id!r}, "
            f"which ends at seq {found.ledger_last_seq}"
        )
    events = [e for e in found.events if not filter_key or filter_matches(e.filter_key, filter_key)]
    request = EventSearchRequest(
        query=query,
        app=session.app,
        user_id=session.user_id,
        session_ids=(session.id,),
        filter_key=filter_key,
        max_results=top_k,
        min_score=min_score,
    )
    ranged = _RangeIndex(session.id, events)
    hits = await search_with_fallback(cast(RecallIndex, ranged), request)
    if hits:
        return hits
    # As SPEC 5.2's lexical scan does for the whole session: substrings tokenisation missed.
    scanned = []
    for event in events:
        recalled = recall_text(event)
        score = scan_score(query, recalled[0]) if recalled is not None else 0.0
        if recalled is not None and score >= min_score:
            scanned.append(
                SearchHit(session_id=session.id, event=event, text=recalled[0], role=recalled[1], score=score)
            )
    return _merge([], scanned)[:top_k]


async def _search_others(
    index: RecallIndex, session: Session, query: str, *, top_k: int, min_score: float, filter_key: str
) -> list[SearchHit]:
    request = EventSearchRequest(
        query=query,
        app=session.app,
        user_id=session.user_id,
        exclude_session_ids=(session.id,),
        filter_key=filter_key,
        max_results=top_k,
        min_score=min_score,
    )
    return await search_with_fallback(index, request)


async def _hit_dict(
    index: RecallIndex,
    hit: SearchHit,
    *,
    position: int,
    scope: Scope,
    session: Session,
    query: str,
    terms: Sequence[str],
    hidden: str,
) -> dict[str, Any]:
    message = hit.event.message
    hit_scope = (
        ("current_session" if scope == "current_session" else "current_hidden")
        if hit.session_id == session.id
        else "other_sessions"
    )
    found: dict[str, Any] = {
        "scope": hit_scope,
        "session_id": hit.session_id,
        "event_id": hit.event.id,
        "seq": hit.event.seq,
        "created": hit.event.created_at.isoformat(),
        "role": hit.role,
        "score": round(hit.score, 4),
        "hidden": hidden,
    }
    if hit.query and hit.query != query:
        found["matched_query"] = hit.query  # a fallback found it; its score is for that query
    window: EventWindow | None = None
    if position < EXPANDED_HITS:
        key = SessionKey(app=session.app, user_id=session.user_id, session_id=hit.session_id)
        try:
            window = await index.event_window(
                key, anchor_event_id=hit.event.id, before=CONTEXT_BEFORE, after=CONTEXT_AFTER
            )
        except AnchorNotFoundError:
            window = None
    snippet = _window_snippet(window, terms) if window is not None else ""
    found["snippet"] = snippet or excerpt(hit.text, SNIPPET_CHARS, terms) or "<empty>"
    if window is not None:
        found["context"] = [loaded_message(e, limit=CONTEXT_CONTENT_LIMIT) for e in window.events]
    if message is not None and message.tool_call_id is not None:
        found["tool_call_id"] = message.tool_call_id
        found["tool_name"] = message.tool_name
    size = len(hit.text.encode("utf-8"))
    found["content_bytes"] = size
    found["content_truncated"] = len(normalize_space(hit.text)) > SNIPPET_CHARS
    return found


async def _superseded_spans(
    index: RecallIndex, session: Session, hits: Sequence[SearchHit]
) -> dict[str, tuple[tuple[int, int], ...]]:
    """Session id -> the seq ranges of its redone turns, for the sessions `hits` touch
    (none when the index cannot tell)."""
    finder = getattr(index, "superseded_spans", None)
    if finder is None:
        return {}
    return {
        sid: await finder(SessionKey(app=session.app, user_id=session.user_id, session_id=sid))
        for sid in sorted({h.session_id for h in hits})
    }


class _Bounds(TypedDict):
    """What every scope's search shares."""

    top_k: int
    min_score: float
    filter_key: str


async def session_search(
    index: RecallIndex,
    *,
    session: Session,
    query: str,
    scope: str | None = DEFAULT_SCOPE,
    top_k: int | None = DEFAULT_TOP_K,
    min_score: float | None = None,
    filter_key: str = "",
    speaker: str | None = None,
    role: str | None = None,
    tool_name: str | None = None,
    ranking: Ranking = "hybrid",
    min_confidence: float | None = None,
    section: str | None = None,
    first_seq: int | str | None = None,
    last_seq: int | str | None = None,
    include_superseded: bool = False,
) -> dict[str, Any]:
    """SPEC 5.2: search the user's history and answer what the model reads.

    `current_hidden` (default) searches the current session's events hidden behind its
    summary boundary; `current_session` the whole current session; `other_sessions` the
    user's other sessions; `all_sessions` the hidden part of this one and all others.
    The first two hits carry a ±2-event context window.

    Beyond SPEC (issue 12, C7): `ranking="hybrid"` (default) re-ranks a pool of lexical
    hits with `hybrid_rank`; `speaker`, `role` and `tool_name` filter hits; every hit
    says why the model does not see it (`hidden`, see `why_hidden`).

    Issue 24: every hit carries its `confidence` (`answer_confidence`); when the best is
    under `min_confidence` (default `NO_MATCH_BELOW`; 0 turns abstention off) the answer
    has no results, `no_match: true`, the best confidence seen and `NO_MATCH_NOTE`.

    Issue 24, item 4 (C1): `section` ("41-77", as a summary header prints it) or
    `first_seq` and `last_seq` search only the current session's events in that range,
    whatever `scope` says (the answer's scope is `section` and names the range): following
    a summary section's pointer finds the evidence instead of loading the whole range.
    A bad range raises `RangeError`, another user's session `AnchorNotFoundError`.

    Issue 21: events of a turn the user regenerated or edited away (`sessions_app.core.redo`)
    are history they replaced and are left out; `include_superseded` keeps them, each
    marked `superseded: true` with `hidden: superseded`.
    """
    query = normalize_space(query or "")
    scoped = bool((section or "").strip()) or first_seq is not None or last_seq is not None
    # Parsed before the empty-query answer: a bad range is named even without a query.
    span = parse_range(section=section, first_seq=first_seq, last_seq=last_seq) if scoped else None
    chosen = normalize_scope(scope)
    if not query:
        return {"query": "", "scope": DEFAULT_SCOPE, "results": [], "count": 0}
    k = normalize_top_k(top_k)
    floor = MIN_SCORE if min_score is None else max(0.0, float(min_score))
    filters = HitFilter(speaker=(speaker or "").strip(), role=(role or "").strip(), tool_name=(tool_name or "").strip())
    # The pool: more than k when something will re-rank or filter it.
    pool = max(k, HYBRID_POOL) if ranking == "hybrid" or filters else k
    common = _Bounds(top_k=pool, min_score=floor, filter_key=filter_key)
    if span is not None:
        chosen = "current_session"  # a range of this session, hidden or not
        hits = await _search_section(index, session, query, first_seq=span[0], last_seq=span[1], **common)
    elif chosen == "current_session":
        hits = await _search_current(index, session, query, hidden=False, **common)
    elif chosen == "current_hidden":
        hits = await _search_current(index, session, query, hidden=True, **common)
    elif chosen == "other_sessions":
        hits = await _search_others(index, session, query, **common)
    else:
        current = await _search_current(index, session, query, hidden=True, **common)
        others = await _search_others(index, session, query, **common)
        hits = _merge(current, others)
    if filters:
        hits = [h for h in hits if filters.accepts(h)]
    replaced = await _superseded_spans(index, session, hits)
    superseded = {h.key for h in hits if in_spans(h.event.seq or 0, replaced.get(h.session_id, ()))}
    if not include_superseded:
        hits = [h for h in hits if h.key not in superseded]
    if ranking == "hybrid":
        hits = await _dense_rerank(query, hybrid_rank(query, hits))
    participants = {h.event.author for h in hits} | {e.author for e in session.events}
    confidence = {
        h.key: answer_confidence(query, h.text, author=h.event.author, participants=participants) for h in hits
    }
    hits = hits[:k]
    best = max((confidence[h.key] for h in hits), default=0.0)
    threshold = NO_MATCH_BELOW if min_confidence is None else max(0.0, float(min_confidence))
    if hits and best < threshold:
        return {
            "query": query,
            "scope": chosen,
            "results": [],
            "count": 0,
            "no_match": True,
            "best_confidence": round(best, 4),
            "note": NO_MATCH_NOTE,
            **({"section": f"{span[0]}-{span[1]}"} if span is not None else {}),
        }
    boundary = hidden_boundary(await index.summaries(session.key), filter_key=filter_key, state=session.state)
    dispositions = last_manifest_dispositions(session)
    terms = keyword_tokens(query) or query_terms(query)
    results = [
        {
            **await _hit_dict(
                index,
                hit,
                position=i,
                scope=chosen,
                session=session,
                query=query,
                terms=terms,
                hidden="superseded"
                if hit.key in superseded
                else why_hidden(hit, session=session, boundary=boundary, dispositions=dispositions),
            ),
            "confidence": round(confidence[hit.key], 4),
            **({"superseded": True} if hit.key in superseded else {}),
        }
        for i, hit in enumerate(h for h in hits if h.event.id)
    ]
    answer: dict[str, Any] = {"query": query, "scope": chosen, "results": results, "count": len(results)}
    if span is not None:
        answer["section"] = f"{span[0]}-{span[1]}"
    if results:
        answer["note"] = HISTORY_NOTE
        answer["best_confidence"] = round(best, 4)
    elif hits:
        answer.update(no_match=True, best_confidence=round(best, 4), note=NO_MATCH_NOTE)
    elif chosen in ("current_hidden", "all_sessions") and boundary is None:
        answer["hint"] = (
            "Nothing of this session is hidden behind a summary yet; use scope current_session or other_sessions."
        )
    else:
        answer.update(no_match=True, note=NO_MATCH_NOTE)
    return answer
