"""DjangoSessionService: the SessionService contract on the ORM.

Each async method wraps one synchronous, transactional function. They run in worker
threads (`thread_sensitive=False`): a run's loop must never wait on the one thread that
serves synchronous views, which may itself be waiting for the run.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import (
    Case,
    Expression,
    F,
    FilteredRelation,
    IntegerField,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.db.models.lookups import Exact, IsNull
from django.db.models.sql.subqueries import UpdateQuery

from agentsite.threads import DB_EXECUTOR
from runs.core.tokens import count_text
from sessions_app import mapping
from sessions_app import models as orm
from sessions_app.artifact_files import artifacts_delete
from sessions_app.core.events import Event, new_id, utcnow
from sessions_app.core.session import (
    APP_PREFIX,
    USER_PREFIX,
    Session,
    SessionKey,
    SessionNotFoundError,
    Summary,
    scope_keys,
    select_summary,
    session_scope_keys,
    split_state,
    state_view,
)

P = ParamSpec("P")
R = TypeVar("R")


def db_call(func: Callable[P, R]) -> Callable[P, Any]:
    """Run a synchronous ORM function from async code, in a worker thread.

    Worker threads keep their connection between calls (no connect per call); one that
    breaks (database restarted, network blip) is dropped so the thread's next call
    reconnects instead of failing forever.
    """

    @functools.wraps(func)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except (OperationalError, InterfaceError):
            connection.close()
            raise

    return sync_to_async(guarded, thread_sensitive=False, executor=DB_EXECUTOR)


def _owned(key: SessionKey) -> Any:
    return orm.Session.objects.filter(app=key.app, user_id=key.user_id, id=key.session_id)


def with_scoped_state(sessions: QuerySet[orm.Session]) -> QuerySet[orm.Session]:
    """Session rows annotated with their app's and their user's state (`app_state_view`,
    `user_state_view`, None when there is none): two scalar subqueries in the statement that
    reads the rows, so the state view costs no statement of its own (the hot path, issue 18)."""
    return sessions.annotate(
        app_state_view=Subquery(
            orm.AppState.objects.filter(app=OuterRef("app")).values("state")[:1], output_field=JSONField()
        ),
        user_state_view=Subquery(
            orm.UserState.objects.filter(app=OuterRef("app"), user=OuterRef("user")).values("state")[:1],
            output_field=JSONField(),
        ),
    )


def _view(state: Any, app_state: Any, user_state: Any) -> dict[str, Any]:
    return state_view(dict(state or {}), app_state=app_state, user_state=user_state)


def _merge_scope(
    model: type[orm.AppState] | type[orm.UserState],
    where: dict[str, Any],
    changes: Mapping[str, Any],
    deletes: Sequence[str] = (),
) -> None:
    """Merge `changes` into (and drop `deletes` from) the scope row `where` names, creating
    it, under its row lock: concurrent writers of one scope take turns. Call inside a
    transaction."""
    if not changes and not deletes:
        return
    now = utcnow()
    row = model.objects.select_for_update().filter(**where).first()
    if row is None:
        if not changes:
            return
        try:
            with transaction.atomic():
                model.objects.create(**where, state=dict(changes), updated_at=now)
            return
        except IntegrityError:
            row = model.objects.select_for_update().get(**where)  # created concurrently: merge into it
    state = dict(row.state or {})
    state.update(changes)
    for key in deletes:
        state.pop(key, None)
    model.objects.filter(pk=row.pk).update(state=state, updated_at=now)


def _merge_scopes(app: str, user_id: str, app_delta: Mapping[str, Any], user_delta: Mapping[str, Any]) -> None:
    _merge_scope(orm.AppState, {"app": app}, app_delta)
    _merge_scope(orm.UserState, {"app": app, "user_id": _user_pk(user_id)}, user_delta)


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


_EVENT_FIELDS = [f for f in orm.Event._meta.concrete_fields if not f.primary_key]
_EVENT_COLUMNS = ", ".join(f'"{f.column}"' for f in _EVENT_FIELDS)
# Columns whose Python value the database driver cannot take as it is (JSON, an aware
# datetime on SQLite); the others are plain strings, integers and booleans.
_ADAPTED = frozenset({"payload", "created_at"})
# Rows one PostgreSQL statement takes (65,535 parameters); a longer append (a seeded
# history) goes in batches inside a transaction.
_ONE_STATEMENT_ROWS = 1000


def _row_values(event: Event, *, session_id: str, seq: int) -> list[Any]:
    """One ledger row's column values as `bulk_create` would send them, without its
    per-value compilation (issue 18: that was half of a step write's time)."""
    row = mapping.event_to_row(event, session_id=session_id, seq=seq, tokens=count_text(event.text))
    return [
        field.get_db_prep_save(getattr(row, field.attname), connection)
        if field.name in _ADAPTED
        else getattr(row, field.attname)
        for field in _EVENT_FIELDS
    ]


JoinedWrite = Callable[[str | None], tuple[str, Sequence[Any]]]
"""A data-modifying statement (SQL and parameters, made in the worker thread) that commits
with an append or not at all: a run store's record write joining the run's last step
(issue 18). It must touch no ledger table. Its argument is a SQL condition it must add
to its WHERE clause (None: none), so that it changes nothing when the append stores
nothing (PostgreSQL's single statement runs every part; the condition ties them)."""


def _append(key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite] = ()) -> list[tuple[Event, bool]]:
    """Append `events` in one transaction, with `joined` in it: (stored event, whether this
    call wrote it) each."""
    if not any(e.state_delta for e in events):
        try:
            return _append_fast(key, events, joined)
        except IntegrityError:
            pass  # an id already in the ledger (a retried append): the careful path sorts it out
    return _append_checked(key, events, joined)


def _append_fast(
    key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite] = ()
) -> list[tuple[Event, bool]]:
    """Take n seqs from the session row (its write lock serialises appenders) and insert the
    rows, in one transaction. A duplicate id fails the insert, and the whole transaction
    with it (IntegrityError). On PostgreSQL it is one statement (issue 18: a step write
    was four round trips, BEGIN, UPDATE, INSERT, COMMIT); elsewhere two in a transaction."""
    if connection.vendor == "postgresql" and not connection.in_atomic_block and len(events) <= _ONE_STATEMENT_ROWS:
        return _append_one_statement(key, events, joined)
    session_table = orm.Session._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f'UPDATE "{session_table}" SET "last_seq" = "last_seq" + %s, "updated_at" = %s '
            'WHERE "id" = %s AND "app" = %s AND "user_id" = %s RETURNING "last_seq"',
            [
                len(events),
                connection.ops.adapt_datetimefield_value(utcnow()),
                key.session_id,
                key.app,
                _user_pk(key.user_id),
            ],
        )
        found = cursor.fetchone()
        if found is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        first = found[0] - len(events) + 1
        saved = [e.replace(seq=first + i) for i, e in enumerate(events)]
        rows = [_row_values(e, session_id=key.session_id, seq=e.seq or 0) for e in saved]
        # A seeded history can be long: batches within the database's parameter limit.
        batch = max(1, min(connection.ops.bulk_batch_size(_EVENT_FIELDS, rows), _ONE_STATEMENT_ROWS))
        for at in range(0, len(rows), batch):
            chunk = rows[at : at + batch]
            placeholders = ", ".join(["(" + ", ".join(["%s"] * len(_EVENT_FIELDS)) + ")"] * len(chunk))
            cursor.execute(
                f'INSERT INTO "{orm.Event._meta.db_table}" ({_EVENT_COLUMNS}) VALUES {placeholders}',
                [value for row in chunk for value in row],
            )
        _run_joined(cursor, joined)
    return [(e, True) for e in saved]


def _run_joined(cursor: Any, joined: Sequence[JoinedWrite]) -> None:
    for write in joined:
        sql, params = write(None)  # the transaction already holds the append
        cursor.execute(sql, list(params))


def _cast(field: Any) -> str:
    """A VALUES list's parameter is text unless cast; text goes into a varchar column by
    the INSERT's own assignment (its length checked), the other types are cast here."""
    internal = field.get_internal_type()
    if internal in {"CharField", "TextField", "ForeignKey"}:
        return ""
    return f"::{field.db_type(connection)}"


def _append_one_statement(
    key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite]
) -> list[tuple[Event, bool]]:
    """PostgreSQL: the seq counter's UPDATE, the joined writes and the INSERT of the rows as
    one statement (data-modifying CTEs), atomic in autocommit. The rows take their seqs
    from the UPDATE's RETURNING; no row comes back when the session is not the key's."""
    session_table, event_table = orm.Session._meta.db_table, orm.Event._meta.db_table
    count = len(events)
    parts = [
        f'"s" AS (UPDATE "{session_table}" SET "last_seq" = "last_seq" + %s, "updated_at" = %s '
        'WHERE "id" = %s AND "app" = %s AND "user_id" = %s RETURNING "last_seq")'
    ]
    params: list[Any] = [count, utcnow(), key.session_id, key.app, _user_pk(key.user_id)]
    for index, write in enumerate(joined):
        sql, joined_params = write('EXISTS (SELECT 1 FROM "s")')
        parts.append(f'"j{index}" AS ({sql})')
        params.extend(joined_params)
    columns = _EVENT_COLUMNS
    row_sql = "(" + ", ".join(f"%s{_cast(f)}" for f in _EVENT_FIELDS) + ")"
    rows: list[str] = []
    for offset, event in enumerate(events, start=1):
        # The payload holds the event's seq, known only once the counter moved: each row's
        # offset goes in its place and the INSERT sets it from the counter.
        params.extend(_row_values(event, session_id=key.session_id, seq=offset))
        rows.append(row_sql)
    select = ", ".join(
        f'"s"."last_seq" - {count} + "v"."seq"'
        if f.column == "seq"
        else f'jsonb_set("v"."payload", \'{{seq}}\', to_jsonb("s"."last_seq" - {count} + "v"."seq"))'
        if f.column == "payload"
        else f'"v"."{f.column}"'
        for f in _EVENT_FIELDS
    )
    sql = (
        f'WITH {", ".join(parts)} INSERT INTO "{event_table}" ({columns}) '
        f'SELECT {select} FROM "s", (VALUES {", ".join(rows)}) AS "v" ({columns}) RETURNING "seq"'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchall()
    if not returned:
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    first = min(seq for (seq,) in returned)
    return [(e.replace(seq=first + i), True) for i, e in enumerate(events)]


def _append_checked(
    key: SessionKey, events: Sequence[Event], joined: Sequence[JoinedWrite] = ()
) -> list[tuple[Event, bool]]:
    with transaction.atomic():
        # The session row lock serialises appends: seq is the row's counter plus one.
        row = _owned(key).select_for_update().first()
        if row is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        stored = {r.event_id: r for r in orm.Event.objects.filter(session=row, event_id__in=[e.id for e in events])}
        out: list[tuple[Event, bool]] = []
        rows: list[orm.Event] = []
        seq = row.last_seq
        state = dict(row.state or {})
        app_delta: dict[str, Any] = {}
        user_delta: dict[str, Any] = {}
        written: dict[str, Event] = {}
        for event in events:
            if event.id in stored:
                out.append((mapping.event_from_row(stored[event.id]), False))
                continue
            if event.id in written:  # the same id twice in one batch: stored once
                out.append((written[event.id], False))
                continue
            seq += 1
            saved = event.replace(seq=seq)
            written[event.id] = saved
            rows.append(mapping.event_to_row(saved, session_id=row.id, seq=seq, tokens=count_text(event.text)))
            scoped = split_state(copy.deepcopy(dict(event.state_delta)))
            state.update(scoped.session)
            app_delta.update(scoped.app)
            user_delta.update(scoped.user)
            out.append((saved, True))
        if rows:
            orm.Event.objects.bulk_create(rows)
            updates: dict[str, Any] = {"last_seq": seq, "updated_at": utcnow()}
            if any(e.state_delta for e in written.values()):
                updates["state"] = state
            orm.Session.objects.filter(pk=row.pk).update(**updates)
            # The app's and the user's keys in the same transaction as the events that set them.
            _merge_scopes(key.app, key.user_id, app_delta, user_delta)
        if joined:
            with connection.cursor() as cursor:
                _run_joined(cursor, joined)
    return out


def _user_pk(user_id: str) -> int | str:
    # Session.user is an integer key; a malformed id matches no row rather than failing.
    return int(user_id) if user_id.isdigit() else user_id


def _list_events(key: SessionKey, after_seq: int, limit: int) -> list[Event]:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    rows = orm.Event.objects.filter(session_id=key.session_id, seq__gt=after_seq).order_by("seq")[:limit]
    return [mapping.event_from_row(r) for r in rows]


def _get_summary(key: SessionKey, filter_key: str) -> Summary | None:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    row = orm.Summary.objects.filter(session_id=key.session_id, filter_key=filter_key).exclude(text="").first()
    return mapping.summary_from_row(row) if row is not None else None


def _put_summary(key: SessionKey, summary: Summary) -> None:
    if not _owned(key).exists():
        raise SessionNotFoundError(f"session {key.session_id!r} not found")
    orm.Summary.objects.update_or_create(
        session_id=key.session_id,
        filter_key=summary.filter_key,
        defaults={**mapping.summary_fields(summary), "version": summary.version},
    )


def _update_returning(rows: QuerySet[orm.Summary], values: Mapping[str, Any]) -> orm.Summary | None:
    """UPDATE `rows` with `values` in one statement and return the (first) row it changed,
    as stored after it; None when it changed none."""
    query = rows.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(connection=connection).as_sql()
    columns = ", ".join(f'"{f.column}"' for f in orm.Summary._meta.concrete_fields)
    changed = list(orm.Summary.objects.raw(f"{sql} RETURNING {columns}", params))
    return changed[0] if changed else None


def _advance_summary(key: SessionKey, summary: Summary) -> Summary | None:
    if summary.boundary is None:
        raise ValueError("advance_summary needs a summary with a boundary")
    fields = mapping.summary_fields(summary)
    # Summary rows belong to the session row (the key's owner): matching through it makes
    # an update of someone else's session touch nothing, without a check of its own.
    mine = orm.Summary.objects.filter(session__in=_owned(key), filter_key=summary.filter_key)
    # The idempotency guard is in the WHERE clause: a write whose boundary is not past the
    # stored one changes nothing, whoever else wrote in between. The common case, an
    # existing row advanced, is that one statement (issue 18: it was BEGIN, UPDATE and a
    # SELECT of the row); the row it changed comes back with RETURNING.
    advanced = _update_returning(
        mine.filter(last_seq__lt=summary.boundary.last_seq), {**fields, "version": F("version") + 1}
    )
    if advanced is not None:
        return mapping.summary_from_row(advanced)
    with transaction.atomic():
        updated = mine.filter(last_seq__lt=summary.boundary.last_seq).update(**fields, version=F("version") + 1)
        if not updated:
            if not _owned(key).exists():
                raise SessionNotFoundError(f"session {key.session_id!r} not found")
            if mine.exists():
                return None
            try:
                with transaction.atomic():
                    orm.Summary.objects.create(
                        session_id=key.session_id, filter_key=summary.filter_key, version=1, **fields
                    )
            except IntegrityError:
                # Created by a concurrent writer (or the lock) since: compare against it.
                if not mine.filter(last_seq__lt=summary.boundary.last_seq).update(**fields, version=F("version") + 1):
                    return None
        return mapping.summary_from_row(mine.get())


def update_session_state_sync(key: SessionKey, state: Mapping[str, Any]) -> dict[str, Any]:
    """`DjangoSessionService.update_session_state` for synchronous callers (the REST API);
    returns the session's state view after the update."""
    changes = session_scope_keys(state)
    with transaction.atomic():
        row = with_scoped_state(_owned(key)).select_for_update(of=("self",)).first()
        if row is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        merged = {**(row.state or {}), **copy.deepcopy(changes)}
        if changes:
            orm.Session.objects.filter(pk=row.pk).update(state=merged, updated_at=utcnow())
    return _view(merged, row.app_state_view, row.user_state_view)


def session_state_view_sync(key: SessionKey) -> dict[str, Any] | None:
    """The session's state view (SPEC 2.1), None when the session does not exist for the user."""
    found = with_scoped_state(_owned(key)).values_list("state", "app_state_view", "user_state_view").first()
    return None if found is None else _view(*found)


def _initialize_session_state(key: SessionKey, state_key: str, value: Any) -> tuple[Any, bool]:
    session_scope_keys({state_key: value})
    with transaction.atomic():
        row = _owned(key).select_for_update().first()
        if row is None:
            raise SessionNotFoundError(f"session {key.session_id!r} not found")
        state = dict(row.state or {})
        if state_key in state:
            return state[state_key], False
        state[state_key] = value
        orm.Session.objects.filter(pk=row.pk).update(state=state, updated_at=utcnow())
    return value, True


def _required(**names: str) -> None:
    for name, value in names.items():
        if not value:
            raise ValueError(f"{name} is required")


@transaction.atomic
def _update_app_state(app: str, state: Mapping[str, Any]) -> None:
    changes = scope_keys(state, scope="app")
    _required(app=app)
    _merge_scope(orm.AppState, {"app": app}, changes)


@transaction.atomic
def _delete_app_state(app: str, key: str) -> None:
    _required(app=app)
    _merge_scope(orm.AppState, {"app": app}, {}, [key.removeprefix(APP_PREFIX)])


def _list_app_states(app: str) -> dict[str, Any]:
    _required(app=app)
    found = orm.AppState.objects.filter(app=app).values_list("state", flat=True).first()
    return dict(found or {})


@transaction.atomic
def _update_user_state(app: str, user_id: str, state: Mapping[str, Any]) -> None:
    changes = scope_keys(state, scope="user")
    _required(app=app, user_id=user_id)
    _merge_scope(orm.UserState, {"app": app, "user_id": _user_pk(user_id)}, changes)


@transaction.atomic
def _delete_user_state(app: str, user_id: str, key: str) -> None:
    _required(app=app, user_id=user_id)
    _merge_scope(orm.UserState, {"app": app, "user_id": _user_pk(user_id)}, {}, [key.removeprefix(USER_PREFIX)])


def _list_user_states(app: str, user_id: str) -> dict[str, Any]:
    _required(app=app, user_id=user_id)
    found = orm.UserState.objects.filter(app=app, user_id=_user_pk(user_id)).values_list("state", flat=True).first()
    return dict(found or {})


class DjangoSessionService:
    """SessionService on the Django ORM (SQLite or PostgreSQL)."""

    joins_writes = True
    """`append_events` takes `joined` writes (runs.backends.DjangoRunStore.joined_save)."""

    async def create_session(
        self,
        *,
        app: str,
        user_id: str,
        session_id: str | None = None,
        agent: str = "",
        title: str = "",
        state: Mapping[str, Any] | None = None,
    ) -> Session:
        session_id = session_id or new_id()
        SessionKey(app=app, user_id=user_id, session_id=session_id)
        return await db_call(_create)(app, user_id, session_id, agent, title, dict(state or {}))

    async def get_session(
        self, key: SessionKey, *, event_limit: int | None = None, after_summary: str | None = None
    ) -> Session | None:
        return await db_call(get_session_sync)(key, event_limit=event_limit, after_summary=after_summary)

    async def get_session_head(self, key: SessionKey, *, known: Mapping[str, Summary] | None = None) -> Session | None:
        """The session without events (`get_session_head_sync`); with `known`, its summaries
        are only those that differ from them."""
        return await db_call(get_session_head_sync)(key, known=known)

    reads_changed_summaries = True
    """`get_session_head` takes `known` (sessions_app.core.cache reads one row per turn)."""

    async def list_sessions(self, *, app: str, user_id: str) -> list[Session]:
        return await db_call(_list)(app, user_id)

    async def delete_session(self, key: SessionKey) -> bool:
        return await db_call(_delete)(key)

    async def append_event(self, session: Session, event: Event) -> Event:
        return (await self.append_events(session, [event]))[0]

    async def append_events(
        self, session: Session, events: Sequence[Event], *, joined: Sequence[JoinedWrite] = ()
    ) -> list[Event]:
        """Append `events` in one transaction; `joined` statements commit with them (issue 18)."""
        if not events:
            return []
        results = await db_call(_append)(session.key, list(events), list(joined))
        for saved, created in results:
            if created:
                session.events.append(saved)
                session.state.update(copy.deepcopy(dict(saved.state_delta)))
                session.last_seq = max(session.last_seq, saved.seq or 0)
        if any(created for _, created in results):
            session.updated_at = utcnow()
        return [saved for saved, _ in results]

    async def list_events(self, key: SessionKey, *, after_seq: int = 0, limit: int = 100) -> list[Event]:
        return await db_call(_list_events)(key, after_seq, limit)

    async def get_summary(self, key: SessionKey, *, filter_key: str = "") -> Summary | None:
        return await db_call(_get_summary)(key, filter_key)

    async def put_summary(self, key: SessionKey, summary: Summary) -> None:
        await db_call(_put_summary)(key, summary)

    async def advance_summary(self, key: SessionKey, summary: Summary) -> Summary | None:
        return await db_call(_advance_summary)(key, summary)

    async def update_session_state(self, key: SessionKey, state: Mapping[str, Any]) -> None:
        await db_call(update_session_state_sync)(key, dict(state))

    async def initialize_session_state(self, key: SessionKey, *, state_key: str, value: Any) -> tuple[Any, bool]:
        return await db_call(_initialize_session_state)(key, state_key, value)

    async def update_app_state(self, *, app: str, state: Mapping[str, Any]) -> None:
        await db_call(_update_app_state)(app, dict(state))

    async def list_app_states(self, *, app: str) -> dict[str, Any]:
        return await db_call(_list_app_states)(app)

    async def delete_app_state(self, *, app: str, key: str) -> None:
        await db_call(_delete_app_state)(app, key)

    async def update_user_state(self, *, app: str, user_id: str, state: Mapping[str, Any]) -> None:
        await db_call(_update_user_state)(app, user_id, dict(state))

    async def list_user_states(self, *, app: str, user_id: str) -> dict[str, Any]:
        return await db_call(_list_user_states)(app, user_id)

    async def delete_user_state(self, *, app: str, user_id: str, key: str) -> None:
        await db_call(_delete_user_state)(app, user_id, key)
