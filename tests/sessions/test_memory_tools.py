"""Memory tools as an agent sees them (SPEC 6.2) and the preloaded memory block (SPEC 6.5)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.base import ToolContext
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.memory import InMemoryMemoryService, MemoryDraft, MemoryNotFoundError, UserKey
from sessions_app.core.memory_tools import (
    PRELOAD_BEGIN,
    PRELOAD_END,
    MemoryUnavailableError,
    memory_preload_block,
)
from sessions_app.core.session import Session
from sessions_app.memory_backends import memory_function_tools

APP = "tools"


def context_for(user: str, service: Any, session_id: str = "s-1") -> ToolContext:
    return ToolContext(
        session=Session(app=APP, user_id=user, id=f"{session_id}-{user}"),
        invocation_id="inv",
        tool_call_id="call",
        agent_name="agent",
        cancel_event=asyncio.Event(),
        services={"memory": service} if service is not None else {},
    )


def tools(**kwargs: Any) -> dict[str, Any]:
    return {t.name: t for t in memory_function_tools(**kwargs)}


def test_agentic_mode_exposes_search_load_add_update_delete_and_auto_mode_only_search() -> None:
    assert sorted(tools()) == ["memory_add", "memory_delete", "memory_load", "memory_search", "memory_update"]
    assert sorted(tools(mode="auto")) == ["memory_search"]
    assert sorted(tools(mode="auto", enable=["memory_load", "memory_clear"], disable=["memory_search"])) == [
        "memory_clear",
        "memory_load",
    ]
    with pytest.raises(ValueError, match="memory_forget"):
        tools(enable=["memory_forget"])


def test_tool_schemas_hide_the_context_and_describe_the_arguments() -> None:
    spec = tools()["memory_search"].spec()
    properties = spec.parameters["properties"]
    assert "context" not in properties and spec.parameters["required"] == ["query"]
    assert properties["kind"]["enum"] == ["fact", "episode"]
    assert "keywords" in properties["query"]["description"]
    assert "long-term memories" in spec.description


async def test_a_memory_added_by_the_tool_is_found_by_search_and_load() -> None:
    service = InMemoryMemoryService()
    alice = context_for("alice", service)
    added = await tools()["memory_add"].call(alice, {"memory": "Runs Go in production", "topics": ["stack"]})
    assert added["action"] == "added"
    trip = await tools()["memory_add"].call(
        alice,
        {
            "memory": "Flew to Lisbon",
            "kind": "episode",
            "event_time": "2024-05-03",
            "participants": ["Bob"],
        },
    )
    found = await tools()["memory_search"].call(alice, {"query": "production language"})
    assert [m["memory"] for m in found["memories"]] == ["Runs Go in production"]
    assert set(found["memories"][0]) >= {"id", "memory", "topics", "created", "kind", "score"}
    episodes = await tools()["memory_search"].call(
        alice, {"query": "Lisbon", "kind": "episode", "time_after": "2024-05-01"}
    )
    assert episodes["memories"][0] == {**trip["memory"], "score": episodes["memories"][0]["score"]}
    assert episodes["memories"][0]["event_time"] == "2024-05-03"
    assert (await tools()["memory_search"].call(alice, {"query": " "}))["memories"] == []
    loaded = await tools()["memory_load"].call(alice, {"limit": 1})
    assert [m["memory"] for m in loaded["memories"]] == ["Flew to Lisbon"]


async def test_update_and_delete_through_the_tools() -> None:
    service = InMemoryMemoryService()
    alice = context_for("alice", service)
    added = await tools()["memory_add"].call(alice, {"memory": "Lives in Porto"})
    memory_id = added["memory"]["id"]
    updated = await tools()["memory_update"].call(alice, {"memory_id": memory_id, "memory": "Lives in Lisbon"})
    assert updated["memory"]["memory"] == "Lives in Lisbon"
    assert await tools()["memory_delete"].call(alice, {"memory_id": memory_id}) == {
        "memory_id": memory_id,
        "deleted": True,
    }
    assert await service.count(UserKey(app=APP, user_id="alice")) == 0


async def test_alice_cannot_reach_bobs_memories_through_any_tool() -> None:
    service = InMemoryMemoryService()
    bob = context_for("bob", service)
    secret = await tools()["memory_add"].call(bob, {"memory": "Bob's locker code is 4711"})
    alice = context_for("alice", service)
    memory_id = secret["memory"]["id"]
    assert (await tools()["memory_search"].call(alice, {"query": "locker code 4711"}))["memories"] == []
    assert (await tools()["memory_load"].call(alice, {}))["memories"] == []
    with pytest.raises(MemoryNotFoundError):
        await tools()["memory_update"].call(alice, {"memory_id": memory_id, "memory": "mine now"})
    assert (await tools()["memory_delete"].call(alice, {"memory_id": memory_id}))["deleted"] is False
    assert (await tools(enable=["memory_clear"])["memory_clear"].call(alice, {}))["cleared"] == 0
    still = await tools()["memory_search"].call(bob, {"query": "locker code"})
    assert [m["memory"] for m in still["memories"]] == ["Bob's locker code is 4711"]


async def test_bad_arguments_and_a_missing_service_are_reported() -> None:
    service = InMemoryMemoryService()
    with pytest.raises(ValueError, match="2024-13-01"):
        await tools()["memory_add"].call(
            context_for("alice", service), {"memory": "x", "kind": "episode", "event_time": "2024-13-01"}
        )
    with pytest.raises(MemoryUnavailableError):
        await tools()["memory_search"].call(context_for("alice", None), {"query": "x"})


async def test_an_agent_remembers_and_recalls_through_a_run() -> None:
    service = InMemoryMemoryService()
    model = ScriptedModel.of(
        ScriptStep.call("memory_add", {"memory": "Prefers answers in Portuguese"}),
        "Noted.",
        ScriptStep.call("memory_search", {"query": "answers language"}),
        "You prefer Portuguese.",
    )
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="a", model=model, tools=memory_function_tools())],
        session_service=InMemorySessionService(),
        services={"memory": service},
    )
    first = await runner.start(user_id="alice", message="Please answer in Portuguese from now on.")
    await first.wait()
    second = await runner.start(user_id="alice", message="Which language do I want?")  # a new session
    await second.wait()
    model.assert_consumed()
    result = json.loads(model.requests[-1].messages[-1].content)
    assert [m["memory"] for m in result["memories"]] == ["Prefers answers in Portuguese"]


# -- preload --------------------------------------------------------------------------------------------


async def _service_with(*texts: str) -> InMemoryMemoryService:
    service = InMemoryMemoryService()
    for text in texts:
        await service.add(UserKey(app=APP, user_id="alice"), MemoryDraft(text=text))
        await asyncio.sleep(0.002)
    return service


async def test_preload_is_off_by_default_and_minus_one_loads_everything() -> None:
    service = await _service_with("Runs Go in production", "Prefers tea", "Has two cats")
    assert await memory_preload_block(service, app=APP, user_id="alice", preload=0, query="tea") is None
    block = await memory_preload_block(service, app=APP, user_id="alice", preload=-1, query="")
    assert block is not None
    assert (
        block.index("## Memory")
        < block.index(PRELOAD_BEGIN)
        < block.index("## User Memories")
        < block.index(PRELOAD_END)
    )
    assert block.count("\n- [") == 3 and "Prefers tea (kind=fact)" in block


async def test_adaptive_preload_picks_matches_for_the_message_else_the_most_recent() -> None:
    service = await _service_with("Runs Go in production", "Prefers tea", "Has two cats", "Lives in Lisbon")
    matched = await memory_preload_block(service, app=APP, user_id="alice", preload=2, query="What tea should I buy?")
    assert matched is not None and "Prefers tea" in matched and matched.count("\n- [") == 1
    fallback = await memory_preload_block(service, app=APP, user_id="alice", preload=2, query="Hello!")
    assert fallback is not None and "Lives in Lisbon" in fallback and "Has two cats" in fallback
    assert fallback.count("\n- [") == 2
    few = await _service_with("Prefers tea")
    assert "Prefers tea" in (await memory_preload_block(few, app=APP, user_id="alice", preload=2, query="x") or "")
    assert await memory_preload_block(InMemoryMemoryService(), app=APP, user_id="alice", preload=5, query="x") is None


async def test_preloaded_episodes_show_their_date() -> None:
    service = InMemoryMemoryService()
    await service.add(
        UserKey(app=APP, user_id="alice"),
        MemoryDraft(
            text="Moved to Lisbon",
            kind="episode",
            event_time=datetime(2024, 3, 1, tzinfo=UTC),
            location="Lisbon",
        ),
    )
    block = await memory_preload_block(service, app=APP, user_id="alice", preload=-1, query="")
    assert block is not None and "Moved to Lisbon (kind=episode; event_time=2024-03-01; location=Lisbon)" in block
