"""The async boundary of the ORM side (`db_call`) and the helpers every part of it uses."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connection

from agentsite.threads import DB_EXECUTOR
from sessions_app import models as orm
from sessions_app.core.session import SessionKey

P = ParamSpec("P")
R = TypeVar("R")

Converter = tuple[list[Any], Any]
"""The functions the ORM applies to a column's value as read, and the column they are given."""


def column_converter(field: Any) -> Converter:
    """What the ORM applies to `field`'s column read by a written-out statement (JSON text to
    Python, SQLite's datetime text and integer booleans), for `converted`."""
    col = field.get_col(field.model._meta.db_table)
    return [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)], col


def converted(value: Any, converter: Converter) -> Any:
    """`value` as read from the database, as the ORM would hand it to a model."""
    functions, col = converter
    for function in functions:
        value = function(value, col, connection)
    return value


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


def _user_pk(user_id: str) -> int | str:
    # Session.user is an integer key; a malformed id matches no row rather than failing.
    return int(user_id) if user_id.isdigit() else user_id
