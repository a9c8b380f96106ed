"""The execution trace of a run (SPEC 1.9.3, issue 21): built from the events the runner
sees, stored with the run when it ends, served by GET /api/runs/<id>/trace/ to its owner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from ag_ui.core import EventType

from agentsite.demo.graph import build_troubleshoot_agent
from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep
from runs.core.protocols.agui import AguiTranslator
from runs.core.runner import Runner
from sessions_app.core.inmemory import InMemorySessionService

pytestmark = pytest.mark.django_db(transaction=True)


def test_spec_1_9_3_a_runs_trace_holds_its_model_and_tool_calls_with_durations_and_parents(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(
        ScriptedModel.of(
            ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1042"}), "INC-1042 was an expired certificate."
        )
    )
    run = alice_api.post("/api/runs/", {"message": "What happened in INC-1042?", "wait": True}, format="json").json()
    assert run["status"] == "completed"

    response = alice_api.get(f"/api/runs/{run['id']}/trace/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["run_id"], body["status"]) == (run["id"], "completed")
    trace = body["trace"]
    assert trace["status"] == "completed" and trace["duration_ms"] >= 0 and trace["dropped_spans"] == 0
    spans = {s["id"]: s for s in trace["spans"]}
    root = spans["run"]
    agent = next(s for s in trace["spans"] if s["kind"] == "agent")
    models = [s for s in trace["spans"] if s["kind"] == "model"]
    [tool] = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert root["parent"] is None and root["status"] == "ok"
    assert agent["parent"] == "run" and agent["name"] == "support"
    assert len(models) == 2 == run["model_calls"]
    assert all(m["parent"] == agent["id"] and m["status"] == "ok" and m["duration_ms"] >= 0 for m in models)
    assert tool["name"] == "lookup_ticket" and tool["parent"] == models[0]["id"] and tool["status"] == "ok"
    assert tool["duration_ms"] >= 0
    assert models[0]["start_ms"] <= tool["start_ms"] <= models[1]["start_ms"]  # in the order they ran

    # Someone else's run is not found, and neither is an unknown one.
    assert bob_api.get(f"/api/runs/{run['id']}/trace/").status_code == 404
    missing = alice_api.get("/api/runs/no-such-run/trace/")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_spec_1_9_3_a_failed_tool_and_a_failed_run_are_marked_in_the_trace(
    alice_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket": "wrong argument"})))
    run = alice_api.post("/api/runs/", {"message": "look it up", "wait": True}, format="json").json()
    assert run["status"] == "failed"  # the script ran out after the tool call

    trace = alice_api.get(f"/api/runs/{run['id']}/trace/").json()["trace"]
    [tool] = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert tool["status"] == "error"  # bad arguments: the result is an error for the model
    assert trace["status"] == "failed" and next(s for s in trace["spans"] if s["id"] == "run")["status"] == "error"


async def test_issue_21_the_parallel_tool_nodes_of_the_troubleshoot_graph_finish_done_not_stopped() -> None:
    runner = Runner(app="t", agents=[build_troubleshoot_agent()], session_service=InMemorySessionService())
    handle = await runner.start(user_id="alice", message="payments-api TLS errors on pay-01", stream=True)
    translator = AguiTranslator(thread_id=handle.session_id)
    finished: dict[str, Any] = {}
    async for event in handle.events():
        for frame in translator.translate(event, run_id=handle.run_id):
            if frame.type == EventType.STEP_FINISHED and frame.metadata and "graph" in frame.metadata:
                finished.setdefault(frame.step_name, frame.metadata["graph"].get("status"))
    assert (await handle.wait()).status == "completed"

    # Both tools finished: their steps end without a status (the chat shows "done").
    assert finished["collect_logs"] is None and finished["check_certificate"] is None
    assert finished["approve"] == "paused"
    # The trace has the two nodes, overlapping, each ended by its own complete event.
    trace = (await handle.wait()).trace
    assert trace is not None
    nodes = {s["name"]: s for s in trace["spans"] if s["kind"] == "node"}
    assert nodes["collect_logs"]["status"] == nodes["check_certificate"]["status"] == "ok"
    assert nodes["approve"]["status"] == "paused"


def test_issue_21_the_trace_page_shows_the_runs_timeline_to_its_owner_only(
    alice: Any, bob: Any, alice_api: Any, client: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1042"}), "It is open."))
    run = alice_api.post("/api/runs/", {"message": "INC-1042?", "wait": True}, format="json").json()

    client.force_login(alice)
    page = client.get(f"/runs/{run['id']}/trace/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="trace-table"' in html and 'data-kind="tool"' in html and "lookup_ticket" in html
    assert html.count('data-kind="model"') == 2
    # The chat loads the module that links each answer to its run's trace.
    assert "agentsite/trace.js" in client.get("/").content.decode()

    client.force_login(bob)
    assert client.get(f"/runs/{run['id']}/trace/").status_code == 404
