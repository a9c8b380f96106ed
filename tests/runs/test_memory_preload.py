"""Memory preload (SPEC 6.5): the user's memories reach the model's instruction, once per run."""

from __future__ import annotations

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel
from runs.core.runner import Runner
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.memory import InMemoryMemoryService, MemoryDraft, UserKey

APP = "t"


async def runner_with(preload: int, model: ScriptedModel) -> Runner:
    memories = InMemoryMemoryService()
    await memories.add(UserKey(app=APP, user_id="alice"), MemoryDraft(text="Production runs Go behind nginx."))
    await memories.add(UserKey(app=APP, user_id="bob"), MemoryDraft(text="Bob's secret: staging uses Rust."))
    agent = LLMAgent(name="support", model=model, instruction="Be brief.", memory_preload=preload)
    return Runner(app=APP, agents=[agent], session_service=InMemorySessionService(), services={"memory": memories})


@pytest.mark.parametrize("preload", [-1, 5])
async def test_preloaded_memories_of_the_user_reach_the_instruction(preload: int) -> None:
    model = ScriptedModel.of("ok")
    runner = await runner_with(preload, model)
    [_ async for _ in runner.run(user_id="alice", message="What does production run on?")]
    system = model.requests[0].messages[0]
    assert system.role == "system" and system.content.startswith("Be brief.")
    assert "Production runs Go behind nginx." in system.content
    assert "Rust" not in system.content  # never another user's memories


async def test_preload_is_off_by_default() -> None:
    model = ScriptedModel.of("ok")
    runner = await runner_with(0, model)
    [_ async for _ in runner.run(user_id="alice", message="What does production run on?")]
    assert model.requests[0].messages[0].content == "Be brief."
