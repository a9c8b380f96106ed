"""A tool or a model may produce text no database column takes (NUL, lone surrogates): the
run still completes, and what is stored, emitted and shown to the model is the same text
with those characters as U+FFFD. Runs on the Django backend, so on PostgreSQL in CI."""

from __future__ import annotations

from typing import Any

import pytest

from runs.backends import DjangoRunStore
from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.function import FunctionTool
from sessions_app.backends import DjangoSessionService
from sessions_app.core.events import Message, ToolCall
from sessions_app.core.session import SessionKey

pytestmark = pytest.mark.django_db(transaction=True)

APP = "agentsite"


def test_unstorable_characters_become_the_replacement_character_in_messages_and_arguments() -> None:
    assert Message(role="tool", content="a\x00b\ud800c").content == "a\ufffdb\ufffdc"
    assert ToolCall(id="c", name="t", arguments='{"q": "x\x00"}').arguments == '{"q": "x\ufffd"}'
    assert Message(role="user", content="plain 中文").content == "plain 中文"


async def test_a_tool_result_with_nul_and_a_lone_surrogate_is_kept_and_the_run_completes(alice: Any) -> None:
    def dump(path: str) -> str:
        """Dump a binary file as text."""
        return "head\x00middle\udc80tail"

    model = ScriptedModel.of(ScriptStep.call("dump", {"path": "/tmp/x"}), "The file has a NUL byte.")
    service = DjangoSessionService()
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="support", model=model, tools=[FunctionTool(dump)])],
        session_service=service,
        run_store=DjangoRunStore(),
    )
    handle = await runner.start(user_id=str(alice.pk), message="dump /tmp/x", stream=True)
    emitted = [e async for e in handle.events()]
    await runner.close()

    model.assert_consumed()
    assert emitted[-1].extensions.get("status") == "completed"
    stored = await service.list_events(
        SessionKey(app=APP, user_id=str(alice.pk), session_id=handle.session_id), limit=50
    )
    result = next(e for e in stored if e.message is not None and e.message.role == "tool")
    assert result.message is not None and result.message.content == "head\ufffdmiddle\ufffdtail"
    assert result.message.content in [e.message.content for e in emitted if e.message is not None]
    assert "head\ufffdmiddle\ufffdtail" in [m.content for m in model.requests[1].messages]
