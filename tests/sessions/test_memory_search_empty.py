"""A memory search for a user without memories costs one statement (issue 23: most runs'
users have none, and every run searches), and finds a memory from the moment one is added."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions_app.core.memory import MemoryDraft, SearchOptions, UserKey

pytestmark = pytest.mark.django_db(transaction=True)

APP = "empty-search"


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the PostgreSQL search (SQLite ranks in Python)")
def test_searching_a_user_without_memories_costs_one_statement_and_finds_one_once_added(alice: Any) -> None:
    from sessions_app.memory_backends import memory_manager

    manager = memory_manager()
    key = UserKey(app=APP, user_id=str(alice.pk))
    options = SearchOptions(query="which database runs in production?")
    with CaptureQueriesContext(connection) as empty:
        assert manager.search(key, options) == []
    assert len(empty) == 1  # the corpus statistics say there is nothing to rank

    manager.add(key, MemoryDraft(text="Production runs on PostgreSQL 16"))
    with CaptureQueriesContext(connection) as one:
        found = manager.search(key, options)
    assert [m.text for m in found] == ["Production runs on PostgreSQL 16"]
    assert len(one) == 2  # the statistics, then the candidates
