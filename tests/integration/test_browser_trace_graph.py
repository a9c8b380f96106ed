"""The graph in the run trace (issue 21), in Chromium against a live Daphne: the trace of a
graph run draws the agent's graph (from the trace API, not the page) with each node's
state, beside a text list of the same; opened while the run goes on, it starts from the
run's checkpoints and follows the session's socket live. The live case uses a test double,
`tests.support.graph_double`, whose middle node waits for a gate file the test creates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_browser import (  # noqa: F401  (fixtures used by name)
    TLS_QUESTION,
    Frames,
    _require_chromium,
    browser,
    carol,
    log_in,
    open_page,
    send,
    shoot,
)
from tests.support.daphne import LiveServer, live_daphne
from tests.support.graph_double import GATE_ENV
from tests.support.graph_double import NAME as DOUBLE

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

AGENTS = ",".join(
    (
        "agentsite.demo.factories:support_agent",
        "agentsite.demo.factories:troubleshoot_agent",
        "tests.support.graph_double:gated_graph_double",
    )
)


@pytest.fixture
def gate(tmp_path: Path) -> Path:
    return tmp_path / "gate"


@pytest.fixture
def graph_server(tmp_path: Path, transactional_db: Any, carol: Any, gate: Path) -> Iterator[LiveServer]:  # noqa: F811
    env = {
        "DJANGO_DEBUG": "1",
        "AGENTSITE_MODEL": "offline",
        "AGENTSITE_MEMORY_AUTO": "0",
        "AGENTSITE_AGENTS": AGENTS,
        GATE_ENV: str(gate),
    }
    with live_daphne(tmp_path, env=env) as live:
        yield live


def node(page: Any, name: str) -> Any:
    return page.locator(f'.graph-node-item[data-node="{name}"]')


def open_trace(page: Any) -> Any:
    """The trace page of the newest answer, opened from its link in the chat. The link is
    added to the last answer when its run ends, after the answer's text shows: the click waits
    for it there (the last link on the page may still be an earlier run's)."""
    newest = page.locator(".msg-assistant").last
    newest.get_by_role("link", name="Trace of the run that wrote this answer").click()
    page.wait_for_url("**/trace/")
    return page


def test_the_trace_of_a_graph_run_draws_its_graph_with_each_node_s_state(
    graph_server: LiveServer,
    browser: Any,  # noqa: F811
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, color_scheme="light")
    log_in(page, graph_server)
    page.get_by_label("Agent").select_option("troubleshoot")
    send(page, TLS_QUESTION)
    approval = page.get_by_role("group", name="Approval needed")
    expect(approval).to_contain_text("Approve this incident report?")
    chat_url = page.url
    open_trace(page)

    diagram = page.get_by_role(
        "img", name="Diagram of the troubleshoot graph; the list beside it gives each node's state"
    )
    expect(diagram).to_be_visible()
    listed = page.get_by_role("list", name="Nodes of the troubleshoot graph and their states")
    expect(listed.get_by_role("listitem")).to_have_count(9)  # the agent's nine nodes, not start and end
    for name in ("plan", "collect_logs", "check_certificate", "decide", "draft_report"):
        expect(node(page, name)).to_have_attribute("data-state", "done")
        expect(node(page, name)).to_contain_text(f"{name}: done")
    expect(node(page, "approve")).to_contain_text("approve: waiting for approval")
    for name in ("publish", "discard", "all_clear"):
        expect(node(page, name)).to_contain_text(f"{name}: not reached")
    # The drawing: every node and edge of the definition, states on the nodes.
    expect(page.locator("svg.graph-diagram g.graph-node")).to_have_count(11)
    expect(page.locator("svg.graph-diagram path.graph-edge")).to_have_count(13)
    expect(page.locator('svg.graph-diagram g[data-node="approve"]')).to_have_attribute("data-state", "paused")
    expect(page.locator('svg.graph-diagram g[data-node="decide"] .graph-node-state')).to_have_text("done")
    expect(page.locator("svg.graph-diagram .graph-edge-label", has_text="approved")).to_have_count(1)
    expect(page.locator("#trace-graph")).to_have_attribute("data-live", "ended")
    shoot(page, "trace-graph-paused.png")

    # After the approval: the resumed run's trace shows what it ran, and what ran before the
    # pause (in the run it resumed) marked as such.
    page.goto(chat_url)
    approval.get_by_role("button", name="Approve").click()
    expect(page.locator(".msg-assistant .msg-bubble").last).to_contain_text("Approved: this report is final.")
    open_trace(page)
    for name in ("approve", "publish"):
        expect(node(page, name)).to_have_text(
            f"{name}: done ({'wait for a human to approve the report' if name == 'approve' else 'make the approved report final'})"
        )
    for name in ("plan", "decide"):
        expect(node(page, name)).to_have_attribute("data-state", "done")
        expect(node(page, name)).to_contain_text(f"{name}: done · before the pause")
    for name in ("discard", "all_clear"):
        expect(node(page, name)).to_have_attribute("data-state", "pending")
    shoot(page, "trace-graph-finished.png")
    assert page.js_errors == []


def test_the_trace_opened_mid_run_follows_the_graph_live(
    graph_server: LiveServer,
    browser: Any,  # noqa: F811
    gate: Path,
) -> None:
    from playwright.sync_api import expect

    page = open_page(browser, color_scheme="light")
    chat_frames = Frames(page)
    log_in(page, graph_server)
    page.get_by_label("Agent").select_option(DOUBLE)
    send(page, "go")
    run_id = chat_frames.wait_for(page, "run.accepted")[-1]["run_id"]
    expect(page.locator('.graph-card .graph-node[data-node="wait_for_gate"]')).to_have_attribute(
        "data-status", "running"
    )

    trace = page.context.new_page()
    errors: list[str] = []
    trace.on("pageerror", lambda error: errors.append(str(error)))
    frames = Frames(trace)
    trace.goto(f"{graph_server.url}/runs/{run_id}/trace/")
    root = trace.locator("#trace-graph")
    expect(root).to_have_attribute("data-live", "following")
    # Where the run is, from its checkpoints: the first node ran, the gate's is running.
    expect(node(trace, "prepare")).to_have_attribute("data-state", "done")
    expect(node(trace, "wait_for_gate")).to_contain_text("wait_for_gate: in progress")
    expect(node(trace, "finish")).to_have_attribute("data-state", "pending")
    expect(trace.get_by_role("status").filter(has_text="The run is in progress")).to_be_visible()
    shoot(trace, "trace-graph-live.png")

    gate.touch()
    expect(node(trace, "finish")).to_have_attribute("data-state", "done")
    expect(node(trace, "wait_for_gate")).to_have_attribute("data-state", "done")
    expect(node(trace, "skipped")).to_contain_text("skipped: not reached")
    expect(root).to_have_attribute("data-live", "ended")
    expect(root.get_by_role("link", name="Show its timeline")).to_be_visible()

    # The states came over the trace page's own socket, as the run made them (a node that
    # started before the page connected ends without a STEP_FINISHED of its own: the next
    # node's start says it).
    def nodes_of(kind: str) -> list[str]:
        return [f["metadata"]["graph"]["node"] for f in frames.of_type(kind) if "graph" in (f.get("metadata") or {})]

    assert nodes_of("STEP_STARTED") == ["finish"]
    assert nodes_of("STEP_FINISHED") == ["finish"]
    assert [f["runId"] for f in frames.of_type("RUN_FINISHED")] == [run_id]
    # A screen reader hears each change in the live region.
    expect(trace.locator("#trace-graph-status")).to_have_text("finish: done")
    trace.reload()  # the ended run: its stored trace, no socket
    expect(node(trace, "finish")).to_have_attribute("data-state", "done")
    expect(node(trace, "prepare")).to_have_attribute("data-state", "done")
    assert errors == [] and page.js_errors == []
