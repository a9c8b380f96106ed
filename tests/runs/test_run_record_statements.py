"""The run record's INSERT and UPDATE written once as SQL (issue 23) store what the ORM
stores: every field, its NULLs, JSON values and times, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from runs.backends import _create, _create_statement, _get, _save, _save_statement
from runs.core.records import RunRecord

pytestmark = pytest.mark.django_db(transaction=True)

AT = datetime(2026, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)


def _record(user: Any, session_id: str, run_id: str, **changes: Any) -> RunRecord:
    return RunRecord(
        id=run_id,
        app="records",
        user_id=str(user.pk),
        session_id=session_id,
        agent="support",
        request_id=f"req-{run_id}",
        owner="web-1",
        created_at=AT,
        **changes,
    )


def _ended(record: RunRecord) -> RunRecord:
    return record.replace(
        status="completed",
        started_at=AT + timedelta(seconds=1),
        ended_at=AT + timedelta(seconds=3),
        last_event_at=AT + timedelta(seconds=3),
        heartbeat_at=AT + timedelta(seconds=2),
        error={"type": "x", "message": 'it\'s "quoted"', "code": None},
        answer="All clear: 0 errors ✓",
        event_count=8,
        model_calls=2,
        tool_calls=4,
        prompt_tokens=1200,
        completion_tokens=345,
        output=[1, "two", {"three": None}],
        trace={"steps": [{"kind": "model", "ms": 12.5}], "empty": {}},
    )


def _execute(statement: tuple[str, list[Any]]) -> None:
    sql, params = statement
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.fixture
def session_id(alice: Any) -> str:
    from sessions_app import services

    return str(services.session_create(user=alice, agent="support").id)


@pytest.mark.parametrize("ended", [False, True], ids=["new", "ended"])
def test_the_written_statements_store_what_the_orm_stores(alice: Any, session_id: str, ended: bool) -> None:
    through_orm = _record(alice, session_id, "by-orm")
    through_sql = _record(alice, session_id, "by-sql")
    _create(through_orm)
    _execute(_create_statement(through_sql, None))
    assert _get("by-sql") == through_sql
    assert _get("by-sql") == _get("by-orm").replace(id="by-sql", request_id="req-by-sql")  # type: ignore[union-attr]

    if ended:
        _save(_ended(through_orm))
        _execute(_save_statement(_ended(through_sql), None))
        assert _get("by-sql") == _ended(through_sql)
        assert _get("by-sql") == _get("by-orm").replace(id="by-sql", request_id="req-by-sql")  # type: ignore[union-attr]

    # Back to NULLs: a None writes NULL, not JSON null or a kept value.
    _execute(_save_statement(through_sql, None))
    assert _get("by-sql") == through_sql


def test_a_false_guard_writes_nothing(alice: Any, session_id: str) -> None:
    record = _record(alice, session_id, "guarded")
    _execute(_create_statement(record, "1 = 0"))
    assert _get("guarded") is None
    _execute(_create_statement(record, "1 = 1"))
    _execute(_save_statement(_ended(record), "1 = 0"))
    assert _get("guarded") == record
    _execute(_save_statement(_ended(record), "1 = 1"))
    assert _get("guarded") == _ended(record)
