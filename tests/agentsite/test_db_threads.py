"""The database threads' connection checks (agentsite/threads.py, issue 23): a kept
connection is checked only when it sat idle, failed or was dropped, and one the database
dropped is replaced before the thread's next task, not failing it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import ProgrammingError, connection, connections

from agentsite.threads import DatabaseThreadPool

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # SQLite's connections are never checked (CONN_HEALTH_CHECKS is PostgreSQL's setting here).
    pytest.mark.skipif(connection.vendor != "postgresql", reason="connection checks are PostgreSQL's"),
]


def _backend_pid() -> int:
    """The PostgreSQL server process behind this thread's connection (one query)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The connection checks Django runs (`is_usable`, one round trip each), in any thread."""
    seen: list[str] = []
    wrapper = type(connections["default"])
    is_usable = wrapper.is_usable

    def counted(self: Any) -> bool:
        seen.append(self.alias)
        return bool(is_usable(self))

    monkeypatch.setattr(wrapper, "is_usable", counted)
    return seen


def _pool(idle_check_s: float) -> Iterator[DatabaseThreadPool]:
    pool = DatabaseThreadPool(1, "test-db", idle_check_s=idle_check_s)
    try:
        yield pool
    finally:
        pool.submit(connections.close_all).result()
        pool.shutdown()


@pytest.fixture
def busy_pool() -> Iterator[DatabaseThreadPool]:
    """One thread whose connection counts as idle only after a minute."""
    yield from _pool(60.0)


@pytest.fixture
def idle_pool() -> Iterator[DatabaseThreadPool]:
    """One thread whose connection counts as idle after 50 ms."""
    yield from _pool(0.05)


def _terminate(pid: int) -> None:
    """The database drops that connection (as a restart or failover would)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    time.sleep(0.05)  # the server process exits after it answers


def test_back_to_back_tasks_do_not_check_their_connection(busy_pool: DatabaseThreadPool, checks: list[str]) -> None:
    pids = [busy_pool.submit(_backend_pid).result() for _ in range(5)]

    assert len(set(pids)) == 1, "the thread keeps its connection"
    assert checks == []


def test_a_task_after_an_idle_spell_checks_the_connection_once(
    idle_pool: DatabaseThreadPool, checks: list[str]
) -> None:
    first = idle_pool.submit(_backend_pid).result()
    time.sleep(0.1)

    def two_queries() -> tuple[int, int]:
        return _backend_pid(), _backend_pid()

    assert idle_pool.submit(two_queries).result() == (first, first)
    assert checks == ["default"]


def test_a_connection_dropped_while_idle_is_replaced_before_the_next_task(
    idle_pool: DatabaseThreadPool, checks: list[str]
) -> None:
    first = idle_pool.submit(_backend_pid).result()
    _terminate(first)
    time.sleep(0.1)

    second = idle_pool.submit(_backend_pid).result()

    assert second != first
    assert checks == ["default"]


def test_a_connection_dropped_just_after_use_is_replaced_before_the_next_task(
    busy_pool: DatabaseThreadPool, checks: list[str]
) -> None:
    first = busy_pool.submit(_backend_pid).result()
    _terminate(first)  # used a moment ago, but the database's farewell waits on its socket

    second = busy_pool.submit(_backend_pid).result()
    third = busy_pool.submit(_backend_pid).result()

    assert second == third != first
    assert checks == ["default"]


def test_a_task_after_a_database_error_checks_the_connection(busy_pool: DatabaseThreadPool, checks: list[str]) -> None:
    def bad_query() -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")

    first = busy_pool.submit(_backend_pid).result()
    with pytest.raises(ProgrammingError):
        busy_pool.submit(bad_query).result()

    assert busy_pool.submit(_backend_pid).result() == first
    assert busy_pool.submit(_backend_pid).result() == first
    assert checks == ["default"]
