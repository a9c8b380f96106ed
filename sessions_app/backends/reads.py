"""Session rows: create, read (the turn's window of events, or the head with its summaries),
list and delete."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, Expression, FilteredRelation, IntegerField, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.db.models.lookups import Exact, IsNull

from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.artifact_files import artifacts_delete
from sessions_app.backends.db import _owned
from sessions_app.backends.state import _merge_scopes, _view, with_scoped_state
from sessions_app.core.events import utcnow
from sessions_app.core.session import Session, SessionKey, Summary, select_summary, split_state


def _create(app: str, user_id: str, session_id: str, agent: str, title: str, state: dict[str, Any]) -> Session:
    now = utcnow()
    initial = split_state(state)
    try:
        with transaction.atomic():
            row = orm.Session.objects.create(
                id=session_id,
                app=app,
                user_id=int(user_id),
                agent=agent,
                title=title,
                state=initial.session,
                created_at=now,
                updated_at=now,
            )
            _merge_scopes(app, user_id, initial.app, initial.user)
    except IntegrityError:
        raise ValueError(f"session {session_id!r} already exists") from None
    session = mapping.session_from_row(row)
    # A new session shows the app's and the user's state from its first turn: one read.
    scoped = with_scoped_state(orm.Session.objects.filter(pk=row.pk)).values_list("app_state_view", "user_state_view")
    app_state, user_state = scoped.first() or (None, None)
    session.state = _view(row.state, app_state, user_state)
    return session


def get_session_sync(
    key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
) -> Session | None:
    """`DjangoSessionService.get_session` for synchronous callers (views, tasks)."""
    row = with_scoped_state(_owned(key)).first()
    if row is None:
        return None
    # A summary row without text is only the database lock's lease holder (sessions_app.locks).
    summaries = {s.filter_key: mapping.summary_from_row(s) for s in row.summaries.all() if s.text}
    events = orm.Event.objects.filter(session=row)
    if after_summary is not None:
        start = _turn_start(row, summaries, after_summary)
        if start is not None:
            events = events.filter(seq__gt=start)
    # Only the columns an Event is rebuilt from: building full model rows (text, JSON
    # payload twice over) for a window of hundreds of events dominated a turn's start.
    rows = events.order_by("-seq").values_list("payload", "seq", "event_id")
    if event_limit is not None:
        rows = rows[:event_limit]
    loaded = [mapping.event_from_values(payload, seq, event_id) for payload, seq, event_id in rows]
    loaded.reverse()
    session = mapping.session_from_row(row, loaded)
    session.state = _view(row.state, row.app_state_view, row.user_state_view)
    session.summaries = summaries
    return session


_HEAD_FIELDS = ("app", "user_id", "id", "agent", "title", "state", "last_seq", "created_at", "updated_at")
_HEAD_SUMMARY_FIELDS = (
    "filter_key",
    "text",
    "cutoff_at",
    "last_event_id",
    "last_seq",
    "updated_at",
    "version",
    "covered_events",
    "covered_tokens",
)


def get_session_head_sync(key: SessionKey, *, known: Mapping[str, Summary] | None = None) -> Session | None:
    """The session row and its summaries in one statement (a LEFT JOIN, a row per summary).

    With `known` (the summaries a caller already holds, by filter key), only the summaries
    that differ from them are read: one row when none changed (issue 18: a session with a
    summary per filter key otherwise read a row per key on every turn). The caller merges."""
    sessions = with_scoped_state(_owned(key))
    relation = "summaries"
    if known is not None:
        # Rows without text are the lock's lease holders: never a summary.
        condition = ~Q(summaries__text="")
        for summary in known.values():
            # Summaries only advance, and every write stamps a new version or time.
            condition &= ~Q(
                summaries__filter_key=summary.filter_key,
                summaries__version=summary.version,
                summaries__updated_at=summary.updated_at,
            )
        sessions = sessions.annotate(changed=FilteredRelation("summaries", condition=condition))
        relation = "changed"
    rows = list(
        sessions.values_list(
            *_HEAD_FIELDS, "app_state_view", "user_state_view", *(f"{relation}__{f}" for f in _HEAD_SUMMARY_FIELDS)
        )
    )
    if not rows:
        return None
    head_fields = len(_HEAD_FIELDS) + 2
    fields = dict(zip((*_HEAD_FIELDS, "app_state_view", "user_state_view"), rows[0][:head_fields], strict=True))
    session = Session(
        app=fields["app"],
        user_id=str(fields["user_id"]),
        id=fields["id"],
        agent=fields["agent"],
        title=fields["title"],
        state=_view(fields["state"], fields["app_state_view"], fields["user_state_view"]),
        last_seq=fields["last_seq"],
        created_at=fields["created_at"],
        updated_at=fields["updated_at"],
    )
    for row in rows:
        summary = dict(zip(_HEAD_SUMMARY_FIELDS, row[head_fields:], strict=True))
        if summary["filter_key"] is None or not summary["text"]:
            continue  # no summary, or only the database lock's lease holder (sessions_app.locks)
        session.summaries[summary["filter_key"]] = mapping.summary_from_row(orm.Summary(**summary))
    return session


def _turn_start(row: orm.Session, summaries: Mapping[str, Summary], filter_key: str) -> Expression | None:
    """The seq after which a turn's window starts: the boundary, or just before the user
    message of the turn the boundary cuts. An expression of two scalar subqueries (index
    scans on (session, seq), stopping at the first match), so that the window is one
    statement; None when there is no boundary."""
    chosen = select_summary(summaries, filter_key)
    if chosen is None or chosen.last_seq == 0:
        return None
    boundary = Value(chosen.last_seq)
    following = Subquery(
        orm.Event.objects.filter(session=row, seq__gt=chosen.last_seq)
        .exclude(role="system")
        .order_by("seq")
        .values("role")[:1]
    )
    head = Subquery(
        orm.Event.objects.filter(session=row, seq__lte=chosen.last_seq, role="user").order_by("-seq").values("seq")[:1]
    )
    return Case(
        # The boundary ends a turn (or nothing follows it): nothing to anchor.
        When(IsNull(following, True), then=boundary),
        When(Exact(following, "user"), then=boundary),
        default=Coalesce(head - 1, boundary),
        output_field=IntegerField(),
    )


def _list(app: str, user_id: str) -> list[Session]:
    rows = orm.Session.objects.filter(app=app, user_id=int(user_id)).order_by("-updated_at")
    return [mapping.session_from_row(r) for r in rows]


@transaction.atomic
def _delete(key: SessionKey) -> bool:
    artifacts_delete(rows=orm.Artifact.objects.filter(session__in=_owned(key)))
    deleted, _ = _owned(key).delete()
    return deleted > 0
