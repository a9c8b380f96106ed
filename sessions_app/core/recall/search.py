"""Session recall: session_search (SPEC 5.2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from sessions_app.core.recall.analysis import keyword_tokens, normalize_space, query_terms
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
    NO_MATCH_BELOW,
    NO_MATCH_NOTE,
    SCOPES,
    SNIPPET_CHARS,
    AnchorNotFoundError,
    Ranking,
    Scope,
)
from sessions_app.core.recall.index import EventWindow, RecallIndex, SearchHit
from sessions_app.core.recall.load import parse_range
from sessions_app.core.recall.ranking import (
    DENSE_WEIGHT,
    _dense_rerank,
    dense_rank,
    hybrid_rank,
    similarities,
    trigrams,
)
from sessions_app.core.recall.scopes import (
    _merge,
    _search_current,
    _search_others,
    _search_section,
    fallback_queries,
    search_with_fallback,
)
from sessions_app.core.recall.scoring import answer_confidence
from sessions_app.core.recall.slices import HiddenBoundary, _window_snippet, excerpt, hidden_boundary, loaded_message
from sessions_app.core.redo import in_spans
from sessions_app.core.session import Session, SessionKey

# Moved to ranking.py and scopes.py (issue 22 item 5); still importable from here.
__all__ = [
    "DENSE_WEIGHT",
    "HitFilter",
    "dense_rank",
    "fallback_queries",
    "hybrid_rank",
    "last_manifest_dispositions",
    "normalize_scope",
    "normalize_top_k",
    "search_with_fallback",
    "session_search",
    "similarities",
    "trigrams",
    "why_hidden",
]

# -- session_search (SPEC 5.2) ----------------------------------------------------------------


_SCOPE_BY_NAME: dict[str, Scope] = {s: s for s in SCOPES}


def normalize_scope(scope: str | None) -> Scope:
    """A known scope, else the default (SPEC 5.2: unknown scopes search current_hidden)."""
    return _SCOPE_BY_NAME.get((scope or "").strip().lower(), DEFAULT_SCOPE)


def normalize_top_k(top_k: int | None) -> int:
    if top_k is None or top_k <= 0:
        return DEFAULT_TOP_K
    return min(top_k, MAX_TOP_K)


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
