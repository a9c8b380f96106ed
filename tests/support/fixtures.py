"""Shared pytest fixtures (imported into `tests/conftest.py`)."""

from __future__ import annotations

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
