"""Migration 0007 (issue 22, item 4): stored memory tokens follow the shared analyzer.

Memories written before it hold the old memory analyzer's tokens (ASCII words only, its own
stop words); the migration re-analyzes them, and migrating back restores the old tokens.
Runs on whatever database the suite uses (SQLite, or PostgreSQL with DATABASE_URL, where
search reads the stored tokens through the full-text index)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sessions_app.core.memory import MemoryManager, SearchOptions, UserKey, analyze
from sessions_app.memory_backends import DjangoMemoryStore

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("sessions_app", "0006_history_fingerprint")
AFTER = ("sessions_app", "0007_memory_tokens_shared_analyzer")
MIGRATION = importlib.import_module("sessions_app.migrations.0007_memory_tokens_shared_analyzer")

TEXTS = {
    "m-moscow": "Caroline moved to Москва last spring",
    "m-cafe": "Melanie orders a café crème every morning",
    "m-now": "Jon works at a bakery now and again",
    "m-same": "The team deploys kafka clusters",
}


def _migrate(target: tuple[str, str]) -> Any:
    """Migrate sessions_app to `target`; the app registry of that state."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.fixture
def at_0006() -> Iterator[Any]:
    """The database at 0006 (the apps of that state); every migration applied again after."""
    yield _migrate(BEFORE)
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def _old_rows(apps: Any) -> str:
    """Memories as the code of 0006 wrote them: the old analyzer's tokens. Their user's id."""
    user = apps.get_model(settings.AUTH_USER_MODEL).objects.create(username="caroline")
    memory = apps.get_model("sessions_app", "Memory")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for memory_id, text in TEXTS.items():
        tokens = MIGRATION.previous_tokens(text)
        memory.objects.create(
            id=memory_id,
            app="demo",
            user_id=user.pk,
            kind="fact",
            text=text,
            search_tokens=" ".join(tokens),
            token_count=len(tokens),
            created_at=now,
            updated_at=now,
        )
    return str(user.pk)


def _stored(apps: Any) -> dict[str, tuple[str, int]]:
    rows = apps.get_model("sessions_app", "Memory").objects.all()
    return {r.id: (r.search_tokens, r.token_count) for r in rows}


def _found(user_id: str, query: str) -> list[str]:
    manager = MemoryManager(DjangoMemoryStore())
    return [
        e.id for e in manager.search(UserKey(app="demo", user_id=user_id), SearchOptions(query=query, min_score=0.0))
    ]


def test_old_rows_are_reanalyzed_forward_and_restored_backward(at_0006: Any) -> None:
    user_id = _old_rows(at_0006)
    old = _stored(at_0006)
    assert old["m-moscow"][0] == "carolin mov last spr"  # the old analyzer dropped the Cyrillic word
    assert "caf" in old["m-cafe"][0].split()  # ... and split "café" at its accent
    # The shared analyzer reads these words in a query; the old tokens do not hold them (and
    # neither query is a phrase of the text, which would match without any token).
    assert _found(user_id, "Москва, Петербург") == []
    assert _found(user_id, "crème café") == []

    after = _stored(_migrate(AFTER))
    assert after == {i: (" ".join(analyze(t)), len(analyze(t))) for i, t in TEXTS.items()}
    assert after["m-same"] == old["m-same"]  # a text both analyzers read alike is unchanged
    assert "москва" in after["m-moscow"][0].split() and "café" in after["m-cafe"][0].split()
    assert _found(user_id, "Москва, Петербург") == ["m-moscow"]
    assert _found(user_id, "crème café") == ["m-cafe"]

    assert _stored(_migrate(BEFORE)) == old
