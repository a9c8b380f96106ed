"""The graph drawn in the run trace (issue 21): `graph_shape` turns a compiled graph into the
nodes, edges and layers the trace page draws, and `GET /api/runs/<id>/trace/` serves the
run's agent's graph beside its trace, with what the runs a resumed run continues ran
(`earlier`). `progress` (a run still going) is checked in tests/integration/test_browser_trace_graph.py."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from agentsite.demo.graph import build_troubleshoot_graph
from runs import selectors
from runs.core.agents.graph import END, START, StateGraph, StateSchema
from runs.core.agents.graph.diagram import agent_graph_shape, graph_shape
from runs.graph_progress import graph_progress

TLS_QUESTION = "Why does payments.internal.example.com fail TLS handshakes?"


def noop(state: Any) -> None:
    return None


def test_the_troubleshoot_graph_has_its_nodes_edges_and_layers() -> None:
    shape = graph_shape(build_troubleshoot_graph().compile())

    assert shape["name"] == "troubleshoot"
    layers = {n["id"]: n["layer"] for n in shape["nodes"]}
    assert layers == {
        START: 0,
        "plan": 1,
        "collect_logs": 2,
        "check_certificate": 2,
        "decide": 3,
        "draft_report": 4,
        "all_clear": 4,
        "approve": 5,
        "publish": 6,
        "discard": 6,
        END: 7,
    }
    assert [n["id"] for n in shape["nodes"]][:3] == [START, "plan", "collect_logs"]  # declaration order
    kinds = {n["id"]: n["kind"] for n in shape["nodes"]}
    assert (kinds[START], kinds["collect_logs"], kinds["plan"], kinds[END]) == ("start", "tool", "function", "end")
    assert next(n for n in shape["nodes"] if n["id"] == "decide")["description"] == "weigh the evidence"
    edges = {(e["source"], e["target"], e["kind"], e.get("label")) for e in shape["edges"]}
    assert edges == {
        (START, "plan", "edge", None),
        ("plan", "collect_logs", "edge", None),
        ("plan", "check_certificate", "edge", None),
        ("collect_logs", "decide", "join", None),
        ("check_certificate", "decide", "join", None),
        ("decide", "draft_report", "branch", "problem"),
        ("decide", "all_clear", "branch", "healthy"),
        ("draft_report", "approve", "edge", None),
        ("approve", "publish", "branch", "approved"),
        ("approve", "discard", "branch", "rejected"),
        # Compiling drops plain edges to END; the shape puts them back.
        ("publish", END, "edge", None),
        ("discard", END, "edge", None),
        ("all_clear", END, "edge", None),
    }
    joins = {e["join"] for e in shape["edges"] if e["kind"] == "join"}
    assert joins == {"check_certificate+collect_logs->decide"}  # both edges, one join


def test_a_loop_back_does_not_push_its_target_down() -> None:
    graph = StateGraph("loop", StateSchema.of(n="overwrite"))
    for name in ("a", "b", "c"):
        graph.add_node(name, noop)
    graph.set_entry_point("a")
    graph.add_edge("a", "b")
    graph.add_conditional_edges("b", lambda s: "done", {"again": "a", "next": "c", "done": END})
    graph.add_edge("c", END)

    shape = graph_shape(graph.compile())

    assert {n["id"]: n["layer"] for n in shape["nodes"]} == {START: 0, "a": 1, "b": 2, "c": 3, END: 4}
    assert ("b", "a", "again") in {(e["source"], e["target"], e.get("label")) for e in shape["edges"]}
    assert ("b", END, "done") in {(e["source"], e["target"], e.get("label")) for e in shape["edges"]}


def test_only_a_graph_agent_has_a_shape() -> None:
    assert agent_graph_shape(object()) is None
    assert agent_graph_shape(None) is None


@pytest.mark.django_db(transaction=True)
def test_the_trace_api_serves_the_run_agent_s_graph(alice_api: Any, bob_api: Any) -> None:
    graph_run = alice_api.post(
        "/api/runs/",
        {"message": TLS_QUESTION, "agent": "troubleshoot", "wait": True},
        format="json",
    ).json()
    body = alice_api.get(f"/api/runs/{graph_run['id']}/trace/").json()
    assert body["session_id"] == graph_run["session_id"]
    assert body["graph"] == graph_shape(build_troubleshoot_graph().compile())
    # The trace's node spans name the same nodes the page colours.
    spans = {s["name"]: s["status"] for s in body["trace"]["spans"] if s["kind"] == "node"}
    assert spans and set(spans) <= {n["id"] for n in body["graph"]["nodes"]}

    assert body["progress"] is None  # ended: its trace says where it got to
    assert body["earlier"] == {}

    # The run that answers the pause: `earlier` says what ran before it, in the paused run.
    resumed = alice_api.post(
        f"/api/runs/{graph_run['id']}/resume/",
        {"value": {"approved": True}, "message": "Approve"},
        format="json",
    ).json()
    for _ in range(100):
        again = alice_api.get(f"/api/runs/{resumed['id']}/trace/").json()
        if again["trace"]:
            break
        time.sleep(0.05)
    assert again["earlier"] == spans
    assert again["earlier"]["approve"] == "paused"
    assert {s["name"]: s["status"] for s in again["trace"]["spans"] if s["kind"] == "node"} == {
        "approve": "ok",
        "publish": "ok",
    }

    plain = alice_api.post("/api/runs/", {"message": "hello", "agent": "general", "wait": True}, format="json").json()
    assert alice_api.get(f"/api/runs/{plain['id']}/trace/").json()["graph"] is None
    assert bob_api.get(f"/api/runs/{graph_run['id']}/trace/").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_progress_reads_the_supersteps_from_the_checkpoints(alice: Any, alice_api: Any) -> None:
    ran = alice_api.post(
        "/api/runs/", {"message": TLS_QUESTION, "agent": "troubleshoot", "wait": True}, format="json"
    ).json()
    record = selectors.run_get(user=alice, run_id=ran["id"])
    assert record is not None
    assert graph_progress(record=record) is None  # ended
    # The same checkpoints, read as if the run were still at its last one (the approval).
    going = dataclasses.replace(record, status="running")
    assert graph_progress(record=going) == {
        "done": ["plan", "collect_logs", "check_certificate", "decide", "draft_report"],
        "running": ["approve"],
    }
