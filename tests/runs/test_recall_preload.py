"""Preload session recall wired into agents (SPEC 5.4): what the model's request carries."""

from __future__ import annotations

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.context.recall_preload import SessionRecallPreload
from runs.core.llm.scripted import ScriptedModel
from runs.core.runner import Runner
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.recall import PRELOAD_HEADER, InMemoryRecallIndex

APP = "t"
EARLIER = "The VPN certificate for the Berlin office expires on 14 March."
WEAK = "The Berlin office moved to the third floor."
QUESTION = "When does the Berlin VPN certificate expire?"


async def ask(session_recall: SessionRecallPreload | None) -> ScriptedModel:
    """Alice told the agent a fact in one session (and Bob something similar in his own);
    then she asks about it in a new session. Answers the model of the new session."""
    service = InMemorySessionService()
    index = InMemoryRecallIndex(service)
    earlier = LLMAgent(name="support", model=ScriptedModel.of("Noted.", "Noted.", "Noted."), instruction="Be brief.")
    runner = Runner(app=APP, agents=[earlier], session_service=service, services={"recall": index})
    [_ async for _ in runner.run(user_id="alice", message=EARLIER)]
    [_ async for _ in runner.run(user_id="alice", message=WEAK)]
    [_ async for _ in runner.run(user_id="bob", message="Bob's Berlin VPN certificate is secret-4471.")]
    await runner.close()

    model = ScriptedModel.of("14 March.")
    agent = LLMAgent(name="support", model=model, instruction="Be brief.", session_recall=session_recall)
    runner = Runner(app=APP, agents=[agent], session_service=service, services={"recall": index})
    [_ async for _ in runner.run(user_id="alice", message=QUESTION)]
    await runner.close()
    return model


async def test_spec_5_4_preload_recall_puts_the_users_other_sessions_into_the_system_block() -> None:
    model = await ask(SessionRecallPreload(max_results=3))
    system = model.requests[0].messages[0]
    assert system.role == "system" and system.content.startswith("Be brief.")
    assert PRELOAD_HEADER in system.content
    assert f"<recalled_session_event>{EARLIER}</recalled_session_event>" in system.content
    assert "role=user score=" in system.content
    assert "secret-4471" not in system.content  # never another user's sessions
    assert model.requests[0].messages[-1].content == QUESTION


async def test_spec_5_4_preload_recall_is_off_by_default() -> None:
    for setting in (None, SessionRecallPreload()):
        model = await ask(setting)
        text = "\n".join(m.content for m in model.requests[0].messages)
        assert "Related Session Recall" not in text and EARLIER not in text


async def test_spec_5_4_user_injection_puts_the_block_just_before_the_new_message() -> None:
    model = await ask(SessionRecallPreload(max_results=3, injection="user"))
    messages = model.requests[0].messages
    assert messages[0].content == "Be brief."
    block, question = messages[-2], messages[-1]
    assert block.role == "user" and block.content.startswith(PRELOAD_HEADER)
    assert EARLIER in block.content
    assert question.role == "user" and question.content == QUESTION


async def test_spec_5_4_min_score_filters_weak_matches() -> None:
    # The default (SPEC: 0) takes any event that shares a term, so the message that shares
    # only "Berlin" comes too; a floor of 0.5 keeps the one that holds the whole question.
    loose = (await ask(SessionRecallPreload(max_results=3))).requests[0].messages[0].content
    assert EARLIER in loose and WEAK in loose
    strict = (await ask(SessionRecallPreload(max_results=3, min_score=0.5))).requests[0].messages[0].content
    assert EARLIER in strict and WEAK not in strict
    # Above every score a message can reach (1 + both bonuses): no block at all.
    none = (await ask(SessionRecallPreload(max_results=3, min_score=2.0))).requests[0].messages[0].content
    assert "Related Session Recall" not in none


def test_spec_5_4_setting_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="injection"):
        SessionRecallPreload(max_results=1, injection="assistant")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_results"):
        SessionRecallPreload(max_results=-1)
