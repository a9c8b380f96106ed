"""Session recall: where one search looks (SPEC 5.2): the query fallback over the index,
the lexical scan of the current session, a summary section's range, the other sessions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import cast

from sessions_app.core.events import Event, filter_matches
from sessions_app.core.recall.analysis import _WORD, _trimmed_keywords, keyword_tokens, search_queries
from sessions_app.core.recall.defaults import SCAN_CAP, RangeError, RecallError
from sessions_app.core.recall.index import EventRange, EventSearchRequest, RecallIndex, SearchHit, recall_text
from sessions_app.core.recall.scoring import Document, make_document, rank_many, scan_score
from sessions_app.core.recall.slices import HiddenBoundary, hidden_boundary
from sessions_app.core.session import Session


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
