"""Session recall reads on the ORM: event search, windows, tool-result lookup, scans.

Every read joins the event to its session and filters on the session's app and user in
SQL, so no argument can reach another user's events.

Search, by database:

- PostgreSQL: one statement ranks the candidates of every query a session_search sends
  (the whole query and its fallbacks). For each distinct term, a bitmap scan of the GIN
  full-text index (`FTS_DOCUMENT`, created by migration 0003) lists the user's matching
  events in scope; the statement counts each term's document frequency, weights terms by
  IDF and keeps, per query, the 50 (or 5 x top_k) events covering the most weight. A
  second statement reads those events' texts, and Python scores them with the same
  `score_document` as every backend, so 0.45 means the same thing everywhere; a third
  loads the hits. A word is looked up as the words its stem stands for
  (`surface_forms`: paint, paints, painted, painting, ...), a bigram of an unsegmented
  script (Chinese, ...) as its two characters, each a lexeme of its own in the index;
  the Python score then checks the exact stem or bigram. The lexical scan
  (`scan_events`) is a case-insensitive substring search served by the `pg_trgm` index.
- SQLite (the embedded default): BM25 in Python over the newest `SCAN_CAP` (10,000)
  recallable events in scope, read with one query; analysed texts are cached by row id
  (events never change). No FTS5: keeping an FTS table in step needs triggers or a second
  write path, and at 10,000 events the scan takes tens of milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet

from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.backends.reads import session_summaries_sync
from sessions_app.core.events import Event
from sessions_app.core.recall import (
    RECALL_ROLES,
    SCAN_CAP,
    AnchorNotFoundError,
    CorpusStats,
    Document,
    DocumentCache,
    EventSearchRequest,
    EventWindow,
    Scored,
    SearchHit,
    is_unsegmented,
    query_terms,
    rank_documents,
    rank_many,
    recall_text,
    surface_forms,
)
from sessions_app.core.session import SessionKey, Summary

SEARCH_TEXT_CHARS = 100_000
# Must equal the indexed expressions of migration 0003 (tests/sessions/test_recall_django.py
# holds them equal), or PostgreSQL cannot use the indexes.
FTS_DOCUMENT = (
    r"to_tsvector('simple'::regconfig, regexp_replace(regexp_replace("
    rf"left(text, {SEARCH_TEXT_CHARS}), '[!-/:-@\[-`{{-~]+', ' ', 'g'), "
    r"'([\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf"
    r"\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff])', ' \1 ', 'g'))"
)
TRGM_DOCUMENT = f"left(text, {SEARCH_TEXT_CHARS})"
PG_CANDIDATES = 50
# Above this many matches a term is so common that its exact frequency no longer matters.
PG_TERM_CAP = 50_000

_CACHES: dict[str, DocumentCache] = {}


def _document(pk: int, text: str) -> Document:
    """The analysed text of event row `pk`, from the cache of the current database."""
    cache = _CACHES.setdefault(connection.alias, DocumentCache())
    return cache.get(pk, text)


def _user_pk(user_id: str) -> int | None:
    try:
        return int(user_id)
    except (TypeError, ValueError):
        return None


def _filter_key_q(filter_key: str) -> Q:
    """SPEC 2.3 in SQL: the event's key is empty, equal, below, or above `filter_key`."""
    parts = filter_key.split("/")
    ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
    return (
        Q(filter_key="")
        | Q(filter_key=filter_key)
        | Q(filter_key__startswith=filter_key + "/")
        | Q(filter_key__in=ancestors)
    )


def _scope(request: EventSearchRequest) -> QuerySet[orm.Event] | None:
    """The user's recallable events that the request may search, or None for nobody."""
    user = _user_pk(request.user_id)
    if user is None:
        return None
    qs = orm.Event.objects.filter(session__app=request.app, session__user_id=user, role__in=RECALL_ROLES).exclude(
        text=""
    )
    if request.session_ids:
        qs = qs.filter(session_id__in=request.session_ids)
    if request.exclude_session_ids:
        qs = qs.exclude(session_id__in=request.exclude_session_ids)
    if request.through_seq is not None:
        qs = qs.filter(seq__lte=request.through_seq)
    if request.created_before is not None:
        qs = qs.filter(created_at__lte=request.created_before)
    if request.filter_key:
        qs = qs.filter(_filter_key_q(request.filter_key))
    return qs


def _session_events(key: SessionKey) -> QuerySet[orm.Event]:
    user = _user_pk(key.user_id)
    return orm.Event.objects.filter(
        session__app=key.app, session__user_id=user if user is not None else -1, session_id=key.session_id
    )


def _events_by_pk(pks: Iterable[int]) -> dict[int, Event]:
    rows = orm.Event.objects.filter(pk__in=list(pks)).values_list("pk", "payload", "seq", "event_id")
    return {pk: mapping.event_from_values(payload, seq, event_id) for pk, payload, seq, event_id in rows}


def _hits(ranked: Sequence[Sequence[Scored]], sessions: Mapping[int, str], limit: int) -> list[list[SearchHit]]:
    """Ranked documents (keyed by row pk), per query, as hits: the events are loaded in one
    query, and what is not recallable after all (a persisted partial event) is dropped."""
    events = _events_by_pk({s.document.key for per_query in ranked for s in per_query})
    answers = []
    for per_query in ranked:
        hits = []
        for scored in per_query:
            event = events.get(scored.document.key)
            recalled = recall_text(event) if event is not None else None
            if event is None or recalled is None:
                continue
            hits.append(
                SearchHit(
                    session_id=sessions[scored.document.key],
                    event=event,
                    text=recalled[0],
                    role=recalled[1],
                    score=scored.score,
                    relevance=scored.relevance,
                )
            )
            if len(hits) >= limit:
                break
        answers.append(hits)
    return answers


# -- search -----------------------------------------------------------------------------------


def search_events(request: EventSearchRequest) -> list[SearchHit]:
    return search_many(request, [request.query])[0]


def search_many(request: EventSearchRequest, queries: Sequence[str]) -> list[list[SearchHit]]:
    qs = _scope(request)
    if qs is None or not any(query_terms(q) for q in queries):
        return [[] for _ in queries]
    if connection.vendor == "postgresql":
        return _search_postgres(request, queries, qs)
    return _search_bm25(request, queries, qs)


def _search_bm25(request: EventSearchRequest, queries: Sequence[str], qs: QuerySet[orm.Event]) -> list[list[SearchHit]]:
    rows = qs.order_by("-pk").values_list("pk", "session_id", "text")[:SCAN_CAP]
    sessions: dict[int, str] = {}
    documents: list[Document] = []
    for pk, session_id, text in rows:
        sessions[pk] = session_id
        documents.append(_document(pk, text))
    ranked = rank_many(
        queries,
        documents,
        limit=request.max_results + 5,
        min_score=request.min_score,
        recency=lambda d: d.key,
    )
    return _hits(ranked, sessions, request.max_results)


def tsquery_for(term: str) -> str:
    """The tsquery text of one analysed term: a stem as the words it stands for, a bigram
    of an unsegmented script as both of its characters (the exact bigram is checked after,
    in Python)."""
    if all(is_unsegmented(c) for c in term):
        return " & ".join("'" + c + "'" for c in term)
    return " | ".join("'" + form.replace("'", "''") + "'" for form in surface_forms(term))


def _scope_sql(request: EventSearchRequest) -> tuple[str, list[Any]]:
    """WHERE conditions (aliases e, s) and their parameters for the request's scope."""
    conditions = [
        "s.app = %s",
        "s.user_id = %s",
        "e.role IN ('user', 'assistant', 'tool')",
    ]
    params: list[Any] = [request.app, _user_pk(request.user_id)]
    if request.session_ids:
        conditions.append("e.session_id = ANY(%s)")
        params.append(list(request.session_ids))
    if request.exclude_session_ids:
        conditions.append("NOT (e.session_id = ANY(%s))")
        params.append(list(request.exclude_session_ids))
    if request.through_seq is not None:
        conditions.append("e.seq <= %s")
        params.append(request.through_seq)
    if request.created_before is not None:
        conditions.append("e.created_at <= %s")
        params.append(request.created_before)
    if request.filter_key:
        parts = request.filter_key.split("/")
        ancestors = ["/".join(parts[:i]) for i in range(1, len(parts))]
        conditions.append("(e.filter_key = '' OR e.filter_key = %s OR e.filter_key LIKE %s OR e.filter_key = ANY(%s))")
        params.extend([request.filter_key, _like_prefix(request.filter_key + "/"), ancestors])
    return " AND ".join(conditions), params


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _like_contains(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def postgres_search_sql(
    request: EventSearchRequest, queries_terms: Sequence[Sequence[str]], *, candidates: int
) -> tuple[str, list[Any], list[str]]:
    """The statement that ranks PostgreSQL's candidates for several queries at once (see
    the module docstring), its parameters, and the distinct terms in the order it numbers
    them. Returns rows (query number, event pk, document frequencies as JSON, average
    length of the matching events, number of events in scope)."""
    event_table = orm.Event._meta.db_table
    session_table = orm.Session._meta.db_table
    terms = list(dict.fromkeys(t for q in queries_terms for t in q))
    number = {t: i for i, t in enumerate(terms)}
    where, scope_params = _scope_sql(request)
    doc = FTS_DOCUMENT.replace("left(text,", "left(e.text,")
    branches = []
    params: list[Any] = []
    for i, term in enumerate(terms):
        branches.append(
            f"(SELECT {i} AS i, e.id, octet_length(e.text) AS len FROM {event_table} e "
            f"JOIN {session_table} s ON s.id = e.session_id "
            f"WHERE {where} AND {doc} @@ to_tsquery('simple', %s) LIMIT {PG_TERM_CAP})"
        )
        params.extend([*scope_params, tsquery_for(term)])
    doc_count_sql = (
        f"SELECT GREATEST(COALESCE(SUM(s.last_seq), 0), 1) FROM {session_table} s WHERE s.app = %s AND s.user_id = %s"
    )
    params.extend([request.app, _user_pk(request.user_id)])
    if request.session_ids:
        doc_count_sql += " AND s.id = ANY(%s)"
        params.append(list(request.session_ids))
    if request.exclude_session_ids:
        doc_count_sql += " AND NOT (s.id = ANY(%s))"
        params.append(list(request.exclude_session_ids))
    uses = ", ".join(f"({q}, {number[t]})" for q, query in enumerate(queries_terms) for t in dict.fromkeys(query))
    sql = (
        f"WITH m AS ({' UNION ALL '.join(branches)}), "
        f"total AS ({doc_count_sql}), "
        "df AS (SELECT i, count(*) AS n FROM m GROUP BY i), "
        # float8, not numeric: summing and sorting thousands of numerics dominated the plan.
        "w AS (SELECT df.i, ln(1.0::float8 + (t.n - LEAST(df.n, t.n) + 0.5::float8) / (LEAST(df.n, t.n) + 0.5::float8)) "
        "      AS idf FROM df, total AS t(n)), "
        f"qt(q, i) AS (VALUES {uses}), "
        "scored AS (SELECT qt.q, m.id, sum(w.idf) AS cover, max(m.len) AS len "
        "           FROM m JOIN w USING (i) JOIN qt USING (i) GROUP BY qt.q, m.id), "
        "ranked AS (SELECT q, id, row_number() OVER (PARTITION BY q ORDER BY cover DESC, len ASC, id DESC) AS r "
        "           FROM scored) "
        "SELECT q, id, (SELECT json_agg(json_build_array(i, n)) FROM df), (SELECT avg(len) FROM m), "
        "       (SELECT n FROM total AS t(n)) "
        f"FROM ranked WHERE r <= {int(candidates)}"
    )
    return sql, params, terms


def _search_postgres(
    request: EventSearchRequest, queries: Sequence[str], qs: QuerySet[orm.Event]
) -> list[list[SearchHit]]:
    queries_terms = [query_terms(q) for q in queries]
    candidates = max(PG_CANDIDATES, 5 * request.max_results)
    sql, params, terms = postgres_search_sql(request, queries_terms, candidates=candidates)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return [[] for _ in queries]
    raw_df, avg_len, doc_count = rows[0][2], rows[0][3], rows[0][4]
    pairs = json.loads(raw_df) if isinstance(raw_df, str) else raw_df
    stats = CorpusStats(
        doc_count=int(doc_count),
        avg_length=max(float(avg_len or 1.0), 1.0),
        doc_freq={terms[i]: n for i, n in pairs},
    )
    per_query: dict[int, list[int]] = {}
    for q, pk, *_ in rows:
        per_query.setdefault(q, []).append(pk)
    texts = qs.filter(pk__in={pk for _, pk, *_ in rows}).values_list("pk", "session_id", "text")
    sessions: dict[int, str] = {}
    documents: dict[int, Document] = {}
    for pk, session_id, text in texts:
        sessions[pk] = session_id
        documents[pk] = _document(pk, text)
    ranked = [
        rank_documents(
            query,
            [documents[pk] for pk in per_query.get(q, []) if pk in documents],
            limit=request.max_results + 5,
            min_score=request.min_score,
            stats=stats,
            recency=lambda d: d.key,
        )
        for q, query in enumerate(queries)
    ]
    return _hits(ranked, sessions, request.max_results)


def explain_search(request: EventSearchRequest, queries: Sequence[str] | None = None) -> str:
    """EXPLAIN (ANALYZE) of PostgreSQL's search statement, for the benchmark."""
    queries_terms = [query_terms(q) for q in (queries or [request.query])]
    sql, params, _ = postgres_search_sql(request, queries_terms, candidates=max(PG_CANDIDATES, 5 * request.max_results))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


# -- windows, tool results, summaries, scans ---------------------------------------------------


def _recallable(rows: Iterable[tuple[Any, ...]]) -> list[Event]:
    events = [mapping.event_from_values(payload, seq, event_id) for payload, seq, event_id in rows]
    return [e for e in events if recall_text(e) is not None]


def _neighbours(qs: QuerySet[orm.Event], *, seq: int, count: int, older: bool) -> list[Event]:
    """Up to `count` recallable events next to `seq`, nearest first, skipping the rest."""
    found: list[Event] = []
    if count <= 0:
        return found
    base = qs.filter(role__in=RECALL_ROLES).exclude(text="")
    cursor = seq
    while len(found) < count:
        page_qs = base.filter(seq__lt=cursor).order_by("-seq") if older else base.filter(seq__gt=cursor).order_by("seq")
        rows = list(page_qs.values_list("payload", "seq", "event_id")[: count - len(found) + 4])
        if not rows:
            break
        found.extend(_recallable(rows)[: count - len(found)])
        cursor = rows[-1][1]
    return found


def event_window(key: SessionKey, anchor_event_id: str, before: int, after: int) -> EventWindow:
    qs = _session_events(key)
    row = qs.filter(event_id=anchor_event_id).values_list("payload", "seq", "event_id").first()
    anchor = _recallable([row]) if row is not None else []
    if not anchor:
        raise AnchorNotFoundError(f"event_id {anchor_event_id!r} not found in session {key.session_id!r}")
    seq = row[1]
    older = _neighbours(qs, seq=seq, count=before, older=True)
    newer = _neighbours(qs, seq=seq, count=after, older=False)
    return EventWindow(
        session_id=key.session_id, anchor_event_id=anchor_event_id, events=(*reversed(older), anchor[0], *newer)
    )


def find_tool_result(key: SessionKey, tool_call_id: str) -> Event | None:
    rows = (
        _session_events(key)
        .filter(role="tool", payload__message__tool_call_id=tool_call_id)
        .order_by("-seq")
        .values_list("payload", "seq", "event_id")
    )
    for payload, seq, event_id in rows[:5]:
        event = mapping.event_from_values(payload, seq, event_id)
        if not event.partial:
            return event
    return None


def find_tool_call(key: SessionKey, tool_call_id: str, before_seq: int | None) -> Event | None:
    """The latest assistant event (before `before_seq`) that made the call `tool_call_id`.

    Calls sit just before their results, so the newest few assistant rows are read; the
    JSON match is done in Python to stay the same on SQLite and PostgreSQL."""
    qs = _session_events(key).filter(role="assistant")
    if before_seq is not None:
        qs = qs.filter(seq__lt=before_seq)
    for payload, seq, event_id in qs.order_by("-seq").values_list("payload", "seq", "event_id")[:50]:
        event = mapping.event_from_values(payload, seq, event_id)
        if event.message is not None and any(c.id == tool_call_id for c in event.message.tool_calls):
            return event
    return None


def summaries(key: SessionKey) -> dict[str, Summary]:
    return session_summaries_sync(key)


def scan_events(
    key: SessionKey,
    needles: Sequence[str],
    through_seq: int | None,
    created_before: datetime | None,
    limit: int = SCAN_CAP,
) -> list[Event]:
    lowered = [n.lower() for n in needles if n]
    if not lowered:
        return []
    qs = _session_events(key).filter(role__in=RECALL_ROLES).exclude(text="")
    if through_seq is not None:
        qs = qs.filter(seq__lte=through_seq)
    if created_before is not None:
        qs = qs.filter(created_at__lte=created_before)
    if connection.vendor == "postgresql":
        return _scan_postgres(key, lowered, through_seq, created_before, limit)
    # SQLite: its LIKE folds ASCII case only, so the match is done here, on the newest rows.
    rows = qs.order_by("-seq").values_list("pk", "text")[:limit]
    matched = [pk for pk, text in rows if any(n in text.lower() for n in lowered)]
    events = _events_by_pk(matched)
    return sorted((e for e in events.values() if recall_text(e) is not None), key=lambda e: e.seq or 0)


def _scan_postgres(
    key: SessionKey, needles: Sequence[str], through_seq: int | None, created_before: datetime | None, limit: int
) -> list[Event]:
    """ILIKE over the trigram-indexed expression: the index narrows, PostgreSQL checks."""
    doc = TRGM_DOCUMENT.replace("left(text,", "left(e.text,")
    conditions = [
        "s.app = %s",
        "s.user_id = %s",
        "e.session_id = %s",
        "e.role IN ('user', 'assistant', 'tool')",
        "e.text <> ''",
        "(" + " OR ".join(f"{doc} ILIKE %s" for _ in needles) + ")",
    ]
    params: list[Any] = [key.app, _user_pk(key.user_id), key.session_id, *(_like_contains(n) for n in needles)]
    if through_seq is not None:
        conditions.append("e.seq <= %s")
        params.append(through_seq)
    if created_before is not None:
        conditions.append("e.created_at <= %s")
        params.append(created_before)
    sql = (
        f"SELECT e.payload, e.seq, e.event_id FROM {orm.Event._meta.db_table} e "
        f"JOIN {orm.Session._meta.db_table} s ON s.id = e.session_id "
        f"WHERE {' AND '.join(conditions)} ORDER BY e.seq DESC LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, limit])
        rows = [(json.loads(p) if isinstance(p, str) else p, seq, eid) for p, seq, eid in cursor.fetchall()]
    return list(reversed(_recallable(rows)))
