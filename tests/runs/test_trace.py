"""The execution trace of a run (SPEC 1.9.3, issue 21): built from the events the runner
sees, stored with the run when it ends, served by GET /api/runs/<id>/trace/ to its owner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runs.core.llm.base import Model
from runs.core.llm.scripted import ScriptedModel, ScriptStep

pytestmark = pytest.mark.django_db(transaction=True)


def test_spec_1_9_3_a_runs_trace_holds_its_model_and_tool_calls_with_durations_and_parents(
    alice_api: Any, bob_api: Any, use_model: Callable[[Model], None]
) -> None:
    use_model(ScriptedModel.of(
        ScriptStep.call("lookup_ticket", {"ticket_id": "INC-1042"}), "INC-1042 was an expired certificate."
    ))
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
