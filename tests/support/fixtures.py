"""Shared pytest fixtures (imported into `tests/conftest.py`)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.support.openai_server import ScriptedOpenAIServer


@pytest.fixture
def openai_server() -> Iterator[ScriptedOpenAIServer]:
    """A running `ScriptedOpenAIServer` with an empty script, stopped after the test.

    Script it with `openai_server.script(ServerStep.answer("hi"), ...)`, point a client at
    `openai_server.base_url`, and call `openai_server.assert_consumed()` at the end.
    """
    with ScriptedOpenAIServer() as server:
        yield server


@pytest.fixture
def eager_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs run in the process that sends them, also when REDIS_URL names a broker."""
    from agentsite.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)


@pytest.fixture(scope="session", autouse=True)
def _own_cache_keys() -> Iterator[None]:
    """With REDIS_URL the default cache (the API rate counters) is one Redis database shared
    by every test process on the machine; a key prefix of this process's own keeps their
    counts apart (`cache.clear()` still flushes that whole database)."""
    from django.conf import settings
    from django.test import override_settings

    cache = dict(settings.CACHES["default"])
    if not cache["BACKEND"].endswith("RedisCache"):
        yield
        return
    cache["KEY_PREFIX"] = f"agentsite-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with override_settings(CACHES={**settings.CACHES, "default": cache}):
        yield
