"""Artifact tools as an agent sees them: bound to the invocation's app, user and session."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from typing import Any

import pytest

from runs.core.agents.llm import LLMAgent
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.runner import Runner
from runs.core.tools.base import ToolContext
from sessions_app.artifact_backends import artifact_function_tools
from sessions_app.core.artifact_tools import ArtifactsUnavailableError
from sessions_app.core.artifacts import ArtifactError, InMemoryArtifactService, InvalidArtifactNameError
from sessions_app.core.inmemory import InMemorySessionService
from sessions_app.core.session import Session

APP = "tools"


def context_for(user: str, service: Any, session_id: str) -> ToolContext:
    return ToolContext(
        session=Session(app=APP, user_id=user, id=session_id),
        invocation_id="inv",
        tool_call_id="call",
        agent_name="agent",
        cancel_event=asyncio.Event(),
        services={"artifacts": service} if service is not None else {},
    )


TOOLS = {t.name: t for t in artifact_function_tools()}


def test_the_agent_gets_save_load_and_list_with_their_arguments() -> None:
    assert sorted(TOOLS) == ["artifact_list", "artifact_load", "artifact_save"]
    save = TOOLS["artifact_save"].spec().parameters
    assert save["required"] == ["filename", "content"] and "context" not in save["properties"]
    assert save["properties"]["encoding"]["enum"] == ["text", "base64"]


async def test_saving_twice_makes_two_versions_and_load_reads_them_back() -> None:
    service = InMemoryArtifactService()
    alice = context_for("alice", service, "s-1")
    first = await TOOLS["artifact_save"].call(alice, {"filename": "report.md", "content": "# Draft"})
    second = await TOOLS["artifact_save"].call(alice, {"filename": "report.md", "content": "# Final"})
    assert (first["version"], second["version"]) == (0, 1)
    assert second.items() >= {"filename": "report.md", "mime": "text/markdown", "size": 7, "saved": True}.items()
    assert second["url"] == "/api/sessions/s-1/artifacts/report.md?version=1"
    latest = await TOOLS["artifact_load"].call(alice, {"filename": "report.md"})
    assert (latest["version"], latest["content"], latest["truncated"]) == (1, "# Final", False)
    older = await TOOLS["artifact_load"].call(alice, {"filename": "report.md", "version": 0})
    assert older["content"] == "# Draft"
    missing = await TOOLS["artifact_load"].call(alice, {"filename": "report.md", "version": 5})
    assert missing["found"] is False
    listed = await TOOLS["artifact_list"].call(alice, {})
    assert [(a["filename"], a["versions"]) for a in listed["artifacts"]] == [("report.md", [0, 1])]


async def test_binary_content_travels_as_base64() -> None:
    service = InMemoryArtifactService()
    alice = context_for("alice", service, "s-1")
    png = b"\x89PNG\r\n\x1a\n\x00\x01"
    saved = await TOOLS["artifact_save"].call(
        alice,
        {
            "filename": "chart.png",
            "content": base64.b64encode(png).decode(),
            "encoding": "base64",
        },
    )
    assert (saved["mime"], saved["size"]) == ("image/png", len(png))
    loaded = await TOOLS["artifact_load"].call(alice, {"filename": "chart.png"})
    assert base64.b64decode(loaded["content_base64"]) == png
    with pytest.raises(ArtifactError, match="base64"):
        await TOOLS["artifact_save"].call(alice, {"filename": "x.bin", "content": "not base64!", "encoding": "base64"})


async def test_bad_names_and_a_missing_service_fail_the_tool() -> None:
    alice = context_for("alice", InMemoryArtifactService(), "s-1")
    with pytest.raises(InvalidArtifactNameError):
        await TOOLS["artifact_save"].call(alice, {"filename": "../../etc/passwd", "content": "x"})
    with pytest.raises(ArtifactsUnavailableError):
        await TOOLS["artifact_list"].call(context_for("alice", None, "s-1"), {})


async def test_alice_cannot_reach_bobs_artifacts_through_the_tools() -> None:
    service = InMemoryArtifactService()
    bob = context_for("bob", service, "s-bob")
    await TOOLS["artifact_save"].call(bob, {"filename": "secret.txt", "content": "bob only"})
    await TOOLS["artifact_save"].call(bob, {"filename": "user:notes.txt", "content": "bob's notes"})
    # Even inside a session with Bob's id, Alice's tools act as Alice.
    for alice in (context_for("alice", service, "s-alice"), context_for("alice", service, "s-bob")):
        assert (await TOOLS["artifact_list"].call(alice, {}))["artifacts"] == []
        assert (await TOOLS["artifact_load"].call(alice, {"filename": "secret.txt"}))["found"] is False
        assert (await TOOLS["artifact_load"].call(alice, {"filename": "user:notes.txt"}))["found"] is False


async def test_user_scoped_files_follow_the_user_into_a_new_session() -> None:
    service = InMemoryArtifactService()
    await TOOLS["artifact_save"].call(
        context_for("alice", service, "s-1"), {"filename": "user:style.md", "content": "terse"}
    )
    later = await TOOLS["artifact_load"].call(context_for("alice", service, "s-2"), {"filename": "user:style.md"})
    assert later["content"] == "terse"


async def test_a_run_that_saves_an_artifact_records_it_in_the_ledger() -> None:
    service = InMemoryArtifactService()
    model = ScriptedModel.of(
        ScriptStep.call("artifact_save", {"filename": "plan.md", "content": "1. renew cert"}), "Saved."
    )
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="a", model=model, tools=artifact_function_tools())],
        session_service=InMemorySessionService(),
        services={"artifacts": service},
    )
    handle = await runner.start(user_id="alice", message="write the plan down")
    await handle.wait()
    events = await runner.session_service.list_events(handle.invocation.session.key)
    result = next(e for e in events if e.is_tool_result)
    saved = json.loads(result.text)
    assert (saved["filename"], saved["version"], saved["mime"]) == ("plan.md", 0, "text/markdown")
    assert saved["url"] == f"/api/sessions/{handle.session_id}/artifacts/plan.md?version=0"


@pytest.mark.skipif(
    "extensions" not in {f.name for f in dataclasses.fields(ToolContext)},
    reason="needs ToolContext.extensions copied onto the tool-result event (runs/core/tools/base.py + flow/tools.py)",
)
async def test_a_saved_artifacts_tool_result_event_carries_the_artifact_extension() -> None:
    model = ScriptedModel.of(ScriptStep.call("artifact_save", {"filename": "plan.md", "content": "1. renew"}), "Saved.")
    runner = Runner(
        app=APP,
        agents=[LLMAgent(name="a", model=model, tools=artifact_function_tools())],
        session_service=InMemorySessionService(),
        services={"artifacts": InMemoryArtifactService()},
    )
    handle = await runner.start(user_id="alice", message="write the plan down", stream=True)
    emitted = [e async for e in handle.events()]
    result = next(e for e in emitted if e.is_tool_result)
    assert result.extensions["artifact"] == {
        "filename": "plan.md",
        "version": 0,
        "url": f"/api/sessions/{handle.session_id}/artifacts/plan.md?version=0",
        "mime": "text/markdown",
        "size": 8,
    }
    stored = next(
        e for e in await runner.session_service.list_events(handle.invocation.session.key) if e.is_tool_result
    )
    assert stored.extensions["artifact"]["version"] == 0
