"""Scoped state on the ORM (SPEC 2.1): the session's, the app's and the user's, their view, and
the merges that write them under the scope row's lock."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import JSONField, OuterRef, QuerySet, Subquery

from sessions_app import models as orm
from sessions_app.backends.db import _owned, _user_pk
from sessions_app.core.events import utcnow
from sessions_app.core.session import (
    APP_PREFIX,
    USER_PREFIX,
    SessionKey,
    SessionNotFoundError,
    scope_keys,
    session_scope_keys,
    state_view,
)


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
